"""Ctrl-C held back while something must finish: a run's results being written (testbed/runner.py) and a
real run's teardown (testbed/emulator/backend.py). A second Ctrl-C used to cut either short, leaving a
run without jobs.csv, or Ray and the node agents' processes for the janitor to find."""

from __future__ import annotations

import contextlib
import signal
import threading

#: The signals held back: Ctrl-C, and SIGTERM, which the CLI treats as one.
DEFERRED = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def interrupts_deferred():
    """Ctrl-C and SIGTERM held back for the block (main thread only: signals are delivered there), and
    raised as one KeyboardInterrupt after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {sig: signal.signal(sig, lambda signum, _frame: got.append(signum)) for sig in DEFERRED}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if got:
        raise KeyboardInterrupt
