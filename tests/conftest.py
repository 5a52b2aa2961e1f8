"""Options and helpers shared by every test folder.

``--soak``: the fault tests (tests/e2e/test_faults.py) run once each by default; with --soak each runs
SOAK_RUNS times (the extra runs are marked ``soak``; ``-m soak --soak`` runs only those), so an exit path
that fails only sometimes shows up. ``.ci/run`` adds them when they fit in CI's time.

``--extended``: tests marked ``extended`` take minutes each (a sweep over every registered scheduler on
real processes); the default run leaves them out, ``-m extended --extended`` runs only them, and
``.ci/run`` runs them when they fit.
"""

from __future__ import annotations

import functools
import os
import signal
import time

import pytest

SOAK_RUNS = 5


def pytest_addoption(parser):
    parser.addoption(
        "--soak",
        action="store_true",
        default=False,
        help=f"run each fault test {SOAK_RUNS} times instead of once (the extra runs are marked soak)",
    )
    parser.addoption(
        "--extended",
        action="store_true",
        default=False,
        help="also run the tests marked extended (minutes each)",
    )


def pytest_configure(config):
    # A background job of a non-interactive shell (`pytest &` in a script) starts with SIGINT ignored,
    # and every run the tests start would inherit that: the Ctrl-C tests then hang until their timeout.
    # A handler here is reset to the default in each child at exec, so the runs take Ctrl-C as from a
    # terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(config, items):
    left_out = [m for m in ("soak", "extended") if not config.getoption(f"--{m}")]
    dropped = [i for i in items if any(i.get_closest_marker(m) for m in left_out)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if i not in dropped]


def soak(fn):
    """Runs the test once, and SOAK_RUNS times with --soak (parameter ``rep``: 1, 2, ...)."""
    reps = [1, *(pytest.param(k, marks=pytest.mark.soak) for k in range(2, SOAK_RUNS + 1))]
    return pytest.mark.parametrize("rep", reps)(fn)


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def wait_for(pred, timeout: float = 5.0, step: float = 0.02) -> bool:
    """Whether ``pred()`` came true within ``timeout`` s, asking every ``step`` s (0: without pause)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        if step:
            time.sleep(step)
    return pred()


def require(ok: bool, reason: str) -> None:
    """Skips the test, saying why, when something it needs is missing here; with CI=true it fails
    instead: CI must not pass without testing what it claims to (.ci/run installs what it needs)."""
    if ok:
        return
    if in_ci():
        pytest.fail(f"CI=true, and {reason}", pytrace=False)
    pytest.skip(reason)


def requires(ok: bool, reason: str):
    """Decorator form of :func:`require`, decided when the module is imported."""

    def deco(fn):
        if ok:
            return fn

        @functools.wraps(fn)
        def missing(*args, **kwargs):
            require(False, reason)

        return missing

    return deco


def measured(measure, ok, *, why: str, attempts: int = 3):
    """``measure()`` until ``ok(value)``, at most ``attempts`` times; returns the value that passed.

    For a wall-clock or CPU-time window that holds on this host when it has a spare core, and that a
    loaded host (other tests, other users of the 2 cores) can push one measurement out of: ``why`` says
    which window and why load moves it. A bound that load cannot move (a delay never shorter than the
    emulated one, a quota never exceeded) is asserted on every measurement instead, not retried."""
    values = []
    for k in range(attempts):
        value = measure()
        values.append(value)
        if ok(value):
            if k:
                print(f"\n(passed on try {k + 1} of {attempts}; earlier tries: {values[:-1]}; {why})")
            return value
    raise AssertionError(f"outside the window in all {attempts} tries ({why}): {values}")
