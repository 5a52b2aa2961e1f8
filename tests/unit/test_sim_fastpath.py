"""The simulator's job-level fast path (docs/architecture.md, "The simulator's job-level fast path"): a
compute-only job run as one piece gives the job rows, and the processes' starts and ends, of the same run
rank by rank, with far fewer heap events."""

from __future__ import annotations

import math
import random

import pytest
from testbed.apps.synthetic import SyntheticConfig
from testbed.schedulers.base import JobSpec
from testbed.schedulers.batch import Batch
from testbed.schedulers.gang import Gang
from testbed.schedulers.local import Local

from testbed.core import events as ev
from testbed.core.jobs import Job, WaitSpec
from testbed.core.kinds import Fault, FaultKind, OnNodeDown
from testbed.results import timeline
from testbed.results.summary import job_rows, tally
from testbed.sim.engine import Simulation, _FastPath

REL = 1e-9
NUMERIC = ("starting_time", "execution_time", "finish_time", "waiting_time", "turnaround_time", "cpu_time")


def compute_job(job_id: str, size: int, t: float, cpu_s: float, steps: int, barrier: bool = False) -> Job:
    """A trace-like job: ``cpu_s`` of CPU per rank in ``steps`` computes (a barrier after each if asked)."""
    app = SyntheticConfig(iterations=steps, gcomp=cpu_s / steps / 1e-3, barrier=barrier)
    return Job(JobSpec(job_id, size, t, estimate=cpu_s * 1.5), app, WaitSpec("block", 300.0, "none"))


def workload(n: int, nodes: int, seed: int, barrier_every: int = 0) -> list[Job]:
    rng = random.Random(seed)
    jobs, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(1 / 3.0)
        size = rng.choice([1, 1, 2, 3, 4, nodes // 2, nodes])
        cpu = rng.uniform(0.5, 20.0)
        barrier = barrier_every > 0 and i % barrier_every == 0
        jobs.append(compute_job(f"j{i}", size, t, cpu, rng.randint(1, 40), barrier))
    return jobs


def run(jobs, sched, params, fast: bool, **kw) -> tuple[Simulation, list[dict]]:
    sim = Simulation(jobs, sched, params, fast_path=fast, **kw)
    sim.run()
    return sim, sim.events


def close(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-9)


def assert_same(fast_events: list[dict], slow_events: list[dict]) -> None:
    fast = {r["job_id"]: r for r in job_rows(fast_events)}
    slow = {r["job_id"]: r for r in job_rows(slow_events)}
    assert fast.keys() == slow.keys()
    for job_id, s in slow.items():
        f = fast[job_id]
        for key in NUMERIC:
            assert close(f[key], s[key]), (job_id, key, f[key], s[key])
        for key in ("final_state", "allocated_resources", "reason"):
            assert f[key] == s[key], (job_id, key, f[key], s[key])
    # Each process's start and end, with its fields: the same records at the same times.
    for kind in ("proc_started", "proc_exited"):

        def key(e):
            return (e["job"], e["rank"], e.get("code"), e.get("reason"), e["node"])

        fs = sorted((e for e in fast_events if e["kind"] == kind), key=key)
        ss = sorted((e for e in slow_events if e["kind"] == kind), key=key)
        assert [key(e) for e in fs] == [key(e) for e in ss]
        for a, b in zip(fs, ss, strict=True):
            assert a.keys() == b.keys()
            assert close(a["t"], b["t"]), (a, b)
            if "cpu_s" in a:
                assert close(a["cpu_s"], b["cpu_s"]), (a, b)
    # The same slot switches on the same nodes (a fast-path rank counts as the process it stands for).
    sw = [(e["t"], e["node"], e["slot"], tuple(e["jobs"])) for e in fast_events if e["kind"] == "slot_switch"]
    sw0 = [
        (e["t"], e["node"], e["slot"], tuple(e["jobs"])) for e in slow_events if e["kind"] == "slot_switch"
    ]
    assert sorted(sw) == sorted(sw0)


CASES = {
    "fcfs": (Batch, {"backfill": False}, {}),
    "easy": (Batch, {"backfill": True}, {}),
    "easy-random-nodes": (Batch, {"backfill": True, "packing": False}, {}),
    "easy-duration": (Batch, {"backfill": True}, {"duration": 60.0}),
    "gang": (Gang, {"mpl": 3, "quantum_ms": 1000.0}, {}),
    "gang-alternate": (Gang, {"mpl": 3, "quantum_ms": 700.0, "alternate": True}, {}),
    "gang-duration": (Gang, {"mpl": 2, "quantum_ms": 500.0}, {"duration": 50.0}),
    "gang-mixed": (Gang, {"mpl": 3, "quantum_ms": 900.0}, {"barrier_every": 3}),
    "easy-mixed": (Batch, {"backfill": True}, {"barrier_every": 2}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fast_path_matches_rank_by_rank(case):
    sched, params, kw = CASES[case]
    kw = dict(kw)
    mixed = kw.pop("barrier_every", 0)
    jobs = workload(40, 8, seed=len(case), barrier_every=mixed)
    fsim, fast = run(jobs, sched, params, True, nodes=8, **kw)
    ssim, slow = run(jobs, sched, params, False, nodes=8, **kw)
    assert fsim._fast is not None and ssim._fast is None
    assert_same(fast, slow)
    # Heap events pushed: a job with barriers still costs its steps.
    assert fsim._seq < ssim._seq / (1.2 if mixed else 3), (fsim._seq, ssim._seq)


@pytest.mark.parametrize(
    "sched,params", [(Batch, {"backfill": True}), (Gang, {"mpl": 2, "quantum_ms": 800.0})]
)
@pytest.mark.parametrize("on_down", [OnNodeDown.FAIL, OnNodeDown.REQUEUE])
def test_fast_path_node_faults(sched, params, on_down):
    jobs = workload(30, 8, seed=5)
    faults = [
        Fault(7.5, 0, FaultKind.DOWN),
        Fault(20.25, 0, FaultKind.UP),
        Fault(31.0, 5, FaultKind.DOWN),
        Fault(33.0, 3, FaultKind.DOWN),
        Fault(45.0, 5, FaultKind.UP),
        Fault(46.0, 3, FaultKind.UP),
    ]
    kw = {"nodes": 8, "faults": faults, "on_node_down": on_down}
    fsim, fast = run(jobs, sched, params, True, **kw)
    ssim, slow = run(jobs, sched, params, False, **kw)
    assert_same(fast, slow)
    assert any(e["kind"] == "proc_exited" and e["code"] == -9 for e in fast)  # the faults hit running jobs
    assert fsim._seq < ssim._seq


def test_gang_stops_and_continues_one_job_in_o1_events():
    """Two 4-node jobs of 10.3 s in 1000 steps on 4 nodes under gang with 1-s quanta: they alternate, each
    stopped and continued about 10 times; one piece costs a few events per quantum, not per step. (Not
    10 s: a job whose work ends at the very instant of the switch that stops it ends a quantum later rank
    by rank when float rounding orders the switch first; the fast path ends it then.)"""
    jobs = [compute_job("A", 4, 0.0, 10.3, 1000), compute_job("B", 4, 0.0, 10.3, 1000)]
    params = {"mpl": 2, "quantum_ms": 1000.0}
    fsim, fast = run(jobs, Gang, params, True, nodes=4)
    ssim, slow = run(jobs, Gang, params, False, nodes=4)
    assert_same(fast, slow)
    ends = {e["job"]: e["t"] for e in fast if e["kind"] == "job_finished"}
    assert ends["A"] == pytest.approx(20.3, abs=0.05) and ends["B"] == pytest.approx(20.6, abs=0.05)
    assert fsim._seq < 100 < 4000 < ssim._seq


def test_what_the_fast_path_leaves_rank_by_rank():
    jobs = [compute_job("A", 2, 0.0, 1.0, 10)]
    # Processor sharing among jobs of a node, gang with skew: no fast path.
    assert Simulation(jobs, Local, {}, nodes=2)._fast is None
    assert Simulation(jobs, Gang, {}, nodes=2, switch_skew_s=0.01)._fast is None
    assert Simulation(jobs, Gang, {}, nodes=2)._fast is _FastPath.BY_SLOT
    assert Simulation(jobs, Batch, {}, nodes=2)._fast is _FastPath.ALWAYS
    # A job on nodes of different rates, or with a barrier and a spinning wait, runs rank by rank under
    # batch too.
    from testbed.schedulers.base import NodeInfo

    info = [NodeInfo(1.0, None), NodeInfo(0.5, None)]
    spin = compute_job("B", 2, 0.0, 1.0, 10, barrier=True)
    spin = Job(spin.spec, spin.app, WaitSpec("spin", 300.0, "none"))
    mixed = [compute_job("A", 2, 0.0, 1.0, 10), spin]
    sim = Simulation(mixed, Batch, {}, nodes=2, node_info=info)
    sim.run()
    assert not sim.fluid and sim._fast is _FastPath.ALWAYS
    ssim = Simulation(mixed, Batch, {}, nodes=2, node_info=info, fast_path=False)
    ssim.run()
    assert sim._seq == ssim._seq and sim.events == ssim.events


def records(events: list[dict]) -> list[tuple]:
    """The log as a multiset: every record, its fields exact."""
    return sorted(tuple(sorted((k, repr(v)) for k, v in e.items())) for e in events)


@pytest.mark.parametrize("latency_s", [50e-6, 0.0])
@pytest.mark.parametrize("backfill", [True, False])
def test_lockstep_jobs_exact_under_batch(backfill, latency_s):
    """Jobs of computes with a barrier after each (a trace job's steps), under batch: one piece each gives
    the very records of the run rank by rank (times and CPU to the last bit, every Progress), with a few
    heap events per job instead of several per step and rank."""
    jobs = workload(40, 8, seed=11, barrier_every=1)
    assert all(j.app.barrier for j in jobs)
    kw = {"nodes": 8, "latency_s": latency_s}
    fsim, fast = run(jobs, Batch, {"backfill": backfill}, True, **kw)
    ssim, slow = run(jobs, Batch, {"backfill": backfill}, False, **kw)
    assert records(fast) == records(slow)
    assert sum(e["kind"] == "progress" for e in fast) > 100
    assert fsim._seq < ssim._seq / 5, (fsim._seq, ssim._seq)


@pytest.mark.parametrize("quantum_ms", [1000.0, 730.0])
def test_lockstep_jobs_under_gang(quantum_ms):
    """The same jobs under strict gang, stopped and continued amid their steps and barriers (a message that
    arrives while its receiver is stopped is read when it continues): the job rows, the processes' ends
    and every Progress agree with the run rank by rank (to 1e-9)."""
    jobs = workload(40, 8, seed=3, barrier_every=1)
    params = {"mpl": 3, "quantum_ms": quantum_ms}
    fsim, fast = run(jobs, Gang, params, True, nodes=8)
    ssim, slow = run(jobs, Gang, params, False, nodes=8)
    assert_same(fast, slow)

    def progress(events):
        return sorted((e["job"], e["rank"], e["value"], e["t"]) for e in events if e["kind"] == "progress")

    fp, sp = progress(fast), progress(slow)
    assert [p[:3] for p in fp] == [p[:3] for p in sp] and len(fp) > 100
    assert all(close(a[3], b[3]) for a, b in zip(fp, sp, strict=True))
    assert fsim._seq < ssim._seq / 3, (fsim._seq, ssim._seq)


@pytest.mark.parametrize(
    "sched,params", [(Batch, {"backfill": True}), (Gang, {"mpl": 3, "quantum_ms": 900.0})]
)
def test_grouped_records_stand_for_each_ranks(sched, params):
    """A log written through a sink (the runner's file) has one record for a lane's ranks (testbed/core/
    events.py, GROUPED) and, under gang, one for every node a switch by job reaches (SWITCHED_FIELD): read
    back as the records they stand for, they are the log kept rank by rank and node by node, and the
    results (the switches' count of nodes included) and the timeline read them alike."""
    jobs = workload(40, 8, seed=7, barrier_every=1)
    kept = Simulation(jobs, sched, params, nodes=8)
    kept.run()
    grouped: list[dict] = []
    Simulation(jobs, sched, params, nodes=8, sink=grouped.append).run()
    assert any("nodes" in e and e["kind"] in ev.GROUPED for e in grouped)
    switches = [e for e in grouped if e["kind"] == ev.SLOT_SWITCH]
    assert len(switches) > 10 if sched is Gang else not switches
    assert all(ev.SWITCHED_FIELD in e and "node" not in e and "nodes" not in e for e in switches)
    assert len(grouped) < len(kept.events) * 0.75, (len(grouped), len(kept.events))  # jobs of 1-8 ranks
    assert list(ev.per_node_all(grouped, 8)) == kept.events
    assert job_rows(grouped) == job_rows(kept.events)
    a, b = tally(grouped), tally(kept.events)
    per_node = [[t.node_cpu(n) for n in range(8)] for t in (a, b)]
    assert per_node[0] == per_node[1]
    assert (dict(a.cpu), a.switches, a.progress) == (dict(b.cpu), b.switches, b.progress)
    assert timeline.build(grouped, 8) == timeline.build(kept.events, 8)
