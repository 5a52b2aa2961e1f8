"""NAS-like profiles (apps/profiles.py), the communication-pattern fields of the synthetic app, and
how the simulator models the patterns."""

from __future__ import annotations

import pytest
from testbed.apps import profiles
from testbed.apps.synthetic import Synthetic, SyntheticConfig, messages_per_compute_s, pattern_plan
from testbed.schedulers.base import (
    CollectiveEnter,
    JobSpec,
    LocalDecision,
    LocalEvent,
    MessageArrived,
    MessageConsumed,
    RunAll,
    Scheduler,
)
from testbed.schedulers.batch import Batch
from testbed.schedulers.local import Local, LocalGlobal

from testbed.core.jobs import Job, WaitSpec
from testbed.scenario import ScenarioError, load
from testbed.scenario.workload import build
from testbed.sim import simulate

LAT = 50e-6


def _scn(jobs=None, generator=None, nodes=16, scheduler="batch") -> dict:
    wl: dict = {"jobs": jobs or []}
    if generator:
        wl["generator"] = generator
    return {"cluster": {"nodes": nodes}, "scheduler": {"name": scheduler}, "workload": wl}


# --------------------------------------------------------------------------------------------------------
# Profiles


def test_every_profile_resolves_to_a_valid_app() -> None:
    assert list(profiles.PROFILES) == ["EP", "BT", "LU", "MG", "SP", "CG", "IS"]
    jobs = [{"id": n, "size": p.sizes[0], "app": {"profile": n}} for n, p in profiles.PROFILES.items()]
    built = {j.job_id: j for j in build(load(doc=_scn(jobs)))}
    for name, p in profiles.PROFILES.items():
        j = built[name]
        assert j.app.gcomp == p.gcomp and j.app.pattern == p.pattern
        assert j.app.msg_bytes == p.msg_bytes and j.app.msgs == p.msgs and j.app.gio == 0
        assert j.app.iterations == p.iterations() >= 1
        # One source of truth for memory: the profile's for this size, in the job's spec.
        assert j.spec.memory_mb == p.memory_mb(p.sizes[0]) > 0
        assert j.spec.job_class == name
        # The scale-down of time: compute-only run time is TIME_SCALE x table 2's class A time.
        assert Synthetic.ideal_runtime(j.app) == pytest.approx(
            p.class_a_s * profiles.TIME_SCALE, rel=0.35, abs=0.1
        )
    assert set(profiles.PROFILES["BT"].sizes) == {4, 9, 16}
    # Table 3 (class C) scaled: SP on 4 processes needs 354 MB each in the paper.
    assert profiles.get("sp").memory_mb(4) == pytest.approx(354 * profiles.MEMORY_SCALE, abs=1e-3)


def test_explicit_fields_override_the_profile() -> None:
    jobs = [
        {"id": "a", "size": 8, "app": {"profile": "cg", "msgs": 1, "iterations": 3, "wait_mode": "spin"}},
        {"id": "b", "size": 8, "memory_mb": 2.5, "app": {"profile": "CG", "pattern": "ring"}},
        {"id": "c", "size": 4, "job_class": "mine", "app": {"profile": "IS", "gcomp": 50}},
    ]
    built = {j.job_id: j for j in build(load(doc=_scn(jobs, scheduler="local")))}
    cg = profiles.get("CG")
    a, b, c = built["a"].app, built["b"].app, built["c"].app
    assert (a.msgs, a.iterations, a.wait_mode, a.pattern, a.gcomp) == (1, 3, "spin", "neighbour", cg.gcomp)
    assert (b.pattern, b.msgs, built["b"].spec.memory_mb) == ("ring", cg.msgs, 2.5)
    assert (c.gcomp, c.pattern, built["c"].spec.job_class) == (50.0, "alltoall", "mine")


def test_bad_profile_and_bad_pattern_fields_are_named() -> None:
    with pytest.raises(ScenarioError, match=r"app.profile: unknown profile 'XX'; known profiles: EP, BT"):
        load(doc=_scn([{"size": 4, "app": {"profile": "XX"}}]))
    with pytest.raises(ScenarioError, match="use pattern rank0"):
        load(doc=_scn([{"size": 4, "app": {"msg_bytes": 10}}]))
    with pytest.raises(ScenarioError, match="barrier false means no communication"):
        load(doc=_scn([{"size": 4, "app": {"profile": "CG", "barrier": False}}]))
    with pytest.raises(ValueError, match="pattern"):
        SyntheticConfig(iterations=1, pattern="star")


def test_generator_class_with_profile_draws_the_profiles_sizes_and_memory() -> None:
    gen = {
        "count": 40,
        "mean_interarrival_s": 1.0,
        "size": {"min": 2, "max": 16},
        "classes": [{"name": "bt", "app": {"profile": "BT"}}, {"name": "mg", "app": {"profile": "MG"}}],
    }
    jobs = build(load(doc=_scn(generator=gen)))
    by_class = {c: [j for j in jobs if j.spec.job_class == c] for c in ("bt", "mg")}
    assert by_class["bt"] and by_class["mg"]
    for name, js in by_class.items():
        p = profiles.get(name)
        for j in js:
            assert j.spec.size in p.sizes
            assert j.spec.memory_mb == p.memory_mb(j.spec.size)
            assert j.app.pattern == p.pattern
    # Explicit class memory wins; a class without a profile keeps the uniform size draw and no memory.
    gen["classes"] = [{"name": "x", "memory_mb": 7, "app": {"profile": "IS"}}, {"name": "plain"}]
    jobs = build(load(doc=_scn(generator=gen)))
    assert {j.spec.memory_mb for j in jobs if j.spec.job_class == "x"} == {7.0}
    assert {j.spec.memory_mb for j in jobs if j.spec.job_class == "plain"} == {0.0}


@pytest.mark.parametrize("size", [4, 8, 9, 16])
def test_intensity_ordering_follows_paper_003_table_2(size: int) -> None:
    def intensity(name: str) -> float:
        app = SyntheticConfig(**profiles.get(name).app_fields())
        return messages_per_compute_s(app, size)

    ep = intensity("EP")
    low = [intensity(n) for n in ("BT", "LU")]
    medium = [intensity(n) for n in ("MG", "SP")]
    high = [intensity(n) for n in ("CG", "IS")]
    assert ep < min(low)
    assert max(low) < min(medium)
    assert max(medium) < min(high)


def test_pattern_plans_pair_up() -> None:
    for pattern in ("ring", "neighbour", "alltoall", "rank0"):
        for size in (1, 2, 3, 4, 5):
            plans = [pattern_plan(pattern, r, size) for r in range(size)]
            sent = sorted((r, d) for r, (_, dests, _) in enumerate(plans) for d in dests)
            received = sorted((s, r) for r, (_, _, srcs) in enumerate(plans) for s in srcs)
            assert sent == received, (pattern, size)
            assert all(r not in p[1] for r, p in enumerate(plans))
    assert pattern_plan("neighbour", 0, 4)[1] == (1, 3)
    assert pattern_plan("ring", 0, 4)[1:] == ((1,), (3,))
    assert pattern_plan("rank0", 0, 4)[0] is False  # rank 0 hears from all first, then replies


# --------------------------------------------------------------------------------------------------------
# Simulator


def _job(job_id: str, size: int, wait_mode: str = "block", **app) -> Job:
    app.setdefault("iterations", 10)
    app.setdefault("gcomp", 100.0)
    return Job(JobSpec(job_id, size, 0.0), SyntheticConfig(**app), WaitSpec(wait_mode))


def _finish(events) -> dict[str, float]:
    return {e["job"]: e["t"] for e in events if e["kind"] == "job_finished"}


@pytest.mark.parametrize(
    "app, hops",
    [
        ({"pattern": "ring", "msgs": 2}, 2),  # each round: one message latency
        ({"pattern": "neighbour", "msgs": 3}, 3),
        ({"pattern": "alltoall"}, 1),
        ({"pattern": "rank0", "msgs": 2}, 4),  # to rank 0, then its reply: two latencies per round
    ],
)
@pytest.mark.parametrize("size", [2, 3, 4, 5])
def test_patterns_take_their_message_latencies(app, hops, size) -> None:
    events = simulate([_job("A", size, **app)], Batch, {}, nodes=size)
    assert _finish(events) == {"A": pytest.approx(1.0 + 10 * hops * LAT)}
    progress = [e for e in events if e["kind"] == "progress"]
    assert {(e["unit"], e["value"]) for e in progress} == {("iterations", 10)}


def test_bandwidth_adds_bytes_over_bandwidth_per_message() -> None:
    app = {"pattern": "rank0", "msgs": 2, "msg_bytes": 1000}
    events = simulate([_job("A", 4, **app)], Batch, {}, nodes=4, bandwidth_Bps=1e6)
    assert _finish(events) == {"A": pytest.approx(1.0 + 10 * 4 * (LAT + 1e-3))}
    # The barrier's messages are empty: bandwidth leaves it alone.
    events = simulate([_job("B", 4)], Batch, {}, nodes=4, bandwidth_Bps=1e3)
    assert _finish(events) == {"B": pytest.approx(1.0 + 10 * 2 * LAT)}


class _Listening(RunAll):
    wants_message_events = True
    log: list[tuple[int, LocalEvent]] = []

    def on_event(self, now: float, event: LocalEvent) -> LocalDecision:
        type(self).log.append((self.node, event))
        return super().on_event(now, event)


class _Rec(Scheduler):
    name = "rec-patterns"
    summary = "test: records local events"
    global_policy = LocalGlobal
    local_policy = _Listening
    defaults = Local.defaults


@pytest.mark.parametrize("pattern, per_rank_round", [("ring", 1), ("neighbour", 2), ("alltoall", 3)])
def test_every_message_arrives_and_is_consumed_and_no_collective_notices(pattern, per_rank_round) -> None:
    _Listening.log = []
    simulate([_job("A", 4, pattern=pattern, msgs=2, iterations=3)], _Rec, {}, nodes=4)
    kinds = [type(e) for _, e in _Listening.log]
    assert kinds.count(MessageArrived) == kinds.count(MessageConsumed) == 4 * per_rank_round * 2 * 3
    assert CollectiveEnter not in kinds


def _spin_penalty(app: dict) -> tuple[float, float]:
    """A 4-rank communicating job shares each node with a compute-only job (native local scheduling);
    returns how much later, under spin than under block, the compute jobs and the job itself end."""
    out = []
    for mode in ("block", "spin"):
        jobs = [_job("A", 4, iterations=100, gcomp=5.0, wait_mode=mode, **app)]
        jobs += [_job(f"C{i}", 1, iterations=1, gcomp=1000.0, barrier=False) for i in range(4)]
        done = _finish(simulate(jobs, Local, {}, nodes=4, latency_s=1e-3, bandwidth_Bps=1e7))
        out.append((max(done[f"C{i}"] for i in range(4)), done["A"]))
    (c_block, a_block), (c_spin, a_spin) = out
    assert c_block == pytest.approx(1.0 + 100 * 5e-3, rel=0.25)
    return c_spin - c_block, a_spin - a_block


def test_more_communication_costs_more_under_spin_than_under_block() -> None:
    barrier_c, barrier_a = _spin_penalty({"pattern": "barrier"})
    alltoall_c, alltoall_a = _spin_penalty({"pattern": "alltoall", "msgs": 4, "msg_bytes": 10000})
    assert barrier_c > 0  # spinning takes CPU from the compute jobs
    assert alltoall_c > 2 * barrier_c  # 4 rounds of 2 ms waits per iteration against one 2 ms barrier
    assert alltoall_a > 0 and alltoall_a >= barrier_a  # and the spinning job itself gets slower too


def test_generator_profile_lengths_follow_each_profile_times_scale() -> None:
    gen = {
        "count": 30,
        "mean_interarrival_s": 1.0,
        "duration": {"dist": "profile", "scale": 0.5},
        "size": {"min": 4, "max": 8},
        "classes": [{"name": "BT", "app": {"profile": "BT"}}, {"name": "IS", "app": {"profile": "IS"}}],
    }
    jobs = build(load(doc=_scn(generator=gen)))
    assert {j.spec.job_class for j in jobs} == {"BT", "IS"}
    for j in jobs:
        assert j.app.iterations == round(profiles.get(j.spec.job_class).iterations() * 0.5)
    # BT (53.1 s in table 2) runs far longer than IS (1.0 s): the spread paper 003's workload has.
    bt = next(j for j in jobs if j.spec.job_class == "BT").spec.estimate
    is_ = next(j for j in jobs if j.spec.job_class == "IS").spec.estimate
    assert bt > 20 * is_


def test_generator_profile_lengths_need_a_profile_in_every_class() -> None:
    gen = {
        "count": 2,
        "mean_interarrival_s": 1.0,
        "duration": {"dist": "profile"},
        "classes": [{"name": "BT", "app": {"profile": "BT"}}, {"name": "plain", "app": {"gcomp": 10}}],
    }
    with pytest.raises(ScenarioError, match=r"(?s)duration.dist profile.*plain.*profile"):
        load(doc=_scn(generator=gen))
