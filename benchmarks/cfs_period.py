"""How the CFS period of the node cgroups shapes what a node measures for a job that computes then sleeps.

A CFS quota makes an emulated node a full-speed CPU for ``quota`` of every ``period``, not a slower CPU:
a sleep (I/O) that falls in the throttled part of a period costs the job nothing. So a job that would be
``busy`` x 100 % busy on the slow CPU it emulates uses more of its node than that. This benchmark runs,
in real node envelopes (testbed.emulator.mechanism.envelope, cgroup v1), N/2 nodes of such a job and N/2
nodes of a compute-bound job, for each period, and prints the measured utilisation (CPU used / (wall x
rate)).
The baseline is the default period (100 ms) measured in the same run.

    python benchmarks/cfs_period.py                 # 8 nodes, periods 100/20/10 ms, 6 s each (~2 min)
    python benchmarks/cfs_period.py --burst-ms 2    # shorter compute bursts between sleeps

The last line is one JSON object: per period, the busy job's and the compute job's utilisation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from testbed.core.clock import auto_tdf
from testbed.emulator.mechanism.envelopes import make_envelope


def worker(burst_cpu_s: float, sleep_s: float, seconds: float) -> None:
    end = time.monotonic() + seconds
    t0 = time.thread_time()
    while time.monotonic() < end:
        s = time.thread_time()
        while time.thread_time() - s < burst_cpu_s and time.monotonic() < end:
            pass
        if sleep_s:
            time.sleep(sleep_s)
    print(time.thread_time() - t0)


def measure(period_ms: float, nodes: int, tdf: float, burst_ms: float, busy: float, seconds: float) -> dict:
    run_id = f"cfsbench-{os.getpid()}-{int(period_ms * 1000)}"
    envs = [
        make_envelope("cgroup-v1", run_id, k, 1.0, tdf, period_us=round(period_ms * 1000))
        for k in range(nodes)
    ]
    rate = envs[0].configured_rate()
    # The sleep that makes the job `busy` busy on a CPU of speed `rate`: a burst of b s of real CPU takes
    # b / rate s of node time there.
    sleep_s = burst_ms / 1000 / rate * (1 - busy) / busy
    procs = []
    try:
        for k, env in enumerate(envs):
            env.create()
            io = k < nodes // 2
            args = [str(burst_ms / 1000 if io else 1e9), str(sleep_s if io else 0.0), str(seconds)]
            p = subprocess.Popen(
                [sys.executable, __file__, "--worker", *args],
                stdout=subprocess.PIPE,
                preexec_fn=env.join_self,
            )
            procs.append((io, p))
        got: dict[bool, list[float]] = {True: [], False: []}
        for io, p in procs:
            out, _ = p.communicate(timeout=seconds + 30)
            got[io].append(float(out) / (seconds * rate))
    finally:
        for _, p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for env in envs:
            env.destroy()
    return {"busy_job": statistics.mean(got[True]), "compute_job": statistics.mean(got[False])}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*(float(a) for a in sys.argv[2:5]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--periods", default="100,20,10", help="CFS periods, real ms (first = baseline)")
    ap.add_argument("--burst-ms", type=float, default=10.0, help="real CPU ms of each compute burst")
    ap.add_argument("--busy", type=float, default=0.5, help="the busy job's utilisation on its emulated CPU")
    ap.add_argument("--seconds", type=float, default=6.0)
    a = ap.parse_args()
    tdf = auto_tdf(float(a.nodes))
    print(f"{a.nodes} nodes, TDF {tdf:.2f}; busy job: {a.busy:.2f} busy in bursts of {a.burst_ms} ms CPU")
    res = {}
    for p in (float(x) for x in a.periods.split(",")):
        r = measure(p, a.nodes, tdf, a.burst_ms, a.busy, a.seconds)
        res[p] = r
        print(
            f"  period {p:6.1f} ms: busy job {r['busy_job']:.3f} (ideal {a.busy:.2f}), "
            f"compute job {r['compute_job']:.3f} (ideal 1.00)"
        )
    base = next(iter(res.values()))
    for p, r in res.items():
        err, err0 = r["busy_job"] - a.busy, base["busy_job"] - a.busy
        print(f"  period {p:6.1f} ms: busy-job excess {err:+.3f} (baseline {err0:+.3f})")
    print(json.dumps({f"{p:g}ms": {k: round(v, 3) for k, v in r.items()} for p, r in res.items()}))


if __name__ == "__main__":
    main()
