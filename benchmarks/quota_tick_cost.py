"""What the quota tick (``cluster.quota_tick_us``) costs a node's processes: the CPU one unit of work
takes, for one and for two processes sharing the node's CPU at paper003-compare's quota, at each tick
period; baseline the kernel's own tick (no quota tick), measured in the same run
(docs/measurements.md, "What the quota tick costs, by its period").

The unit of work is a NAS CG.A rank's step: rank 0 of 8's block of NPB's matrix (7,000 x 3,500, about
230,000 elements, built by apps/nas/cg.py) times a vector, through scipy.sparse as the kernel does it.
Each process runs in one node envelope (cgroup v1, the node's quota at the TDF of 8 nodes on this host),
pinned to one CPU with the workers' CFS slice (priority.SLICE_US), and reports its own CPU per product
(its thread's clock, as a rank's ``compute_s`` is read) and its involuntary context switches.

    python benchmarks/quota_tick_cost.py                     # ticks 0,500,1000,2000 us; 1 and 2 processes
    python benchmarks/quota_tick_cost.py --ticks 0,1000 --procs 2 --reps 5

Each configuration runs ``--reps`` times, the configurations alternated within a repetition (the host's
other load then falls on all alike); the figure is the median over repetitions of the processes' mean.
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from wakeup_latency import PAPER003_NODES, join_node  # its sibling, run as benchmarks/x.py

from testbed.core.clock import auto_tdf
from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.priority import SLICE_US
from testbed.emulator.mechanism.quotatick import QuotaTick


def worker(seconds: float) -> None:
    """Builds the block, waits for a byte on stdin, multiplies for ``seconds``, prints its figures."""
    import numpy as np
    from testbed.apps.nas import cg

    a = cg.CLASSES["A"]
    rows, cols = a["na"] // 2, a["na"] // 4  # rank 0's block on 8 ranks: a 2 x 4 grid
    data, indices, indptr = cg.make_block(a["na"], a["nonzer"], a["shift"], range(rows), range(cols))
    block = cg.Block(data, indices, indptr, (rows, cols))
    x = np.ones(cols)
    os.write(1, b"r")
    os.read(0, 1)
    cpu0, end, n = time.thread_time(), time.monotonic() + seconds, 0
    while time.monotonic() < end:
        x = (block @ x)[:cols] * 1e-3 + 1.0  # bounded, so every product does the same work
        n += 1
    cpu = time.thread_time() - cpu0
    with open("/proc/self/status") as f:
        status = dict(line.split(":\t", 1) for line in f if ":\t" in line)
    switches = int(status["nonvoluntary_ctxt_switches"])
    print(json.dumps({"products": n, "cpu_s": cpu, "involuntary": switches}), flush=True)


def measure(tdf: float, procs: int, seconds: float) -> list[dict]:
    """``procs`` workers in one node envelope on the last CPU: each one's figures."""
    env = make_envelope("cgroup-v1", f"tickcost-{os.getpid()}", 0, 1.0, tdf, period_us=10_000)
    cpu = max(os.sched_getaffinity(0))
    running: list[subprocess.Popen] = []
    try:
        env.create()
        for _ in range(procs):
            cmd = [sys.executable, __file__, "--worker", str(seconds)]
            p = subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                preexec_fn=join_node(cpu, 0, env, SLICE_US),
            )
            running.append(p)
        for p in running:
            if p.stdout.read(1) != b"r":
                raise RuntimeError("a worker did not start")
        for p in running:  # all start together: each shares the node from its first product
            p.stdin.write(b"g")
            p.stdin.flush()
        return [json.loads(p.stdout.readline()) for p in running]
    finally:
        for p in running:
            p.kill()
            p.wait()
        env.destroy()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(float(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ticks", default="0,500,1000,2000", help="quota tick periods, us (0: the kernel's)")
    ap.add_argument("--procs", default="1,2", help="processes sharing the node's CPU")
    ap.add_argument(
        "--seconds", type=float, default=5.0, help="real seconds per configuration and repetition"
    )
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    tdf = auto_tdf(float(PAPER003_NODES))
    ticks = [int(t) for t in a.ticks.split(",")]
    counts = [int(n) for n in a.procs.split(",")]
    print(f"TDF {tdf:.2f}, quota {10 / tdf:.2f} ms of 10 ms, load {os.getloadavg()}")
    runs: dict[tuple[int, int], list[list[dict]]] = {(t, n): [] for t in ticks for n in counts}
    for _ in range(a.reps):
        for t in ticks:  # one tick process a period, every count measured under it
            tick = QuotaTick(t) if t else None
            note = tick.start() if tick else "the kernel's tick"
            try:
                for n in counts:
                    runs[t, n].append(measure(tdf, n, a.seconds))
            finally:
                if tick:
                    tick.stop()
            print(f"  measured under {note}", flush=True)
    res = {}
    for (t, n), reps in runs.items():
        us = statistics.median(statistics.fmean(w["cpu_s"] / w["products"] * 1e6 for w in r) for r in reps)
        sw = statistics.median(statistics.fmean(w["involuntary"] / w["cpu_s"] for w in r) for r in reps)
        res[f"tick={t} procs={n}"] = {"cpu_us_per_product": round(us, 1), "involuntary_per_cpu_s": round(sw)}
    for t, n in runs:
        base = res[f"tick=0 procs={n}"]["cpu_us_per_product"] if 0 in ticks else None
        r = res[f"tick={t} procs={n}"]
        vs = f"  ({r['cpu_us_per_product'] / base:.3f} of the kernel's tick)" if base else ""
        print(f"  tick {t:5d} us, {n} process(es): {r['cpu_us_per_product']:7.1f} us CPU a product, "
              f"{r['involuntary_per_cpu_s']:6d} involuntary switches per CPU-second{vs}")  # fmt: skip
    print(json.dumps({"tdf": round(tdf, 3), "seconds": a.seconds, "reps": a.reps, "results": res}))


if __name__ == "__main__":
    main()
