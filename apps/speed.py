"""The host's speed, for measured models: a fixed piece of numpy work and the CPU it takes here, now.

A measured model (a NAS kernel's, apps/nas/models/; a user's MPI program's, apps/mpi_trace.py) records
CPU seconds of the host it was recorded on, at the minutes it was recorded. The same work takes another
host more or less CPU, and this host too at another time: its speed moved by up to a third within
minutes with nothing else running (docs/measurements.md, "Each kernel against a model of the same
minutes"). A model stamped with :func:`speed_s` at its recording can be replayed for a host whose
:func:`speed_s` is known: its CPU scaled by the ratio (the simulator's ``cluster.host_speed_s``; a real
run records its own in summary.json).

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

#: The work's version, stamped beside each figure: a figure of other work is not comparable (a model
#: stamped by another version replays as recorded).
SPEED_VERSION = 1
#: Tries of each part; the least is kept.
REPEATS = 5
#: Calls of a part per try: 3-10 ms of CPU a try here (2026-11-28), well above the clock's grain.
CALLS = 4


def _parts() -> list[Callable[[], object]]:
    import numpy as np  # here: the simulator's replay imports this module for scale() alone

    rng = np.random.default_rng(20261127)
    signal = rng.standard_normal(1 << 16) + 1j * rng.standard_normal(1 << 16)
    grid = rng.standard_normal((64, 64, 64))
    keys = rng.integers(0, 1 << 19, 1 << 16)
    values = rng.standard_normal(1 << 18)
    index = rng.integers(0, 1 << 18, 1 << 19)
    uniform = rng.random(1 << 18)
    # Every result goes into a buffer made here: a part that allocated its output would also time the
    # page faults of fresh memory, which on this VM cost what the host's page reporting makes them cost
    # (the draft that did read 0.067-0.077 s on a process's first call and 0.060-0.061 s on later ones).
    spectrum, back = np.empty_like(signal), np.empty_like(signal)
    inner = np.empty((62, 62, 62))
    work = np.empty_like(keys)
    gathered = np.empty(index.size)
    logs = np.empty_like(uniform)

    def fft() -> object:
        np.fft.fft(signal, out=spectrum)
        return np.fft.ifft(spectrum, out=back)

    def stencil() -> object:
        np.multiply(grid[1:-1, 1:-1, 1:-1], -6.0, out=inner)
        for near in (grid[:-2, 1:-1, 1:-1], grid[2:, 1:-1, 1:-1], grid[1:-1, :-2, 1:-1],
                     grid[1:-1, 2:, 1:-1], grid[1:-1, 1:-1, :-2], grid[1:-1, 1:-1, 2:]):  # fmt: skip
            np.add(inner, near, out=inner)
        return inner

    def sort() -> object:
        np.copyto(work, keys)
        work.sort()
        return work

    def gather() -> object:
        np.take(values, index, out=gathered)
        return gathered.sum()

    def logarithms() -> object:
        np.add(uniform, 1e-12, out=logs)
        np.log(logs, out=logs)
        np.multiply(logs, -2.0, out=logs)
        return np.sqrt(logs, out=logs).sum()

    return [fft, stencil, sort, gather, logarithms]


def speed_s() -> float:
    """CPU seconds this host takes for the fixed work now: smaller is faster."""
    parts = _parts()
    # One untimed round first: the first 50-100 ms of work after a pause ran slower here (the FFT at 12-14
    # ms a try, then 5.6; numpy's plans are made by then, so it is likely the host CPU's clock ramping up).
    for part in parts:
        for _ in range(CALLS):
            part()
    total = 0.0
    for part in parts:
        best = float("inf")
        for _ in range(REPEATS):
            t0 = time.thread_time()
            for _ in range(CALLS):
                part()
            best = min(best, time.thread_time() - t0)
        total += best
    return round(total, 6)


def around(before: float, after: float) -> float:
    """The figure for a piece of work (a model's take, a real run's jobs) from the two measured just before
    it and just after: their mean, the same for a stamp and for the host a run stands for."""
    return round((before + after) / 2, 6)


def stamp(figure: float) -> dict:
    """A model's stamp: the figure measured around its recording, and the work's version."""
    return {"speed_s": round(figure, 6), "speed_version": SPEED_VERSION}


def stamp_of(doc: dict) -> float | None:
    """The figure stamped on a model's document, or None: no stamp, or one of other work."""
    return doc.get("speed_s") if doc.get("speed_version") == SPEED_VERSION else None


def scale(host_speed_s: float | None, model_speed_s: float | None) -> float:
    """The factor for a model's CPU: 1 where either speed is unknown (the model replays as recorded)."""
    if host_speed_s is None or model_speed_s is None:
        return 1.0
    return host_speed_s / model_speed_s


__all__ = ["CALLS", "REPEATS", "SPEED_VERSION", "around", "scale", "speed_s", "stamp", "stamp_of"]
