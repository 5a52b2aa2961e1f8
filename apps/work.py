"""The CPU work kernel of the synthetic programs.

One work unit is ``WORK_UNIT_S`` of the calling thread's own CPU time at CPU rate 1.0. A node's quota
makes it a full-speed CPU for part of each period, so one ms of thread CPU time is one unit whatever the
TDF; a slower node simply takes longer (in wall time) to deliver it.

:func:`work` burns until the thread's CPU clock (``CLOCK_THREAD_CPUTIME_ID``: the scheduler's own
nanosecond count, current to the call) has advanced by the units asked for. It replaced a loop of
iterations calibrated against that clock by a probe: the cost of an iteration moved with the loop's
length, the cache and the other core's load, so a unit cost 10-30 % more or less CPU than calibrated.
The clock read is a system call (~0.6 us here): a unit overshoots by at most one read
(``python benchmarks/work_unit.py`` measures both kernels in the same run).
"""

from __future__ import annotations

import time

#: One work unit is this much CPU time on a node of CPU rate 1.0 (emulated seconds). The one definition:
#: apps/base.py (the kinds' interface, and through it testbed.core.jobs) takes it from here, a module a
#: worker imports without pydantic or the policy types.
WORK_UNIT_S = 0.001
_UNIT_NS = 1_000_000


def work(units: float) -> None:
    """Burns ``units`` work units of this thread's CPU time (holds the GIL; the only system call is the
    clock read, so a SIGSTOP still takes effect at once)."""
    if units <= 0:
        return
    clock = time.thread_time_ns
    end = clock() + round(units * _UNIT_NS)
    while clock() < end:
        pass
