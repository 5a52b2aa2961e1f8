"""The peer for benchmarks/sim_scale.py: AccaSim 1.1.3 (PyPI ``accasim``, this project's benchmark-only
``peer`` extra: ``python3 -m pip install -e '.[peer]'``) on the job set the testbed runs, and two small
reference schedulers over the same jobs.

- **The job set.** The scenario is loaded and its jobs built by the testbed itself
  (testbed.scenario.workload.build): each job's arrival, size (nodes, one process each), run time alone
  (the program kind's ideal run time at the cluster's rate, to the microsecond) and estimate (what
  backfilling is told). The same jobs are written as an SWF file for AccaSim: field 2 the arrival, 4
  the run time, 5 and 8 the size, 9 the estimate, on a cluster of as many 1-core nodes. AccaSim reads
  SWF times as integers and the testbed's arrivals are fractional (NASA's arrivals x 0.128), so every
  time is multiplied by the smallest integer ``ticks`` that makes them all whole (125 for
  scenarios/trace-nasa.yaml); AccaSim's waits are divided by it again. A uniform scale changes no
  decision of either policy.
- **The shim.** AccaSim 1.1.3's accasim/utils/misc.py does ``from collections import Mapping``, which
  Python 3.10 removed (the ABCs live in collections.abc only); :func:`shim` puts the ABCs back on
  ``collections`` before accasim is imported. Nothing else in it needs a change.
- **AccaSim's EASY is not EASY.** ``EASYBackfilling.scheduling_method`` (accasim/base/scheduler_class.py)
  computes the blocked head's reservation (time and nodes) and then backfills with
  ``allocating_method(..., reserved_time=reserved_time, reserved_nodes=[], skip=True)``: with an empty
  node list, ``FirstFit._compute_reservation_overlaps`` finds no overlap for any job, so every later job
  that fits now starts, whatever its length: the head's reservation is never enforced. :func:`greedy`
  (every queued job that fits starts, in order) gives AccaSim's waits exactly on the NASA jobs;
  :func:`easy` is EASY as Mu'alem and Feitelson define it, by counts (the head's shadow time and its
  extra nodes), the reference the testbed's EASY is held to.

Run alone, it runs AccaSim once on an SWF file it wrote and prints one JSON line (the benchmark times
that child process, as it times ``testbed run``):

    python benchmarks/sim_peer.py JOBS.swf NODES fcfs|easy TICKS RESULTS_DIR
"""

from __future__ import annotations

import bisect
import heapq
import json
import math
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import NamedTuple


class TraceJob(NamedTuple):
    submit: float  # emulated s, as the testbed submits it
    size: int  # nodes
    run: float  # emulated s alone
    estimate: float  # what backfilling is told (the run time where the scenario gives no other)


def shim() -> None:
    """AccaSim 1.1.3 imports ``collections.Mapping`` (gone since Python 3.10): alias the ABCs back."""
    import collections
    import collections.abc

    for name in collections.abc.__all__:
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))


def testbed_jobs(scenario: str | Path, overrides: list[str]) -> tuple[list[TraceJob], int]:
    """The jobs the testbed runs for ``scenario`` with ``overrides``, in arrival order, and its nodes."""
    from testbed.apps import registry as kinds

    from testbed.scenario import load
    from testbed.scenario.workload import build

    scn = load(scenario, overrides)
    rate = scn.cluster.min_rate()
    out = []
    for job in build(scn):
        # To the microsecond: the kind's run time is iterations x step, 1e-12 s off the trace's whole seconds.
        run = round(kinds.get(job.app.kind).ideal_runtime(job.app, rate), 6)
        est = round(job.spec.estimate, 6) if job.spec.estimate is not None else run
        out.append(TraceJob(job.spec.submit_time, job.spec.size, run, est))
    return out, scn.cluster.nodes


def ticks_for(jobs: list[TraceJob]) -> int:
    """The smallest integer making every arrival, run time and estimate a whole number of ticks."""
    den = 1
    for j in jobs:
        for x in (j.submit, j.run, j.estimate):
            den = math.lcm(den, Fraction(repr(x)).denominator)
    if den > 10**6:
        raise SystemExit(f"times too fine for AccaSim's integer SWF times ({den} ticks a second)")
    return den


def write_swf(jobs: list[TraceJob], path: Path, ticks: int) -> None:
    """``jobs`` as SWF lines, times in ticks (AccaSim reads requested time, field 9, as the estimate)."""
    with open(path, "w") as fh:
        fh.write(f"; jobs the testbed runs, times x{ticks}\n")
        for i, j in enumerate(jobs, start=1):
            sub, run, est = (int(Fraction(repr(x)) * ticks) for x in (j.submit, j.run, j.estimate))
            fields = [i, sub, -1, run, j.size, -1, -1, j.size, est, -1, 1, 1, 1, -1, -1, -1, -1, -1]
            fh.write(" ".join(str(f) for f in fields) + "\n")


# --------------------------------------------------------------------------------------------------------
# The reference schedulers: one job per node, sizes in nodes, event by event. Each returns the waits.


def _simulate(jobs: list[TraceJob], nodes: int, pick) -> list[float]:
    """Runs ``pick(now, queue, free, running) -> [queue indices to start]`` after each event, an arrival or
    an end; ``running`` is a sorted list of (estimated end, size, job). At one instant the arrivals come
    first (in arrival order), then the ends (in the order the jobs started), as the testbed's simulator
    orders its heap (arrivals are pushed before it starts)."""
    events = [(j.submit, 0, i, 0.0) for i, j in enumerate(jobs)]  # (time, 0 arrival / 1 end, seq, est end)
    heapq.heapify(events)
    seq = len(jobs)
    job_of: dict[int, int] = {}
    waits = [0.0] * len(jobs)
    running: list[tuple[float, int, int]] = []  # (estimated end, size, job), sorted
    queue: list[int] = []
    free = nodes
    while events:
        now, kind, n, est_end = heapq.heappop(events)
        if kind == 0:
            queue.append(n)
        else:
            i = job_of.pop(n)
            free += jobs[i].size
            running.remove((est_end, jobs[i].size, i))
        started = pick(now, [jobs[i] for i in queue], free, running)
        for q in started:
            i = queue[q]
            free -= jobs[i].size
            waits[i] = now - jobs[i].submit
            job_of[seq] = i
            heapq.heappush(events, (now + jobs[i].run, 1, seq, now + jobs[i].estimate))
            bisect.insort(running, (now + jobs[i].estimate, jobs[i].size, i))
            seq += 1
        if started:
            gone = set(started)
            queue = [i for q, i in enumerate(queue) if q not in gone]
    return waits


def fcfs(jobs: list[TraceJob], nodes: int) -> list[float]:
    """First come first served: the head starts when it fits; nothing passes it."""

    def pick(now, queue, free, running):
        out = []
        for q, j in enumerate(queue):
            if j.size > free:
                break
            free -= j.size
            out.append(q)
        return out

    return _simulate(jobs, nodes, pick)


def easy(jobs: list[TraceJob], nodes: int) -> list[float]:
    """EASY by counts: heads start while they fit; then the head's shadow time (when enough nodes are
    free by the running jobs' estimates) and extra nodes (free then beyond its size); a later job starts
    if it fits now and either ends by the shadow time or needs no more than the extra nodes."""

    def pick(now, queue, free, running):
        out = []
        q = 0
        while q < len(queue) and queue[q].size <= free:
            free -= queue[q].size
            out.append(q)
            q += 1
        if q >= len(queue) - 1:
            return out
        head = queue[q]
        avail, shadow = free, now
        for end, size, _ in running:
            if avail >= head.size:
                break
            avail += size
            shadow = max(now, end)
        # The jobs started above run too: they end after `now` (a run of 0 apart) and hold their nodes.
        for p in out:
            if avail >= head.size:
                break
            avail += queue[p].size
            shadow = max(shadow, now + queue[p].estimate)
        extra = avail - head.size
        for p in range(q + 1, len(queue)):
            j = queue[p]
            if j.size > free:
                continue
            if now + j.estimate <= shadow:
                free -= j.size
                out.append(p)
            elif j.size <= extra:
                free -= j.size
                extra -= j.size
                out.append(p)
        return out

    return _simulate(jobs, nodes, pick)


def greedy(jobs: list[TraceJob], nodes: int) -> list[float]:
    """AccaSim's EASY as it behaves: every queued job that fits now starts, in queue order, whatever its
    length (no reservation holds). AccaSim also keeps its blocked head from starting before the head's
    reservation time; with estimates equal to the run times, as here, no more nodes are free before then
    than when it was computed, so that changes nothing."""

    def pick(now, queue, free, running):
        out = []
        for q, j in enumerate(queue):
            if j.size <= free:
                free -= j.size
                out.append(q)
        return out

    return _simulate(jobs, nodes, pick)


# --------------------------------------------------------------------------------------------------------


def run_accasim(swf: Path, nodes: int, policy: str, ticks: int, results: Path) -> dict:
    """One AccaSim simulation of ``swf`` on ``nodes`` 1-core nodes: its mean wait (in the testbed's
    seconds), jobs and the seconds its own loop took."""
    shim()  # before any accasim import
    from accasim.base.allocator_class import FirstFit
    from accasim.base.scheduler_class import EASYBackfilling, FirstInFirstOut
    from accasim.base.simulator_class import Simulator

    results.mkdir(parents=True, exist_ok=True)
    config = results / "sys_config.json"
    config.write_text(
        json.dumps(
            {
                "groups": {"node": {"core": 1}},
                "resources": {"node": nodes},
                "equivalence": {"processor": {"core": 1}},
                "start_time": 0,
            }
        )
    )
    dispatcher = {"fcfs": FirstInFirstOut, "easy": EASYBackfilling}[policy](FirstFit())
    sim = Simulator(
        str(swf),
        str(config),
        dispatcher,
        RESULTS_FOLDER_PATH=str(results),
        scheduling_output=False,
        statistics_output=False,
        show_statistics=False,
    )
    t = time.perf_counter()
    sim.start_simulation()
    wall = time.perf_counter() - t
    waits = sim.mapper.wtimes
    return {
        "jobs": len(waits),
        "mean_wait_s": sum(waits) / len(waits) / ticks,
        "loop_s": round(wall, 3),
    }


def main(argv: list[str]) -> int:
    swf, nodes, policy, ticks, results = argv
    print(json.dumps(run_accasim(Path(swf), int(nodes), policy, int(ticks), Path(results))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
