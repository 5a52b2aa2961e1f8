"""Ctrl-C held back while something must finish: a run's teardown and its results being written.

A run (testbed/runner.py run_once) holds Ctrl-C and SIGTERM for its whole length, and lets them through
only where the run itself may be stopped: the backend marks those parts :func:`interruptible` (start-up,
the run, the simulation's loop). So a first Ctrl-C stops the run there; a second one, or a first one that
lands in the teardown, in the results being written, or between the two, waits for them and is raised
after as one KeyboardInterrupt. Before, a second Ctrl-C cut the teardown short (Ray and the nodes'
processes left to the janitor), and one landing between the teardown's end and the results' start left
a run without jobs.csv and summary.json.

Signals are delivered to the main thread only: from any other thread both context managers do nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading

#: The signals held back: Ctrl-C, and SIGTERM, which the CLI treats as one.
DEFERRED = (signal.SIGINT, signal.SIGTERM)


class _Held:
    """The process's one deferral: how deep the nested blocks are, the signals held, and whether the
    innermost block lets them through."""

    depth = 0
    got: list[int] = []
    through = False


def _handler(signum, _frame) -> None:
    if _Held.through:
        _Held.through = False  # one KeyboardInterrupt per region: what follows it is teardown
        raise KeyboardInterrupt
    _Held.got.append(signum)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def interrupts_deferred():
    """Ctrl-C and SIGTERM held back for the block, and raised as one KeyboardInterrupt after it. Nested
    blocks leave the raising to the outermost."""
    if not _main_thread():
        yield
        return
    outer = _Held.depth == 0
    old = {sig: signal.signal(sig, _handler) for sig in DEFERRED} if outer else {}
    if outer:
        _Held.got = []
    through, _Held.through = _Held.through, False
    _Held.depth += 1
    try:
        yield
    finally:
        _Held.depth -= 1
        _Held.through = through
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if outer and _Held.got:
        raise KeyboardInterrupt


@contextlib.contextmanager
def interruptible():
    """Inside a deferral, the part that Ctrl-C may stop: the first one raises KeyboardInterrupt at once
    (one held back before the block raises at its start). Outside any deferral, nothing changes."""
    if not _main_thread() or _Held.depth == 0:
        yield
        return
    if _Held.got:
        _Held.got = []
        raise KeyboardInterrupt
    _Held.through = True
    try:
        yield
    finally:
        _Held.through = False
