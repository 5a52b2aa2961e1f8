"""The coscheduling family (docs/policies.md, "Coscheduling mechanisms"): registration, each policy's
decisions on hand-made event sequences, the simulator's per-receive waits, and simulator runs showing the
papers' qualitative claims."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from testbed.apps.base import WORK_UNIT_S
from testbed.apps.synthetic import SyntheticConfig
from testbed.schedulers import registry
from testbed.schedulers.base import (
    CollectiveEnter,
    CollectiveLeave,
    GlobalPolicy,
    JobSpec,
    LocalDecision,
    LocalEvent,
    MessageArrived,
    MessageConsumed,
    PolicyConfigError,
    Proc,
    ProcAdded,
    ProcExited,
    ReceiverBlocked,
    ReceiverWaiting,
    RunAll,
    Scheduler,
    SenderBlocked,
    SenderWoken,
    Start,
    Timer,
)
from testbed.schedulers.batch import Batch
from testbed.schedulers.cosched import Cc, Dcs, Hybrid, Pb, PbSb, Sb, Spin, Sy, job_wait
from testbed.schedulers.gang import Gang
from testbed.schedulers.local import Local, LocalGlobal

from testbed.core.jobs import Job, WaitSpec
from testbed.sim import simulate
from testbed.sim.engine import Simulation

ALL = {"spin": Spin, "dcs": Dcs, "sb": Sb, "sy": Sy, "pb": Pb, "pbsb": PbSb, "cc": Cc, "hybrid": Hybrid}
A, B, C = Proc("A", 0), Proc("B", 0), Proc("C", 0)
BOOST, NORMAL = -10, 0


# --------------------------------------------------------------------------------------------------------
# Registration and declarations


@pytest.mark.parametrize("name", sorted(ALL))
def test_registered_and_selectable_by_name(name):
    cls = registry.get(name)
    assert cls is ALL[name] and cls.name == name and name in registry.names()
    assert "\n" not in cls.summary and cls.summary
    assert cls.global_policy is LocalGlobal
    assert cls.defaults["mpl"] == 3 and cls.defaults["packing"] is True
    gp = cls.make_global(4, {}, 0)
    lp = cls.make_local(0, {}, 0)
    assert isinstance(gp, LocalGlobal) and gp.mpl == 3
    assert type(lp).wants_message_events is (name != "spin")
    with pytest.raises(PolicyConfigError, match="unknown parameter"):
        cls.make_global(4, {"nonsense": 1}, 0)


def test_wait_modes_declared_as_the_papers_tie_them():
    modes = {n: (c.wait_mode, c.spin_time_us, c.allows_wait_mode_override) for n, c in ALL.items()}
    assert modes == {
        "spin": ("spin", None, True),
        "dcs": ("spin", None, False),
        "sb": ("spin-block", 300.0, False),
        "sy": ("spin", None, True),
        "pb": ("spin", None, False),
        "pbsb": ("spin-block", 300.0, True),
        "cc": ("spin-block", 300.0, False),
        "hybrid": ("block", None, False),
    }
    assert Spin.local_policy is RunAll
    # Senders: only CC waits for the NIC's acknowledgement (spin, then block); the others send as always.
    assert {n: c.send_wait for n, c in ALL.items()} == {n: "spin-block" if n == "cc" else "none" for n in ALL}
    for other in (Scheduler, Local, Batch, Gang):  # the base defaults keep the others as they were
        assert (other.wait_mode, other.spin_time_us, other.allows_wait_mode_override) == (None, None, True)


def test_job_wait_forces_the_scheme_unless_an_explicit_mode_may_override():
    own = {"wait_mode": "block", "spin_time_us": 50.0}
    assert job_wait(Local, {}, **own, explicit=False) == ("block", 50.0)
    assert job_wait(Sb, {}, **own, explicit=False) == ("spin-block", 300.0)
    assert job_wait(Sb, {"spin_time_us": 120}, **own, explicit=True) == ("spin-block", 120.0)  # tied
    assert job_wait(Hybrid, {}, **own, explicit=True) == ("block", 50.0)
    assert job_wait(Spin, {}, **own, explicit=False) == ("spin", 50.0)
    assert job_wait(Spin, {}, **own, explicit=True) == ("block", 50.0)  # spin allows the user's choice
    assert job_wait(PbSb, {}, **own, explicit=True) == ("block", 50.0)


@pytest.mark.parametrize(
    "name, params, match",
    [
        ("sb", {"boost_nice": 0}, "boost_nice"),
        ("dcs", {"boost_nice": -30}, "boost_nice"),
        ("hybrid", {"boost_nice": 5, "normal_nice": 5}, "boost_nice"),
        ("pb", {"interval_ms": 0}, "interval_ms"),
        ("cc", {"interval_ms": "1"}, "interval_ms"),
        ("sb", {"boost_ms": -1.0}, "boost_ms"),
        ("sy", {"yield_nice": 0}, "yield_nice"),
        ("sy", {"spin_time_us": -1}, "spin_time_us"),
        ("cc", {"spin_time_us": "300"}, "spin_time_us"),
        ("pbsb", {"normal_nice": True}, "normal_nice"),
    ],
)
def test_bad_parameters_are_refused_at_the_coordinator(name, params, match):
    with pytest.raises(PolicyConfigError, match=f"scheduler.params.{match}"):
        ALL[name].make_global(4, params, 0)


# --------------------------------------------------------------------------------------------------------
# Hand-made event sequences


class Feed:
    """Drives one local policy; remembers the nice values it has set (0 until it sets one)."""

    def __init__(self, cls: type[Scheduler], *procs: Proc, **params):
        self.policy = cls.make_local(0, params, 0)
        self.nice: dict[Proc, int] = {}
        self.wakeup: float | None = None
        self.last = LocalDecision()
        for p in procs:
            self(0.0, ProcAdded(p))

    def __call__(self, now: float, event: LocalEvent) -> LocalDecision:
        d = self.policy.on_event(now, event)
        self.last = d
        procs = self.policy.procs
        assert d.run == frozenset(procs)  # never stops anyone
        self.nice = {p: v for p, v in {**self.nice, **d.nice}.items() if p in procs}
        if d.wakeup is not None:
            self.wakeup = d.wakeup
        return d

    def boosted(self) -> set[Proc]:
        return {p for p, v in self.nice.items() if v == BOOST}

    def timer(self, now: float) -> LocalDecision:
        return self(now, Timer())


def arrive(p: Proc, unconsumed: int = 1) -> MessageArrived:
    return MessageArrived(p, 1, unconsumed)


def test_dcs_boosts_the_receiver_of_a_message_at_once():
    f = Feed(Dcs, A, B)
    assert f.boosted() == set()
    d = f(0.001, arrive(A))
    assert d.nice == {A: BOOST} and d.wakeup == pytest.approx(0.011)  # boost_ms = 10
    f(0.001, MessageConsumed(A, 0))
    d = f(0.002, arrive(A))  # already the favourite: nothing
    assert d.nice == {} and f.boosted() == {A}
    f(0.003, arrive(B))  # another process: it takes the favour
    assert f.boosted() == {B} and f.nice[A] == NORMAL
    f(0.004, ReceiverWaiting(B, "spin"))  # no more work for it: the boost would only feed a spinner
    assert f.boosted() == set()
    f(0.005, arrive(B))
    assert f.boosted() == {B}
    f.timer(0.011)  # A's old deadline: B keeps its own
    assert f.boosted() == {B}
    f.timer(0.015)  # one slice after its boost
    assert f.boosted() == set() and f.policy.favourite is None
    f(0.016, arrive(A))
    f(0.017, ProcExited(A))
    assert f.policy.favourite is None and f.last.run == frozenset({B})


def test_sb_wakes_and_boosts_a_blocked_receiver_and_restores_it_when_it_waits_again():
    f = Feed(Sb, A, B)
    f(0.0, ReceiverWaiting(A, "spin-block"))
    f(0.0001, arrive(A))  # still spinning: it takes the message itself
    f(0.0001, MessageConsumed(A, 0))
    assert f.boosted() == set()
    f(0.001, arrive(B))  # computing: nothing
    assert f.boosted() == set()
    f(0.002, ReceiverWaiting(A, "spin-block"))
    f(0.0023, ReceiverBlocked(A))
    d = f(0.004, arrive(A))
    assert d.nice == {A: BOOST} and d.wakeup == pytest.approx(0.014)
    f(0.004, MessageConsumed(A, 0))
    assert f.boosted() == {A}  # boosted while it computes
    f(0.006, ReceiverWaiting(A, "spin-block"))
    assert f.boosted() == set() and f.nice[A] == NORMAL
    f(0.0063, ReceiverBlocked(A))
    f(0.007, arrive(A))
    f.timer(0.017)  # boost_ms after the wake
    assert f.boosted() == set()


def test_sy_lowers_a_waiting_receiver_after_the_spin_time_and_restores_it_on_its_message():
    f = Feed(Sy, A, B)
    d = f(0.001, ReceiverWaiting(A, "spin"))
    assert d.wakeup == pytest.approx(0.0013) and d.nice == {}
    d = f.timer(0.0013)
    assert d.nice == {A: 19}
    f(0.002, arrive(A))
    d = f(0.002, MessageConsumed(A, 0))
    assert d.nice == {A: NORMAL}
    # a receive that completes within the spin time never yields
    f(0.003, ReceiverWaiting(B, "spin"))
    f(0.0031, MessageConsumed(B, 0))
    f.timer(0.0033)
    assert f.nice.get(B, NORMAL) == NORMAL


def test_sy_timer_a_little_early_still_counts():
    f = Feed(Sy, A, B)
    f(0.001, ReceiverWaiting(A, "spin"))
    assert f.timer(0.0013 - 1e-12).nice == {A: 19}


def test_pb_scans_round_robin_after_the_favourite_for_useful_work():
    f = Feed(Pb, A, B, C)
    assert f.wakeup == pytest.approx(0.001)  # armed when the second process came
    f.timer(0.001)
    assert f.boosted() == {A} and f.wakeup == pytest.approx(0.002)
    f.timer(0.002)  # next after A: B computes
    assert f.boosted() == {B} and f.nice[A] == NORMAL
    f(0.0025, ReceiverWaiting(C, "spin"))
    f.timer(0.003)  # C spins with nothing to read: skipped, A is next
    assert f.boosted() == {A}
    f(0.0031, arrive(C))  # nothing happens on an arrival under PB ...
    assert f.boosted() == {A}
    f(0.0032, ReceiverWaiting(B, "spin"))
    f.timer(0.004)  # ... but a waiting process whose message is there has useful work
    assert f.boosted() == {C}  # B: waiting, no message; C: its message arrived
    f(0.0041, MessageConsumed(C, 0))
    f(0.0042, ReceiverWaiting(C, "spin"))
    f(0.0043, ReceiverWaiting(A, "spin"))
    f.timer(0.005)  # all three spin with nothing to read: nobody is favoured
    assert f.boosted() == set()
    f(0.0051, arrive(B))
    f.timer(0.006)
    assert f.boosted() == {B}


def test_pb_keeps_a_useful_favourite_only_when_no_other_process_has_work():
    f = Feed(Pb, A, B)
    f(0.0, ReceiverWaiting(B, "spin"))
    for t in (0.001, 0.002, 0.003):
        f.timer(t)
        assert f.boosted() == {A}
    assert f.wakeup == pytest.approx(0.004)


def test_pb_timer_runs_only_with_two_processes_or_more():
    f = Feed(Pb, A)
    assert f.wakeup is None
    f(0.0005, ProcAdded(B))
    assert f.wakeup == pytest.approx(0.0015)
    f.timer(0.0015)
    assert f.boosted() == {A}
    f(0.002, ProcExited(A))
    d = f.timer(0.0025)
    assert d.wakeup is None and f.boosted() == set()
    f(0.003, ProcAdded(C))
    assert f.wakeup == pytest.approx(0.004)
    f.timer(0.004)  # the last pick (A) left: the scan starts where it was
    assert f.boosted() == {B}


def test_pbsb_adds_the_wake_boost_to_the_periodic_scan():
    f = Feed(PbSb, A, B)
    f(0.0, ReceiverWaiting(A, "spin-block"))
    f(0.0003, ReceiverBlocked(A))
    f(0.0004, arrive(A))
    assert f.boosted() == {A}  # at once, not at the next scan
    f(0.0004, MessageConsumed(A, 0))
    f.timer(0.001)  # scan after no pick: A first; both compute
    assert f.boosted() == {A}
    f.timer(0.002)
    assert f.boosted() == {A, B}  # A still holds its wake boost, B is the pick
    f(0.0021, ReceiverWaiting(A, "spin-block"))
    assert f.boosted() == {B}


def test_cc_favours_the_process_with_most_unconsumed_messages():
    f = Feed(Cc, A, B, C)
    f(0.0002, arrive(B, 1))
    f(0.0003, arrive(C, 1))
    f(0.0004, arrive(C, 2))
    f.timer(0.001)
    assert f.boosted() == {C}
    f(0.0011, MessageConsumed(C, 1))
    f(0.0012, MessageConsumed(C, 0))
    f.timer(0.002)
    assert f.boosted() == {B}
    f(0.0021, arrive(A, 1))
    f.timer(0.003)  # a tie: the first after the last pick (B) in round-robin order
    assert f.boosted() == {A}
    f(0.0031, MessageConsumed(A, 0))
    f(0.0032, MessageConsumed(B, 0))
    f.timer(0.004)
    assert f.boosted() == set()
    # and SB's side: a blocked receiver is woken and boosted on arrival
    f(0.0041, ReceiverWaiting(A, "spin-block"))
    f(0.0044, ReceiverBlocked(A))
    f(0.0045, arrive(A))
    assert f.boosted() == {A}


def test_cc_wakes_and_boosts_a_sender_blocked_for_its_ack_and_sb_does_not():
    f = Feed(Cc, A, B)
    f(0.0001, SenderBlocked(A))
    assert f.boosted() == set() and A in f.policy.send_blocked and not f.policy.useful(A)
    d = f(0.0005, SenderWoken(A))
    assert d.nice == {A: BOOST} and A not in f.policy.send_blocked
    f(0.0007, SenderBlocked(A))  # its next send blocks: the boost would do nothing for it now
    assert f.boosted() == set()
    f(0.0008, SenderWoken(A))
    f(0.0009, ReceiverWaiting(A, "spin-block"))  # as a woken receiver's, it ends at the next wait
    assert f.boosted() == set()
    f(0.0009, SenderBlocked(B))
    f(0.0009, ProcExited(B))
    assert f.policy.send_blocked == set()
    g = Feed(Sb, A)
    g(0.0001, SenderBlocked(A))
    g(0.0005, SenderWoken(A))
    assert g.boosted() == set()


def test_hybrid_boosts_from_collective_enter_to_leave_only():
    f = Feed(Hybrid, A, B)
    f(0.001, ReceiverWaiting(A, "block"))
    f(0.001, ReceiverBlocked(A))
    f(0.002, arrive(A))  # point-to-point: not boosted
    f(0.002, MessageConsumed(A, 0))
    assert f.boosted() == set()
    d = f(0.003, CollectiveEnter(A, "barrier"))
    assert d.nice == {A: BOOST} and d.wakeup is None
    f(0.003, ReceiverWaiting(A, "block"))
    f(0.004, arrive(A))
    f(0.004, MessageConsumed(A, 0))
    assert f.boosted() == {A}
    d = f(0.004, CollectiveLeave(A, "barrier"))
    assert d.nice == {A: NORMAL}
    f(0.005, CollectiveEnter(B, "allreduce"))
    f(0.006, ProcExited(B))
    assert f.last.run == frozenset({A}) and f.boosted() == set()


def test_boost_levels_are_parameters():
    f = Feed(Hybrid, A, boost_nice=-5, normal_nice=2)
    assert f.nice == {A: 2}  # set on arrival: the OS starts processes at 0
    f(0.0, CollectiveEnter(A, "barrier"))
    assert f.nice == {A: -5}


# --------------------------------------------------------------------------------------------------------
# The simulator: one receive per message, as on the NIC


class _Recorder(Sb.local_policy):
    log: list = []

    def on_event(self, now, event):
        type(self).log.append((self.node, now, event))
        return super().on_event(now, event)


class _Placed(GlobalPolicy):
    """Starts each job at once on the nodes ``params["place"]`` names."""

    def submit(self, now, job):
        return [Start(job.job_id, tuple(self.params["place"][job.job_id]))]

    def finished(self, now, job_id):
        return []


class _RecSb(Sb):
    name = "rec-sb"
    global_policy = _Placed
    local_policy = _Recorder

    class Params(Sb.Params):
        place: dict[str, tuple[int, ...]] = {}


def test_sim_waits_afresh_for_each_message_as_the_nic_reports_it():
    _Recorder.log = []
    # Rank 0 of J receives two messages per barrier: rank 1's at 2 ms, rank 2's (which shares node 2
    # with S, so computes at half speed) at 3 ms.
    j = Job(JobSpec("J", 3, 0.0), SyntheticConfig(iterations=1, gcomp=1.0), WaitSpec("spin-block"))
    slow = Job(JobSpec("S", 1, 0.0), SyntheticConfig(iterations=1, gcomp=10.0, barrier=False))
    place = {"J": (0, 1, 2), "S": (2,)}
    simulate([j, slow], _RecSb, {"place": place}, nodes=3, latency_s=1e-3)
    node0 = [(t, e) for n, t, e in _Recorder.log if n == 0 and getattr(e, "proc", None) == Proc("J", 0)]
    kinds = [type(e).__name__ for _, e in node0]
    waits = [t for t, e in node0 if isinstance(e, ReceiverWaiting)]
    consumed = [t for t, e in node0 if isinstance(e, MessageConsumed)]
    # rank 0 waits, spins, blocks, gets one message, waits again for the other
    assert kinds.count("ReceiverWaiting") == 2 and kinds.count("MessageConsumed") == 2
    assert waits == pytest.approx([0.001, 0.002]) and consumed == pytest.approx([0.002, 0.003])
    blocked = [t for t, e in node0 if isinstance(e, ReceiverBlocked)]
    assert [b - w for b, w in zip(blocked, waits, strict=True)] == pytest.approx([300e-6, 300e-6])


# --------------------------------------------------------------------------------------------------------
# Simulator runs: the papers' qualitative claims, where the model can show them


def _job(job_id: str, size: int, t: float, iterations: int, gcomp: float) -> Job:
    return Job(JobSpec(job_id, size, t), SyntheticConfig(iterations=iterations, gcomp=gcomp))


def run_as_the_runner_would(
    name: str, jobs: list[Job], nodes: int, latency_s: float, events: bool = False, **params
) -> Any:
    """Forces the scheduler's wait mode on every job (as the runner will), then simulates; the finish
    time of each job (or, with ``events``, the event log)."""
    cls = registry.get(name)
    forced = []
    for j in jobs:
        mode, spin = job_wait(cls, params, wait_mode=j.wait.mode, spin_time_us=j.wait.spin_us, explicit=False)
        forced.append(replace(j, wait=WaitSpec(mode, spin, cls.send_wait)))
    log = simulate(forced, cls, params, nodes=nodes, latency_s=latency_s)
    done = {e["job"]: e["t"] for e in log if e["kind"] == "job_finished"}
    assert set(done) == {j.job_id for j in jobs}
    return log if events else done


def _comm_heavy() -> list[Job]:
    """Three communication-heavy jobs (3 ms of CPU between barriers, 1 ms message latency, so a barrier
    waits 2 ms) sharing two nodes at MPL 3, started a little apart."""
    return [_job(f"J{i}", 2, 0.0007 * i, 100, 3.0) for i in range(3)]


@pytest.fixture(scope="module")
def comm_heavy() -> dict[str, float]:
    """Mean completion time per scheduler."""
    means = {}
    for name in ("local", *ALL):
        done = run_as_the_runner_would(name, _comm_heavy(), nodes=2, latency_s=1e-3)
        means[name] = sum(done.values()) / len(done)
    return means


def test_spin_only_takes_over_10_percent_longer_than_blocking_schemes(comm_heavy):
    """Spinning receivers hold half a CPU that a co-located job could compute with; SB and HYBRID block
    and free it (paper 003 §6, paper 000 §2.1)."""
    for blocking in ("sb", "hybrid", "cc", "pbsb"):
        assert comm_heavy["spin"] > 1.1 * comm_heavy[blocking], blocking


def test_dcs_and_pb_beat_spin_only(comm_heavy):
    """Boosting the process with work to do gives it the CPU a spinner would take (paper 000 §2.1)."""
    assert comm_heavy["dcs"] < comm_heavy["spin"]
    assert comm_heavy["pb"] < comm_heavy["spin"]
    assert comm_heavy["sy"] < comm_heavy["spin"]  # a yielded spinner takes almost nothing


def test_blocking_schemes_beat_spin_based_ones(comm_heavy):
    """Paper 003's conclusion on Linux: HYBRID, SB and CC complete faster than PB and DCS."""
    assert max(comm_heavy[n] for n in ("hybrid", "sb", "cc")) < min(comm_heavy[n] for n in ("pb", "dcs"))


def test_every_scheme_runs_every_job_to_the_end_with_all_its_work_done():
    """Jobs of different sizes and lengths arriving over time, more than MPL per node at times."""
    jobs = [
        _job("big", 4, 0.0, 20, 5.0),
        _job("small", 2, 0.001, 50, 1.0),
        _job("solo", 1, 0.002, 3, 20.0),
        _job("late", 3, 0.05, 10, 2.0),
        _job("queued", 4, 0.003, 5, 1.0),
    ]
    need = {j.job_id: j.app.iterations * j.app.gcomp * WORK_UNIT_S for j in jobs}
    for name in ALL:
        events = run_as_the_runner_would(name, jobs, nodes=4, latency_s=1e-4, events=True)
        exits = [e for e in events if e["kind"] == "proc_exited"]
        assert len(exits) == sum(j.spec.size for j in jobs), name
        for e in exits:
            assert e["code"] == 0 and e["cpu_s"] >= need[e["job"]] - 1e-9, (name, e)


@pytest.mark.parametrize("name", sorted(ALL))
def test_same_inputs_same_events(name):
    cls = ALL[name]
    jobs = [replace(j, wait=WaitSpec(cls.wait_mode, cls.spin_time_us or 300.0)) for j in _comm_heavy()]
    first = simulate(jobs, cls, {"packing": False}, nodes=3, seed=7, latency_s=5e-4)
    again = simulate(jobs, cls, {"packing": False}, nodes=3, seed=7, latency_s=5e-4)
    assert first == again


def _sender_run(cls: type[Scheduler], send_wait: str, latency_s: float) -> tuple[dict, list]:
    """One 2-rank job, 10 x {1 ms of CPU; barrier}, one rank per node; receives block at once (they use
    no CPU), so CPU beyond the compute is the senders' wait for acknowledgements. Returns the CPU per
    rank and node 0's (event, nice decided) sequence."""
    job = Job(
        JobSpec("J", 2, 0.0), SyntheticConfig(iterations=10, gcomp=1.0), WaitSpec("block", 300.0, send_wait)
    )
    sim = Simulation([job], cls, {}, nodes=2, latency_s=latency_s)
    seen = []
    policy = sim.nodes[0].policy
    original = policy.on_event

    def spy(now, event):
        d = original(now, event)
        seen.append((event, d.nice.get(Proc("J", 0))))
        return d

    policy.on_event = spy
    log = sim.run()
    cpu = {e["rank"]: e["cpu_s"] for e in log if e["kind"] == "proc_exited"}
    assert len(cpu) == 2 and all(e["code"] == 0 for e in log if e["kind"] == "proc_exited")
    return cpu, seen


def test_sim_cc_sender_spins_for_the_nic_ack_then_blocks_other_schemes_do_not_wait():
    # 10 sends per rank (a barrier: rank 1 to 0, then 0 to 1); an ack comes a round trip after its send.
    # 1 ms latency: a 2 ms round trip, so each send spins the whole 300 us, then blocks.
    cpu, seen = _sender_run(Cc, "spin-block", latency_s=1e-3)
    assert cpu == {r: pytest.approx(0.010 + 10 * 300e-6) for r in (0, 1)}
    events = [type(e).__name__ for e, _ in seen]
    assert events.count("SenderBlocked") == events.count("SenderWoken") == 10
    # ... and the NIC's wake-up boosts the sender, as SB's does a receiver
    assert all(nice == BOOST for e, nice in seen if isinstance(e, SenderWoken))
    # 50 us latency: the ack is back after 100 us, within the spin time: it spins that long, never blocks.
    cpu, seen = _sender_run(Cc, "spin-block", latency_s=50e-6)
    assert cpu == {r: pytest.approx(0.010 + 10 * 100e-6) for r in (0, 1)}
    assert not any(isinstance(e, (SenderBlocked, SenderWoken)) for e, _ in seen)
    # A sender that does not wait (every scheme but CC): the compute alone, whatever the latency.
    for cls in (Sb, Cc):
        cpu, seen = _sender_run(cls, "none", latency_s=1e-3)
        assert cpu == {r: pytest.approx(0.010) for r in (0, 1)}, cls
        assert not any(isinstance(e, (SenderBlocked, SenderWoken)) for e, _ in seen)
    # "block": no CPU at all while waiting, but still a round trip per send (the job takes longer).
    cpu, _ = _sender_run(Cc, "block", latency_s=1e-3)
    assert cpu == {r: pytest.approx(0.010) for r in (0, 1)}


def test_the_runner_gives_cc_jobs_the_waiting_sender_and_no_other_scheme():
    from testbed.scenario import load, workload

    def send_waits(name: str) -> set[str]:
        doc = {
            "name": "s",
            "cluster": {"nodes": 2},
            "scheduler": {"name": name},
            "workload": {"jobs": [{"size": 2, "app": {"gcomp": 1, "iterations": 2}}]},
        }
        return {j.wait.send_wait for j in workload.build(load(doc=doc))}

    assert send_waits("cc") == {"spin-block"}
    for name in ("sb", "pbsb", "hybrid", "local", "gang"):
        assert send_waits(name) == {"none"}, name
    with pytest.raises(ValueError, match="send_wait"):
        WaitSpec(send_wait="sometimes")


def test_boosts_reach_the_simulated_processes():
    """Under HYBRID the simulator sees the boost while a process is inside its barrier."""
    jobs = [_job("J", 2, 0.0, 3, 1.0)]
    jobs = [replace(j, wait=WaitSpec("block")) for j in jobs]
    sim = Simulation(jobs, Hybrid, {}, nodes=2, latency_s=1e-3)
    seen = []
    policy = sim.nodes[1].policy
    original = policy.on_event

    def spy(now, event):
        d = original(now, event)
        p = sim.nodes[1].procs.get(Proc("J", 1))
        seen.append((type(event).__name__, dict(d.nice), p.nice if p else None))
        return d

    policy.on_event = spy
    sim.run()
    assert ("CollectiveEnter", {Proc("J", 1): BOOST}, 0) in seen  # nice before the decision applies
    assert ("CollectiveLeave", {Proc("J", 1): NORMAL}, BOOST) in seen
