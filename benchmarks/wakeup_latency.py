"""Wake-up latency on an emulated node: how long a process that becomes runnable waits for the CPU while
other processes of its node are runnable, by its nice value (docs/measurements.md, "Wake-up latency").

The simulator shares a node's CPU by weighted processor sharing: a woken process computes at once, at its
weight's share. The kernel runs one task at a time: a woken task waits for its turn (the running task's
slice) unless its weight lets it preempt. This benchmark measures that wait in one node envelope
(testbed.emulator.mechanism.envelope, cgroup v1) at the node's quota: ``others`` busy loops at nice 0
and one sleeper at nice ``nice`` that a process outside the node wakes through a pipe at random moments
(the wake-up of a receiver by its message). The sleeper stamps the moment it runs, computes a short
burst (``--burst-us`` of CPU: a rank's step between two messages), and blocks again.

    python benchmarks/wakeup_latency.py                  # TDF 4.71 (paper003-compare's 8 nodes), 10 ms
    python benchmarks/wakeup_latency.py --others 0,1,2 --nices 0,-10 --reps 3

Each configuration runs ``--reps`` times, the configurations alternated within a repetition (the host's
other load then falls on all alike); the figure is the median over repetitions of each one's median and
mean. ``pinned`` puts the node's processes on one CPU, as the node agent does while any of them has a
nice value other than 0 (docs/architecture.md, "The emulated node"); ``free`` lets them run on any CPU
(all at nice 0, as under NLS). ``--slice-us 100`` asks for the nodes' workers' CFS slice
(priority.SLICE_US); ``--quota-tick-us 500`` runs the quota tick (cluster.quota_tick_us) meanwhile.
Latencies are printed in real ms and in emulated ms (real / TDF). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import statistics
import subprocess
import sys
import time

from testbed.core.clock import auto_tdf
from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.priority import set_slice
from testbed.emulator.mechanism.quotatick import QuotaTick

PAPER003_NODES = 8  # scenarios/paper003-compare.yaml: its TDF on this host


def spinner() -> None:
    while True:
        pass


def sleeper(burst_s: float) -> None:
    """Blocks on stdin; for each stamp read, writes back the latency (seconds) and burns ``burst_s``."""
    os.write(1, b"r")  # started: its interpreter's start-up is not a wake-up
    while True:
        data = os.read(0, 8)
        now = time.monotonic()
        if len(data) < 8:
            return
        stamp = int.from_bytes(data, "little") / 1e9
        t0 = time.thread_time()
        while time.thread_time() - t0 < burst_s:
            pass
        os.write(1, int((now - stamp) * 1e9).to_bytes(8, "little"))


def join_node(cpu: int | None, nice: int, env, slice_us: int) -> callable:
    """A ``preexec_fn`` that puts the child in the node envelope ``env``, on ``cpu`` (None: any), at
    ``nice``, with a CFS slice of ``slice_us`` (0: the kernel's)."""

    def pre() -> None:
        env.join_self()
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})
        os.nice(nice)
        if slice_us:
            set_slice(slice_us)  # as the nodes' workers ask for theirs (forkserver.py)

    return pre


def measure(tdf: float, period_us: int, others: int, nice: int, pinned: bool, a) -> list[float]:
    """One configuration: the sleeper's wake-to-run latencies, real seconds."""
    run_id = f"wakebench-{os.getpid()}"
    env = make_envelope("cgroup-v1", run_id, 0, 1.0, tdf, period_us=period_us)
    cpu = max(os.sched_getaffinity(0)) if pinned else None
    procs = []
    try:
        env.create()
        for _ in range(others):
            spin = [sys.executable, __file__, "--spinner"]
            procs.append(subprocess.Popen(spin, preexec_fn=join_node(cpu, 0, env, a.slice_us)))
        s = subprocess.Popen(
            [sys.executable, __file__, "--sleeper", str(a.burst_us / 1e6)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            preexec_fn=join_node(cpu, nice, env, a.slice_us),
        )
        procs.append(s)
        return _drive(s, a)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        env.destroy()


def _drive(s: subprocess.Popen, a) -> list[float]:
    rng = random.Random(1)
    win, rout = s.stdin.fileno(), s.stdout.fileno()
    if os.read(rout, 1) != b"r":
        raise RuntimeError("the sleeper did not start")
    got: list[float] = []
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.5, 1.5) * a.gap_ms / 1000)
        os.write(win, int(time.monotonic() * 1e9).to_bytes(8, "little"))
        ready, _, _ = select.select([rout], [], [], 5.0)
        if not ready:
            raise RuntimeError("the sleeper did not answer within 5 s")
        got.append(int.from_bytes(os.read(rout, 8), "little") / 1e9)
    return got


def summarise(runs: list[list[float]], tdf: float) -> dict:
    med = statistics.median(statistics.median(r) for r in runs)
    mean = statistics.median(statistics.fmean(r) for r in runs)
    p90 = statistics.median(statistics.quantiles(r, n=10)[-1] for r in runs)
    ms = 1000.0
    return {
        "n": sum(len(r) for r in runs),
        "real_ms": {"p50": round(med * ms, 3), "mean": round(mean * ms, 3), "p90": round(p90 * ms, 3)},
        "emulated_ms": {
            "p50": round(med * ms / tdf, 3),
            "mean": round(mean * ms / tdf, 3),
            "p90": round(p90 * ms / tdf, 3),
        },
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--spinner":
        spinner()
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--sleeper":
        sleeper(float(sys.argv[2]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tdf", type=float, default=None, help="default: paper003-compare's (8 nodes here)")
    ap.add_argument("--period-ms", type=float, default=10.0, help="CFS period, real ms (paper 003's: 10)")
    ap.add_argument("--others", default="0,1,2", help="busy processes beside the sleeper, nice 0")
    ap.add_argument("--nices", default="0,-10", help="the sleeper's nice values")
    ap.add_argument("--placement", default="pinned,free")
    ap.add_argument("--burst-us", type=float, default=200.0, help="real CPU the sleeper burns per wake")
    ap.add_argument("--gap-ms", type=float, default=20.0, help="mean real ms between wakes (0.5-1.5x)")
    ap.add_argument("--seconds", type=float, default=2.0, help="per configuration and repetition")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--slice-us", type=int, default=0, help="the processes' CFS slice (0: the kernel's)")
    ap.add_argument("--quota-tick-us", type=int, default=0, help="run a quota tick this often (0: none)")
    a = ap.parse_args()
    tdf = a.tdf or auto_tdf(float(PAPER003_NODES))
    configs = [
        (o, n, pl)
        for pl in a.placement.split(",")
        for o in (int(x) for x in a.others.split(","))
        for n in (int(x) for x in a.nices.split(","))
    ]
    print(
        f"TDF {tdf:.2f}, period {a.period_ms:g} ms (quota {a.period_ms / tdf:.2f} ms), load {os.getloadavg()}"
    )
    runs: dict[tuple, list[list[float]]] = {c: [] for c in configs}
    tick = QuotaTick(a.quota_tick_us) if a.quota_tick_us else None
    if tick is not None:
        print(f"  quota tick {tick.start()}")
    try:
        for _ in range(a.reps):
            for c in configs:
                o, n, pl = c
                runs[c].append(measure(tdf, round(a.period_ms * 1000), o, n, pl == "pinned", a))
    finally:
        if tick is not None:
            tick.stop()
    res = {}
    for c, r in runs.items():
        o, n, pl = c
        key = f"{pl} others={o} nice={n}"
        res[key] = summarise(r, tdf)
        e = res[key]["emulated_ms"]
        print(f"  {key:28s} emulated ms: p50 {e['p50']:.3f}  mean {e['mean']:.3f}  p90 {e['p90']:.3f}")
    given = {"slice_us": a.slice_us, "quota_tick_us": a.quota_tick_us}
    print(json.dumps({"tdf": round(tdf, 3), "period_ms": a.period_ms, **given, "results": res}))


if __name__ == "__main__":
    main()
