"""The discrete-event simulator: exact hand-worked timings, the event format, and determinism."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

import pytest
from testbed.apps.synthetic import SyntheticConfig
from testbed.schedulers.base import (
    CollectiveEnter,
    CollectiveLeave,
    JobSpec,
    LocalDecision,
    LocalEvent,
    MessageArrived,
    MessageConsumed,
    ProcAdded,
    ProcExited,
    ReceiverBlocked,
    ReceiverWaiting,
    RunAll,
    Scheduler,
    SlotStart,
    Timer,
)
from testbed.schedulers.batch import Batch
from testbed.schedulers.gang import Gang
from testbed.schedulers.local import Local, LocalGlobal

from testbed.core.jobs import Job, WaitSpec
from testbed.sim import simulate

LAT = 50e-6


def job(job_id: str, size: int = 1, t: float = 0.0, iterations: int = 10, gcomp: float = 100.0, **app) -> Job:
    """Default: 10 iterations of 0.1 s CPU (1 s in all) with a barrier each; ``wait_mode`` /
    ``spin_time_us`` / ``send_wait`` set how its processes wait (WaitSpec), the rest are app fields."""
    wait = WaitSpec(
        app.pop("wait_mode", "block"), app.pop("spin_time_us", 300.0), app.pop("send_wait", "none")
    )
    return Job(_spec(job_id, size, t), SyntheticConfig(iterations=iterations, gcomp=gcomp, **app), wait)


def _spec(job_id: str, size: int, t: float) -> JobSpec:
    return JobSpec(job_id, size, t)


def of_kind(events, kind):
    return [e for e in events if e["kind"] == kind]


def finish_times(events) -> dict[str, float]:
    return {e["job"]: e["t"] for e in of_kind(events, "job_finished")}


# --------------------------------------------------------------------------------------------------------
# Hand-worked timings


def test_single_job_on_dedicated_nodes_takes_its_cpu_time_plus_barrier_latency():
    events = simulate([job("A", size=4)], Batch, {}, nodes=4)
    # each barrier: rank -> rank 0, then rank 0 -> all: two message latencies
    assert finish_times(events) == {"A": pytest.approx(1.0 + 10 * 2 * LAT)}
    exits = of_kind(events, "proc_exited")
    assert len(exits) == 4
    assert all(e["cpu_s"] == pytest.approx(1.0) and e["code"] == 0 and e["reason"] is None for e in exits)


def test_cpu_rate_stretches_compute():
    events = simulate([job("A", barrier=False)], Batch, {}, nodes=1, cpu_rate=0.5)
    assert finish_times(events) == {"A": pytest.approx(2.0)}
    [e] = of_kind(events, "proc_exited")
    # CPU seconds at rate 1.0, as the kernel counts them on real processes (2 s held at rate 0.5), so a
    # summary's utilisation divides both backends' by the node's rate alike.
    assert e["cpu_s"] == pytest.approx(1.0)


def test_batch_runs_two_jobs_one_after_another():
    events = simulate([job("A"), job("B")], Batch, {}, nodes=1)
    assert finish_times(events) == {"A": pytest.approx(1.0), "B": pytest.approx(2.0)}
    starts = {e["job"]: e["t"] for e in of_kind(events, "job_started")}
    assert starts == {"A": 0.0, "B": pytest.approx(1.0)}


def test_local_shares_one_node_by_processor_sharing():
    events = simulate([job("A"), job("B")], Local, {}, nodes=1)
    assert finish_times(events) == {"A": pytest.approx(2.0), "B": pytest.approx(2.0)}


def test_gang_alternates_quanta_between_two_jobs():
    events = simulate([job("A"), job("B")], Gang, {"mpl": 2, "quantum_ms": 100.0, "lead_ms": 10.0}, nodes=1)
    done = finish_times(events)
    # A runs in [0.01, 0.11), [0.21, 0.31) ...: its tenth quantum ends at 1.91; B's at 2.01.
    assert done["A"] == pytest.approx(1.91)
    assert done["B"] == pytest.approx(2.01)
    switches = of_kind(events, "slot_switch")
    planned = of_kind(events, "slot_planned")
    # One node: one switch per Dispatch while it has something to switch (the last is planned as B ends).
    assert len(switches) == len([e for e in planned if e["at"] < done["B"]]) == len(planned) - 1
    assert [e["slot"] for e in planned] == list(range(len(planned)))
    assert all(e["late_ms"] == pytest.approx(0.0) for e in switches)


def test_gang_switch_skew_spreads_over_nodes():
    events = simulate([job("A", size=3)], Gang, {}, nodes=3, switch_skew_s=0.002)
    first = [e for e in of_kind(events, "slot_switch") if e["slot"] == 0]
    assert [e["node"] for e in first] == [0, 1, 2]
    assert [e["late_ms"] for e in first] == pytest.approx([0.0, 1.0, 2.0])
    assert {e["src"] for e in first} == {"node0", "node1", "node2"}


def test_io_takes_wall_time_and_no_cpu():
    app = {"gcomp": 0.0, "gio": 3, "io_time_ms": 10.0}
    events = simulate([job("A", iterations=2, **app)], Batch, {}, nodes=1)
    assert finish_times(events) == {"A": pytest.approx(0.06)}
    [e] = of_kind(events, "proc_exited")
    assert e["cpu_s"] == pytest.approx(0.0)


def test_io_bound_job_leaves_the_cpu_to_a_compute_job():
    io = job("IO", iterations=50, gcomp=0.0, gio=2, io_time_ms=10.0)  # 1 s of I/O, no CPU
    events = simulate([job("C"), io], Local, {}, nodes=1)
    done = finish_times(events)
    assert done["C"] == pytest.approx(1.0)
    assert done["IO"] == pytest.approx(1.0)


def _spin_cost(mode: str) -> float:
    # S waits on messages (10 ms latency) most of the time; its rank 0 shares node 0 with C.
    c = job("C", barrier=False)
    s = job("S", size=2, iterations=100, gcomp=0.001, wait_mode=mode)  # 1 us of CPU: almost all waiting
    return finish_times(simulate([c, s], Local, {}, nodes=2, latency_s=0.01))["C"]


def test_spinning_wastes_cpu_blocking_does_not():
    block = _spin_cost("block")
    spin = _spin_cost("spin")
    spin_block = _spin_cost("spin-block")
    assert block == pytest.approx(1.0, abs=1e-4)  # C shares node 0 with S's 100 x 1 us of CPU only
    assert spin > block + 0.5  # S burns half of node 0 while it waits
    assert block < spin_block < block + 0.05  # spins 300 us per wait, then blocks


def test_nice_weights_follow_the_cfs_table():
    events = simulate([job("A"), job("B")], NiceB, {}, nodes=1)
    done = finish_times(events)
    share_a = 1024 / (1024 + 335)  # nice 0 against nice 5
    assert done["A"] == pytest.approx(1.0 / share_a)
    assert done["B"] == pytest.approx(2.0)


# --------------------------------------------------------------------------------------------------------
# Policies written for these tests


class NiceBLocal(RunAll):
    def on_event(self, now, event):
        d = super().on_event(now, event)
        return LocalDecision(run=d.run, nice={p: 5 for p in self.procs if p.job_id == "B"})


class NiceB(Scheduler):
    name = "nice-b"
    summary = "test: job B at nice 5"
    global_policy = LocalGlobal
    local_policy = NiceBLocal
    defaults = Local.defaults


class Recorder(RunAll):
    log: list[tuple[int, float, LocalEvent]] = []

    def on_event(self, now: float, event: LocalEvent) -> LocalDecision:
        type(self).log.append((self.node, now, event))
        d = super().on_event(now, event)
        wakeup = 0.005 if isinstance(event, ProcAdded) else None
        return LocalDecision(run=d.run, wakeup=wakeup)


class Listening(Recorder):
    wants_message_events = True
    log: list = []


class Deaf(Recorder):
    log: list = []


def recorder_scheduler(local: type) -> type[Scheduler]:
    class Rec(Scheduler):
        name = "rec"
        summary = "test: records local events"
        global_policy = LocalGlobal
        local_policy = local
        defaults = Local.defaults

    return Rec


def test_message_events_only_for_policies_that_want_them():
    j = job("A", size=2, iterations=1, gcomp=10.0, wait_mode="spin-block")
    simulate([j], recorder_scheduler(Deaf), {}, nodes=2)
    assert {type(e) for _, _, e in Deaf.log} == {ProcAdded, ProcExited, Timer}

    simulate([j], recorder_scheduler(Listening), {}, nodes=2, latency_s=1e-3)
    node1 = [(t, type(e)) for n, t, e in Listening.log if n == 1]
    kinds = [k for _, k in node1]
    # rank 1: enters, sends to 0, waits (spins, then blocks after 300 us), gets rank 0's answer 2 ms later
    assert kinds[:1] == [ProcAdded]
    assert kinds.index(CollectiveEnter) < kinds.index(ReceiverWaiting) < kinds.index(ReceiverBlocked)
    assert kinds.index(ReceiverBlocked) < kinds.index(MessageArrived) < kinds.index(MessageConsumed)
    assert kinds.index(MessageConsumed) < kinds.index(CollectiveLeave) < kinds.index(ProcExited)
    times = dict((k, t) for t, k in reversed(node1))
    assert times[ReceiverBlocked] - times[ReceiverWaiting] == pytest.approx(300e-6)
    assert times[MessageArrived] == pytest.approx(0.01 + 2e-3)
    arrived0 = [e for n, _, e in Listening.log if n == 0 and isinstance(e, MessageArrived)]
    assert arrived0 == [MessageArrived(arrived0[0].proc, 1, 1)]
    assert Timer() in [e for _, _, e in Listening.log]


def test_timer_is_delivered_at_the_wakeup():
    Deaf.log.clear()
    simulate([job("A", iterations=1, gcomp=1000.0)], recorder_scheduler(Deaf), {}, nodes=1)
    [(_, t, _)] = [x for x in Deaf.log if isinstance(x[2], Timer)]
    assert t == pytest.approx(0.005)


def test_gang_local_sees_slot_starts():
    events = simulate([job("A", size=2, iterations=1)], Gang, {"lead_ms": 10.0}, nodes=2)
    assert {e["node"] for e in of_kind(events, "slot_switch")} == {0, 1}
    assert of_kind(events, "slot_switch")[0]["at"] == pytest.approx(0.01)
    assert SlotStart  # the local side is covered in test_gang


# --------------------------------------------------------------------------------------------------------
# Event log


def test_event_format():
    jobs = [job("A", size=2, iterations=25, gcomp=10.0), job("X", size=9)]
    events = simulate(jobs, Gang, {"lead_ms": 10.0}, nodes=2)
    assert all(list(e)[:4] == ["t", "wall", "src", "kind"] for e in events)
    assert [e["t"] for e in events] == sorted(e["t"] for e in events)
    sub = of_kind(events, "job_submitted")
    assert sub[0] == {
        **{"t": 0.0, "wall": 0.0, "src": "coordinator", "kind": "job_submitted"},
        **{"job": "A", "size": 2, "job_class": "compute"},
    }
    [rej] = of_kind(events, "job_rejected")
    assert rej["job"] == "X" and "9" in rej["reason"]
    [st] = of_kind(events, "job_started")
    assert st["nodes"] == [0, 1] and st["src"] == "coordinator"
    ps = of_kind(events, "proc_started")
    assert [(e["src"], e["job"], e["rank"], e["node"], e["pid"]) for e in ps] == [
        ("node0", "A", 0, 0, None),
        ("node1", "A", 1, 1, None),
    ]
    prog = [e for e in of_kind(events, "progress") if e["rank"] == 1]
    assert [e["value"] for e in prog] == [10, 20, 25]
    assert all(e["unit"] == "barriers" and e["src"] == "node1" for e in prog)
    sw = of_kind(events, "slot_switch")[0]
    assert set(sw) == {"t", "wall", "src", "kind", "node", "slot", "at", "effect", "late_ms", "jobs"}
    assert all(isinstance(j, str) for e in of_kind(events, "slot_switch") for j in e["jobs"])
    assert set(of_kind(events, "slot_planned")[0]) == {"t", "wall", "src", "kind", "slot", "at", "rows"}


def test_duration_kills_unfinished_jobs():
    jobs = [job("A"), job("B"), job("late", t=10.0)]
    events = simulate(jobs, Batch, {}, nodes=1, duration=1.5)
    assert finish_times(events) == {"A": pytest.approx(1.0)}
    killed = of_kind(events, "job_killed")
    assert [(e["job"], e["t"], e["reason"]) for e in killed] == [("B", 1.5, "scenario duration reached")]
    ex = [e for e in of_kind(events, "proc_exited") if e["job"] == "B"]
    assert ex[0]["code"] != 0 and ex[0]["cpu_s"] == pytest.approx(0.5)
    assert "late" not in {e.get("job") for e in events}


class NeverRun(RunAll):
    def on_event(self, now, event):
        super().on_event(now, event)
        return LocalDecision(run=frozenset())


class Stuck(Scheduler):
    name = "stuck"
    summary = "test: never runs anything"
    global_policy = LocalGlobal
    local_policy = NeverRun
    defaults = Local.defaults


def test_a_job_that_can_never_progress_is_killed_with_a_reason():
    events = simulate([job("A")], Stuck, {}, nodes=1)
    [k] = of_kind(events, "job_killed")
    assert k["job"] == "A" and "stalled" in k["reason"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="nodes"):
        simulate([], Batch, {}, nodes=0)
    with pytest.raises(ValueError, match="twice"):
        simulate([job("A"), job("A")], Batch, {}, nodes=1)


# --------------------------------------------------------------------------------------------------------
# Determinism and speed


def workload(n: int, nodes: int, seed: int) -> list[Job]:
    rng = random.Random(seed)
    jobs = []
    t = 0.0
    for i in range(n):
        t += rng.expovariate(1 / 0.5)
        app = SyntheticConfig(
            iterations=rng.randint(10, 40),
            gcomp=rng.uniform(20, 150),
            gio=rng.choice([0, 0, 2]),
        )
        wait = WaitSpec(rng.choice(["block", "spin", "spin-block"]))
        jobs.append(Job(_spec(f"j{i}", rng.choice([1, 2, 4, 8, nodes]), t), app, wait))
    return jobs


@pytest.mark.parametrize("sched", [Batch, Local, Gang])
def test_same_inputs_same_events(sched: type[Scheduler]):
    params: Mapping[str, Any] = {"packing": False}
    jobs = workload(20, 8, seed=5)
    a = simulate(jobs, sched, params, nodes=8, seed=3)
    b = simulate(jobs, sched, params, nodes=8, seed=3)
    assert a == b
    assert len(finish_times(a)) == 20


def test_gang_simulation_is_fast():
    jobs = workload(50, 16, seed=1)
    t0 = time.perf_counter()
    events = simulate(jobs, Gang, {}, nodes=16)
    elapsed = time.perf_counter() - t0
    assert len(finish_times(events)) == 50
    assert elapsed < 20.0  # loose: typically well under a second; catches pathologies only


def test_a_process_does_nothing_before_its_local_policy_lets_it():
    # B (I/O only, no compute) is placed in row 1 while A runs: its first write waits for B's slot.
    b = job("B", iterations=1, gcomp=0.0, gio=1, io_time_ms=10.0, barrier=False)
    events = simulate([job("A"), b], Gang, {"mpl": 2, "lead_ms": 10.0}, nodes=1)
    assert finish_times(events)["B"] == pytest.approx(0.11 + 0.01)


class Periodic(RunAll):
    """Asks for a timer every millisecond, forever (like a periodic-boost policy)."""

    def on_event(self, now, event):
        d = super().on_event(now, event)
        return LocalDecision(run=d.run, wakeup=now + 0.001)


class PeriodicScheduler(Scheduler):
    name = "periodic"
    summary = "test: endless timers"
    global_policy = LocalGlobal
    local_policy = Periodic
    defaults = Local.defaults


def test_run_ends_when_every_job_has_ended_despite_endless_timers():
    events = simulate([job("A", t=1.0)], PeriodicScheduler, {}, nodes=1)
    assert finish_times(events) == {"A": pytest.approx(2.0)}
    assert events[-1]["kind"] == "job_finished"
