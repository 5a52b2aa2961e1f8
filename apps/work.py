"""The CPU work kernel of the synthetic programs, and its calibration.

One work unit is ``WORK_UNIT_S`` of CPU time on a node of CPU rate 1.0 (testbed.jobs). Calibration counts
CPU time (``time.thread_time``), not wall time, so it is right even on a throttled or shared node: a
unit is then a fixed amount of computation, and a slower node simply takes longer to do it.
"""

from __future__ import annotations

import time

#: Must equal testbed.jobs.WORK_UNIT_S (a test checks it); not imported from there because that module
#: pulls in the policy types, and a worker's import time matters.
WORK_UNIT_S = 0.001

_MASK = 0xFFFFF  # keeps the accumulator a small int, so every iteration costs the same


def spin(iterations: int, x: int = 1) -> int:
    """``iterations`` rounds of deterministic integer arithmetic; returns the accumulator."""
    for i in range(iterations):
        x = (x * 31 + i) & _MASK
    return x


def work(units: float, iters_per_unit: int) -> int:
    """Burns ``units`` work units of CPU (pure Python, holds the GIL, makes no system calls)."""
    if units <= 0:
        return 0
    return spin(int(round(units * iters_per_unit)))


def calibrate(cpu_seconds: float = 0.2) -> int:
    """Loop iterations per work unit, measured over about ``cpu_seconds`` of this thread's CPU time."""
    spin(20_000)  # warm up (bytecode caches, CPU frequency)
    chunk = 20_000
    iters = 0
    t0 = time.thread_time()
    while True:
        spin(chunk)
        iters += chunk
        used = time.thread_time() - t0
        if used >= cpu_seconds:
            break
    return max(1, round(iters * WORK_UNIT_S / used))
