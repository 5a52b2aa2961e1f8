"""Paper 001's reject-ratio table in the simulator, under each reading of the baselines, beside the
paper's claim (docs/policies.md, "Results in the simulator"; issue 25).

Every figure is a mean over seeds of scenarios/paper001-reject.yaml run in the simulator (the same
`workload.divisible` tasks, `simulate` with no link latency, as `testbed run --backend sim`):

- ``table``: the file's loads (0.1-1.0; 16 nodes, Cms = Cps, 1-10 tasks an arrival), every scheduler;
- ``issue``: the configuration of issue 25 (8 nodes, Cms/Cps = 0.1, 1-6 tasks an arrival, loads 0.3
  and 1.0).

Each is printed under three readings (scheduler.params):

- ``queue``: the default. FIFO/EDF's admission test is a cluster manager's queue (``admission_test:
  queue``), and a batch of simultaneous arrivals is tested before any is dispatched (``batch: joint``,
  the paper's MCDF() loop);
- ``walk``: the baselines run MCDF's planning walk in their order (``admission_test: walk``), joint batch;
- ``before``: the reading before issue 25: walk, and each task dispatched once admitted (``batch: each``);
- ``queue-each``: the cluster manager's queue, each task dispatched once admitted (MCDF as ``before``).

``--readings`` picks some of them (default: the first three).

``axes`` repeats the other axes of "Results in the simulator" under one reading (``--readings``, its first;
default queue): the load counted as the paper's rule is written (``load_counts: arrivals``), the Cms/Cps
ratio, and the setup costs under both readings of "all nodes".

``batch`` is the isolated-batch Monte Carlo: one arrival's tasks on an idle cluster, nothing before or
after (the limit of load 0), for several node counts and Cms/Cps ratios: it shows where MCDF's order can
win at all. The reference is the paper's claim (section 6.2): MCDF lowest, FIFO-AN/EDF-AN about 10 points
above it, ANNA missing > 99 % under load.

    python benchmarks/paper001_table.py [--seeds 5] [--only table,issue,batch,axes] [--batches 400]

About 10 minutes of one core with the defaults; axes, not a default part, about 14 more at --seeds 3
(its load_counts arrivals row is the slow one). The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

from testbed.schedulers import registry
from testbed.schedulers.base import Reject

from testbed.core import events as ev
from testbed.scenario import load
from testbed.scenario.workload import build
from testbed.sim import simulate

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "paper001-reject.yaml"
ADMITTING = ("mcdf", "fifo-an", "edf-an", "fifo-mn", "edf-mn")
ANNA = ("fifo-anna", "edf-anna")
READINGS = {
    "queue": {"admission_test": "queue", "batch": "joint"},
    "walk": {"admission_test": "walk", "batch": "joint"},
    "before": {"admission_test": "walk", "batch": "each"},
    "queue-each": {"admission_test": "queue", "batch": "each"},
}
CONFIGS = {
    "table": ([], (0.1, 0.25, 0.5, 0.75, 1.0)),
    "issue": (
        ["cluster.nodes=8", "workload.divisible.cms=0.1", "workload.divisible.tasks_per_arrival.max=6"],
        (0.3, 1.0),
    ),
}


def params_for(name: str, reading: dict) -> dict:
    """The reading's parameters that this scheduler has (MCDF has no admission_test, ANNA neither)."""
    known = registry.get(name).all_defaults()
    return {k: v for k, v in reading.items() if k in known}


def ratio(overrides: list[str], name: str, params: dict) -> float:
    """One simulated run: the reject ratio (ANNA: the deadline miss ratio), in %."""
    scn = load(SCENARIO, [*overrides, f"scheduler.name={name}", "sweep=null"])
    jobs = build(scn)
    events = simulate(jobs, registry.get(name), params, nodes=scn.cluster.nodes, latency_s=0.0)
    if name in ANNA:
        missed = sum(
            e["value"] for e in events if e["kind"] == ev.PROGRESS and e["unit"] == "deadlines_missed"
        )
        return 100.0 * missed / len(jobs)
    return 100.0 * sum(1 for e in events if e["kind"] == ev.JOB_REJECTED) / len(jobs)


def table(config: str, seeds: int, readings: list[str]) -> dict:
    """{reading: {scheduler: [mean % at each load]}}, printed as markdown rows."""
    base, loads = CONFIGS[config]
    out: dict = {}
    for reading in readings:
        params = READINGS[reading]
        names = ADMITTING + (ANNA if reading == "queue" else ())
        rows = {}
        print(f"\n{config}, reading {reading} ({params}); mean of seeds 1..{seeds}", flush=True)
        print("| scheduler | " + " | ".join(f"{x:g}" for x in loads) + " |")
        print("| --- |" + " --- |" * len(loads))
        for name in names:
            cells = []
            for x in loads:
                over = [*base, f"workload.divisible.load={x}"]
                mine = params_for(name, params)
                runs = [ratio([*over, f"workload.seed={s}"], name, mine) for s in range(1, seeds + 1)]
                cells.append(statistics.mean(runs))
            rows[name] = [round(c, 1) for c in cells]
            label = f"{name} (miss)" if name in ANNA else name
            print(f"| {label} | " + " | ".join(f"{c:.1f}" for c in cells) + " |", flush=True)
        out[reading] = rows
    return out


AXES = {
    # (label, overrides, loads, schedulers, extra params)
    "load_counts arrivals": (
        ["workload.divisible.load_counts=arrivals"],
        (0.1, 0.25, 0.5, 0.75, 1.0),
        ADMITTING + ANNA,
        {},
    ),
    **{
        f"cms/cps {c:g}": ([f"workload.divisible.cms={c}"], (0.2, 0.5, 1.0), ADMITTING, {})
        for c in (0.1, 1.0, 10.0, 20.0)
    },
    **{
        f"st=sc={x:g}, all_nodes {every}": (
            [f"workload.divisible.setup_link={x}", f"workload.divisible.setup_compute={x}"],
            (0.5,),
            ADMITTING,
            {"all_nodes": every},
        )
        for every in ("fastest", "every")
        for x in (0, 5, 10, 20)
    },
}


def axes(seeds: int, reading: str) -> dict:
    """{label: {scheduler: [mean % at each load]}} under one reading, printed as markdown rows."""
    out: dict = {}
    print(f"\naxes, reading {reading} ({READINGS[reading]}); mean of seeds 1..{seeds}", flush=True)
    for label, (base, loads, names, extra) in AXES.items():
        rows = {}
        for name in names:
            mine = params_for(name, {**READINGS[reading], **extra})
            cells = [
                statistics.mean(
                    ratio([*base, f"workload.divisible.load={x}", f"workload.seed={s}"], name, mine)
                    for s in range(1, seeds + 1)
                )
                for x in loads
            ]
            rows[name] = [round(c, 1) for c in cells]
        out[label] = rows
        loads_txt = " / ".join(f"{x:g}" for x in loads)
        print(
            f"- {label} (loads {loads_txt}): "
            + "; ".join(f"{n} " + " / ".join(f"{c:.1f}" for c in v) for n, v in rows.items()),
            flush=True,
        )
    return out


def batches(overrides: list[str], count: int) -> list[list]:
    """``count`` arrivals' tasks from the scenario's generator, each batch moved to time 0."""
    scn = load(SCENARIO, [*overrides, f"workload.divisible.arrivals={count}", "sweep=null"])
    groups: dict[float, list] = {}
    for job in build(scn):
        groups.setdefault(job.spec.submit_time, []).append(dataclasses.replace(job.spec, submit_time=0.0))
    return list(groups.values())


def isolated(specs_by_batch: list[list], name: str, nodes: int, params: dict) -> float:
    """% of the tasks rejected when each batch arrives alone on an idle cluster."""
    rejected = total = 0
    for specs in specs_by_batch:
        policy = registry.get(name).make_global(nodes, params, 0)
        for spec in specs:
            rejected += sum(isinstance(a, Reject) for a in policy.submit(0.0, spec))
        total += len(specs)
    return 100.0 * rejected / total


def batch_mc(count: int) -> dict:
    out: dict = {}
    for reading in ("queue", "walk", "before"):
        params = READINGS[reading]
        print(f"\nisolated batches ({count} arrivals each), reading {reading}: % rejected", flush=True)
        print("| nodes, tasks an arrival, Cms/Cps | " + " | ".join(ADMITTING) + " |")
        print("| --- |" + " --- |" * len(ADMITTING))
        for nodes, most in ((8, 6), (16, 10)):
            for cms in (0.01, 0.1, 1.0, 10.0):
                over = [
                    f"cluster.nodes={nodes}",
                    f"workload.divisible.tasks_per_arrival.max={most}",
                    f"workload.divisible.cms={cms}",
                ]
                groups = batches(over, count)
                cells = [isolated(groups, n, nodes, params_for(n, params)) for n in ADMITTING]
                out[f"{reading} {nodes} {most} {cms:g}"] = [round(c, 1) for c in cells]
                row = " | ".join(f"{c:.1f}" for c in cells)
                print(f"| {nodes}, 1-{most}, {cms:g} | {row} |", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=400, help="arrivals in each isolated-batch sample")
    ap.add_argument("--only", default="table,issue,batch")
    ap.add_argument("--readings", default="queue,walk,before", help=f"of {', '.join(READINGS)}")
    args = ap.parse_args()
    readings = args.readings.split(",")
    unknown = [r for r in readings if r not in READINGS]
    if unknown:
        raise SystemExit(f"--readings: unknown {unknown}; use some of {', '.join(READINGS)}")
    t0 = time.monotonic()
    result: dict = {}
    for part in args.only.split(","):
        if part in CONFIGS:
            result[part] = table(part, args.seeds, readings)
        elif part == "batch":
            result["batch"] = batch_mc(args.batches)
        elif part == "axes":
            result["axes"] = axes(args.seeds, readings[0])
        else:
            raise SystemExit(f"--only: unknown part {part!r}; use table, issue, batch, axes")
    result["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
