"""The simulator at scale: 10,000 jobs of a real trace on 1,000 nodes (scenarios/trace-nasa.yaml).

Each figure is one `testbed run ... --backend sim` in a child process, timed from launch to exit (so it
includes start-up, the workload build, the simulation, writing the event log and the results) with its
peak resident memory:

- sim_easy_s: batch with EASY backfilling (the scenario as shipped);
- sim_gang_s: strict gang scheduling, MPL 3, 10-minute quanta;
- sim_easy_1p_s, sim_gang_1p_s: the same two with each trace job one compute phase
  (``workload.trace.app.barrier=false``: no barrier every 10 minutes), the jobs the simulator runs as one
  piece each (docs/architecture.md, "The simulator's job-level fast path"); the shipped scenario's jobs,
  with their barriers, run rank by rank;
- ``*_cpu_s``: the same runs' CPU time (user + system), which another load on the host changes less.

Targets (issue 8): sim_easy_s <= 30, sim_gang_s <= 60, sim_peak_rss_mb <= 1024, on a 2-core machine. A
baseline measured in the same run, a fixed pure-Python workload of the simulator's kind (a heap of timed
events, small dicts, JSON lines), gives each time as a ratio too (``*_per_baseline``), to compare hosts or
runs on a noisy machine.

    python benchmarks/sim_scale.py [--jobs 10000] [--reps 1] [--only easy,gang,easy-1p,gang-1p]

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import heapq
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "trace-nasa.yaml"
GANG = ["--set", "scheduler.name=gang", "--set", "scheduler.params={mpl: 3, quantum_ms: 600000}"]
ONE_PHASE = ["--set", "workload.trace.app.barrier=false"]
VARIANTS = {"easy": [], "gang": GANG, "easy-1p": ONE_PHASE, "gang-1p": [*GANG, *ONE_PHASE]}


def baseline() -> float:
    """Seconds for 300,000 timed events through a heap, each making a small record written as JSON."""
    t = time.perf_counter()
    heap: list[tuple] = []
    out = []
    for i in range(300_000):
        heapq.heappush(heap, ((i * 7919) % 100_003 * 1e-3, i, "k", (i,)))
        if len(heap) > 1000:
            when, seq, kind, payload = heapq.heappop(heap)
            rec = {"t": round(when, 9), "wall": when, "src": "node1", "kind": kind, "job": payload[0]}
            out.append(json.dumps(rec, separators=(",", ":")))
    return time.perf_counter() - t


def run(args: list[str], out: Path) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one `testbed run` child process."""
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(SCENARIO), "--backend", "sim", "-q"]
    cmd += ["--out", str(out)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.Popen([*cmd, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate()
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"testbed run failed ({proc.returncode}): {err.strip()}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    doc = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python benchmarks/sim_scale.py", description=doc)
    parser.add_argument("--jobs", type=int, default=10_000, help="trace jobs replayed (default 10000)")
    parser.add_argument("--reps", type=int, default=1, help="runs of each figure; the median is reported")
    parser.add_argument("--only", default=",".join(VARIANTS), help="the figures to measure, comma-separated")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    if unknown := [n for n in names if n not in VARIANTS]:
        parser.error(f"--only: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    common = ["--set", f"workload.trace.count={args.jobs}"]
    base = statistics.median(baseline() for _ in range(3))
    figures: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="sim-scale-") as tmp:
        for rep in range(args.reps):
            for name in names:
                extra = VARIANTS[name]
                out = Path(tmp) / f"{name}-{rep}"
                t = time.perf_counter()
                wall, used = run([*common, *extra], out)
                figures[name].append(wall)
                cpu[name].append(used)
                summary = json.loads((out / "summary.json").read_text())
                print(
                    f"{name:>7}: {wall:6.1f} s ({used:.1f} s CPU)  {summary['jobs']} jobs, "
                    f"{summary['jobs_by_state']}, makespan {summary['makespan_s']:.0f} s "
                    f"({time.perf_counter() - t:.1f} s)",
                    flush=True,
                )
    # The largest peak resident memory of the children (each run is one process: no Ray in the simulator).
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    result: dict = {}
    for name in names:
        key = name.replace("-", "_")
        wall = statistics.median(figures[name])
        result[f"sim_{key}_s"] = round(wall, 2)
        result[f"sim_{key}_cpu_s"] = round(statistics.median(cpu[name]), 2)
        result[f"sim_{key}_per_baseline"] = round(wall / base, 1)
    result |= {
        "sim_peak_rss_mb": round(peak, 1),
        "jobs": args.jobs,
        "nodes": 1000,
        "baseline_s": round(base, 3),
        "targets": {"sim_easy_s": 30, "sim_gang_s": 60, "sim_peak_rss_mb": 1024},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
