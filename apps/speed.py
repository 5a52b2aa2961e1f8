"""The host's speed, for measured models: a fixed piece of numpy work and the CPU it takes here, now.

A measured model (a NAS kernel's, apps/nas/models/; a user's MPI program's, apps/mpi_trace.py) records
CPU seconds of the host it was recorded on, at the minutes it was recorded. The same work takes another
host more or less CPU, and this host too at another time: its speed drifts by 8-22 % within minutes with
nothing else running (docs/measurements.md, "Each kernel against a model of the same minutes"). A model
stamped with :func:`speed_s` at its recording can be replayed for a host whose :func:`speed_s` is known:
its CPU scaled by the ratio (the simulator's ``cluster.host_speed_s``; a real run records its own in
summary.json).

The work is the kernels' kinds of work on data of a few MB (about a class S problem's): a complex FFT
(FT), a 7-point stencil sweep (MG), a sort of integer keys (IS), an indexed gather and sum (CG's sparse
product), and elementwise logarithms and square roots over random numbers (EP). Single-threaded, as the
models are recorded (one BLAS thread, and none of this calls BLAS). Each part is timed on the thread's
own CPU clock, so the host's other load does not count, only how fast it computes; the figure is the sum
over the parts of each part's least time over :data:`REPEATS` tries, the least being the try that other
work disturbed least (caches, a hypervisor's neighbours).
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Tries of each part; the least is kept.
REPEATS = 5
#: Calls of a part per try: about 10 ms of CPU a try here (2026-11-27), well above the clock's grain.
CALLS = 4


def _parts() -> list[Callable[[], object]]:
    import numpy as np  # here: the simulator's replay imports this module for scale() alone

    rng = np.random.default_rng(20261127)
    signal = rng.standard_normal(1 << 16) + 1j * rng.standard_normal(1 << 16)
    grid = rng.standard_normal((64, 64, 64))
    keys = rng.integers(0, 1 << 19, 1 << 18)
    values = rng.standard_normal(1 << 18)
    index = rng.integers(0, 1 << 18, 1 << 19)
    uniform = rng.random(1 << 18)

    def stencil() -> object:
        inner = grid[1:-1, 1:-1, 1:-1] * -6.0
        inner += grid[:-2, 1:-1, 1:-1] + grid[2:, 1:-1, 1:-1] + grid[1:-1, :-2, 1:-1]
        inner += grid[1:-1, 2:, 1:-1] + grid[1:-1, 1:-1, :-2] + grid[1:-1, 1:-1, 2:]
        return inner

    return [
        lambda: np.fft.ifft(np.fft.fft(signal)),
        stencil,
        lambda: np.sort(keys),
        lambda: values[index].sum(),
        lambda: np.sqrt(-2.0 * np.log(uniform + 1e-12)).sum(),
    ]


def speed_s() -> float:
    """CPU seconds this host takes for the fixed work now: smaller is faster."""
    total = 0.0
    for part in _parts():
        part()  # first touch of its output's memory, outside the timing
        best = float("inf")
        for _ in range(REPEATS):
            t0 = time.thread_time()
            for _ in range(CALLS):
                part()
            best = min(best, time.thread_time() - t0)
        total += best
    return round(total, 6)


def scale(host_speed_s: float | None, model_speed_s: float | None) -> float:
    """The factor for a model's CPU: 1 where either speed is unknown (the model replays as recorded)."""
    if host_speed_s is None or model_speed_s is None:
        return 1.0
    return host_speed_s / model_speed_s


__all__ = ["CALLS", "REPEATS", "scale", "speed_s"]
