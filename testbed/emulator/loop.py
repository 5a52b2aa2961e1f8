"""An asyncio loop for components that must act on time (node agents, the coordinator).

asyncio's default selector (epoll) takes its timeout in whole milliseconds and rounds up, which makes a
timer 0.5-1 ms late (docs/measurements.md, "Timers in Python"). ``select()`` takes microseconds; the fd counts
here are small.
"""

from __future__ import annotations

import asyncio
import selectors
import threading
from collections.abc import Callable
from typing import Any


def new_loop() -> asyncio.AbstractEventLoop:
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    # asyncio treats timers within this of "now" as due; keep it tight.
    loop._clock_resolution = 1e-6  # type: ignore[attr-defined]
    return loop


class LoopThread:
    """Runs an asyncio loop in a thread of its own; other threads submit work with :meth:`call`."""

    def __init__(self, name: str, on_start: Callable[[], Any] | None = None) -> None:
        self.loop = new_loop()
        self._ready = threading.Event()
        self._on_start = on_start
        self.start_result: Any = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        if self._on_start is not None:
            self.start_result = self._on_start()
        self._ready.set()
        self.loop.run_forever()

    def call(self, coro_or_fn, *args, timeout: float | None = None):
        """Runs a coroutine function or a plain function on the loop and waits for its result."""
        if asyncio.iscoroutinefunction(coro_or_fn):
            fut = asyncio.run_coroutine_threadsafe(coro_or_fn(*args), self.loop)
            return fut.result(timeout)

        async def _wrap():
            return coro_or_fn(*args)

        return asyncio.run_coroutine_threadsafe(_wrap(), self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
