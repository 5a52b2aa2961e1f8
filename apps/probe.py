"""CPU-rate probe: ``python -m testbed.apps.probe --seconds S [--start-at T]`` runs the work kernel flat out
for S real seconds (from CLOCK_MONOTONIC time T, if given) and prints one JSON line {"cpu_s", "wall_s",
"rate"}.

rate (the least-squares slope of the process's CPU time against wall time, sampled all along; about
cpu_s / wall_s) is the CPU rate the process got: how the envelope's quota is checked on every node at the
start of a run. (It no longer calibrates anything: a work unit is measured CPU time, apps/work.py.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from testbed.apps.work import work

_CHUNK_UNITS = 0.25  # of CPU between wall-clock reads: a fine-grained end, negligible overhead


def cpu_seconds() -> float:
    """This process's CPU time: the scheduler's own count, current to the call. (Not
    /proc/self/schedstat: for a running task that is current only to its last tick, 4 ms here, which is
    4 % of what a 1 s probe measures at TDF 9.4.)"""
    return time.process_time()


#: Real seconds of flat-out work before the measured window. An idle CFS group starts the window with a
#: full, unused quota (one period's worth it gets at once); burning it first keeps that out of the figure.
WARMUP_S = 0.3


def command(seconds: float, start_at: float) -> list[str]:
    """The probe's command line: ``seconds`` of work from CLOCK_MONOTONIC ``start_at``."""
    return [
        sys.executable,
        "-m",
        "testbed.apps.probe",
        "--seconds",
        repr(seconds),
        "--start-at",
        repr(start_at),
    ]


def probe(seconds: float, start_at: float | None = None) -> dict:
    work(_CHUNK_UNITS)  # warm up the interpreter's code paths
    if start_at is not None:
        # Probes of several nodes start together, so they measure the rates under the same contention.
        delay = start_at - WARMUP_S - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        while time.monotonic() < start_at:
            work(_CHUNK_UNITS)
    c0 = cpu_seconds()
    w0 = time.monotonic()
    end = w0 + seconds
    samples = [(w0, c0)]
    now = w0
    while now < end:
        work(_CHUNK_UNITS)
        now = time.monotonic()
        samples.append((now, cpu_seconds()))
    wall = now - w0
    cpu = samples[-1][1] - c0
    return {"cpu_s": cpu, "wall_s": wall, "rate": slope(samples)}


def slope(samples: list[tuple[float, float]]) -> float:
    """Least-squares CPU seconds per wall second. A CFS quota delivers CPU as one burst per period, so
    cpu/wall over a window is off by up to one burst at either end (10 % of a 1 s probe at a 100 ms
    period and TDF 9.4); the fitted slope of every sample is not."""
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mc = sum(c for _, c in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    return sum((t - mt) * (c - mc) for t, c in samples) / den if den > 0 else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.apps.probe", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="real seconds to run (default 1)")
    parser.add_argument("--start-at", type=float, default=None, help="CLOCK_MONOTONIC time to start at")
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
    print(json.dumps(probe(args.seconds, args.start_at)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
