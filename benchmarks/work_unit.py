"""The work unit's error: CPU a ``work(units)`` call really takes against the units asked for.

``python benchmarks/work_unit.py [--reps N]``

Two kernels, measured in the same run, in this process (one thread):

* ``clock`` (testbed.apps.work.work, the product): burns until the thread's CPU clock has advanced;
* ``calibrated`` (the kernel it replaced, rebuilt here as the baseline): a fixed integer loop whose
  iterations per unit were calibrated against the same clock in 20 000-iteration chunks (as the old rate
  probe did), then run as one long loop per call.

Each is measured quiet, then with a busy process on every host core (contention on the shared caches
and the other hyperthread/core), the calibrated kernel keeping its quiet calibration (as a run kept
the probe's). The error of a call is CPU taken (``time.thread_time`` around it) / asked - 1; the
figures are the median and the worst absolute error over ``--reps`` calls per size. The last line is
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from testbed.apps.work import WORK_UNIT_S, work

SIZES = (1, 10, 50, 500)
_MASK = 0xFFFFF


def spin(iterations: int, x: int = 1) -> int:
    for i in range(iterations):
        x = (x * 31 + i) & _MASK
    return x


def calibrate(cpu_seconds: float = 0.2) -> int:
    spin(20_000)
    chunk, iters = 20_000, 0
    t0 = time.thread_time()
    while True:
        spin(chunk)
        iters += chunk
        used = time.thread_time() - t0
        if used >= cpu_seconds:
            return max(1, round(iters * WORK_UNIT_S / used))


def errors(kernel, units: float, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.thread_time()
        kernel(units)
        out.append((time.thread_time() - t0) / (units * WORK_UNIT_S) - 1.0)
    return out


def clock_read_us(n: int = 100_000) -> float:
    t = time.perf_counter()
    for _ in range(n):
        time.thread_time_ns()
    return (time.perf_counter() - t) / n * 1e6


def measure(reps: int, ipu: int, label: str, table: dict) -> None:
    kernels = {"clock": work, "calibrated": lambda u: spin(round(u * ipu))}
    for name, k in kernels.items():
        for units in SIZES:
            n = reps if units < 500 else max(3, reps // 3)
            e = errors(k, units, n)
            table[(label, name, units)] = (statistics.median(e), max(abs(x) for x in e))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    table: dict = {}
    ipu = calibrate()
    read_us = clock_read_us()
    measure(a.reps, ipu, "quiet", table)
    cores = len(os.sched_getaffinity(0))
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.2)
        measure(a.reps, ipu, "contended", table)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    print(f"calibration: {ipu} iterations per unit; thread CPU clock read: {read_us:.2f} us")
    print(f"{'load':<10} {'kernel':<11} " + " ".join(f"{f'{u} units':>22}" for u in SIZES))
    for label in ("quiet", "contended"):
        for name in ("clock", "calibrated"):
            cells = []
            for u in SIZES:
                med, worst = table[(label, name, u)]
                cells.append(f"{med * 100:+8.2f} % (max {worst * 100:5.1f} %)")
            print(f"{label:<10} {name:<11} " + " ".join(f"{c:>22}" for c in cells))
    out = {"calibration_iters_per_unit": ipu, "clock_read_us": round(read_us, 3)}
    for label in ("quiet", "contended"):
        for name in ("clock", "calibrated"):
            worst = max(table[(label, name, u)][1] for u in SIZES)
            out[f"{name}_{label}_max_abs_error"] = round(worst, 4)
            out[f"{name}_{label}_median_error_500"] = round(table[(label, name, 500)][0], 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
