"""The start-up rate probe alone, at many nodes: how far its figure is off for a given window.

N node envelopes (cgroup v1) at rate 1.0 and the given TDF, each running the probe
(``python -m testbed.apps.probe``) for the given real seconds, all from one start time as a run starts
them, nothing else of a run around them. Prints each probe's error against its node's configured rate
(least-squares slope, as the probe reports it, and CPU over wall time). A quota under the kernel's tick
(4 ms here) is delivered as tick-long bursts some periods apart, so a short window holds few of them
(docs/measurements.md, "Scale on this 2-core host").

    python benchmarks/probe_window.py --nodes 128 --tdf 75.3 --seconds 1 6   # ~1 min
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

from testbed.apps.probe import command as probe_command

from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.process import spawn


def measure(nodes: int, tdf: float, seconds: float, period_us: int, delay_s: float) -> dict:
    run_id = f"probewin{os.getpid()}"
    envs = [make_envelope("cgroup-v1", run_id, k, 1.0, tdf, period_us=period_us) for k in range(nodes)]
    tmp = tempfile.TemporaryDirectory(prefix="tb-probe-window-")  # each measure() left its folder before
    out = tmp.name
    workers = []
    try:
        for e in envs:
            e.create()
        # The interpreters start inside their throttled cgroups: give them time before the common start.
        start_at = time.monotonic() + delay_s
        argv = probe_command(seconds, start_at)
        for k, e in enumerate(envs):
            workers.append(spawn(argv, env=None, cwd=None, stdout=f"{out}/{k}.out", stderr=None, envelope=e))
        for w in workers:
            w.reap(timeout=seconds + delay_s + 120)
        slope, mean = [], []
        for k, e in enumerate(envs):
            r = json.loads(open(f"{out}/{k}.out").read().strip().splitlines()[-1])
            conf = e.configured_rate()
            slope.append((r["rate"] - conf) / conf)
            mean.append((r["cpu_s"] / r["wall_s"] - conf) / conf)
        return {"nodes": nodes, "tdf": tdf, "seconds": seconds, "slope": [min(slope), max(slope)],
                "cpu_over_wall": [min(mean), max(mean)]}  # fmt: skip
    finally:
        for w in workers:
            try:
                w.kill()
            except OSError:
                pass
        for e in envs:
            e.destroy()
        tmp.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--tdf", type=float, default=37.6)
    ap.add_argument("--seconds", type=float, nargs="+", default=[1.0, 3.0])
    ap.add_argument("--period-us", type=int, default=100_000)
    ap.add_argument("--delay-s", type=float, default=15.0, help="real s from the spawns to the common start")
    args = ap.parse_args()
    for s in args.seconds:
        r = measure(args.nodes, args.tdf, s, args.period_us, args.delay_s)
        (s0, s1), (m0, m1) = r["slope"], r["cpu_over_wall"]
        print(f"{r['nodes']} nodes, TDF {r['tdf']:g}, {s:g} s: slope error {s0:+.1%} to {s1:+.1%}; "
              f"cpu/wall {m0:+.1%} to {m1:+.1%}")  # fmt: skip
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
