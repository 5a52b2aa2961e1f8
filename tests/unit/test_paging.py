"""The paging model (testbed/core/paging.py) in the simulator, and CCS's swapping task against it
(schedulers/ccs.py, rules 3-5; issue 22): a node whose running processes declare more memory than it has
computes slower; CCS stops its parallel process instead (STOP, then RESUME once the memory fits)."""

from __future__ import annotations

import pytest
from testbed.apps.localuser import LocalUser, LocalUserConfig
from testbed.apps.synthetic import SyntheticConfig
from testbed.schedulers import registry
from testbed.schedulers.base import JobSpec, NodeInfo

from testbed.core import events as ev
from testbed.core import paging
from testbed.core.jobs import Job
from testbed.results import summary as results
from testbed.sim.engine import Simulation


def test_the_factor_is_one_while_the_memory_fits_and_falls_with_the_share_that_does_not():
    assert paging.factor(100.0, 100.0) == 1.0
    assert paging.factor(500.0, None) == 1.0  # memory unknown: never pages
    c = paging.PAGE_FAULT_COST
    assert paging.factor(110.0, 100.0) == pytest.approx(1 / (1 + c * 10 / 110))
    assert paging.factor(200.0, 100.0) < paging.factor(150.0, 100.0) < 1.0


def _par(mb: float) -> Job:
    app = SyntheticConfig(iterations=10, gcomp=300.0, barrier=False)  # 3 s of CPU a rank
    return Job(JobSpec("par", 2, 0.0, memory_mb=mb), app)


def _user(mb: float, at: float = 0.5) -> Job:
    cfg, _ = LocalUser.bind(LocalUserConfig(profile="xwin", memory_mb=mb, session_s=1.0, node=0), at, 1.0)
    spec = JobSpec("user", 1, at, memory_mb=mb, job_class="xwin-user", owner_node=0)
    return Job(spec, cfg)


def _slowdown(events) -> float:
    from testbed.apps.reports import SESSION_ELAPSED, SESSION_IDEAL

    last = {e["unit"]: e["value"] for e in events if e["kind"] == ev.PROGRESS and e["job"] == "user"}
    return last[SESSION_ELAPSED] / last[SESSION_IDEAL]


def _run(scheduler: str, jobs, params=None, **kw):
    info = [NodeInfo(1.0, 100.0), NodeInfo(1.0, 100.0)]
    events = Simulation(jobs, registry.get(scheduler), params or {}, nodes=2, node_info=info, **kw).run()
    return events, {r["job_id"]: r for r in results.job_rows(events)}


def test_a_node_whose_processes_need_more_than_its_memory_computes_at_the_factor():
    _, alone = _run("local", [_par(60.0)])
    events, rows = _run("local", [_par(60.0), _user(50.0)])
    paged = [e for e in events if e["kind"] == ev.NODE_PAGING]
    f = paging.factor(110.0, 100.0)
    # Node 0 pages while the session (50 MB beside 60) runs, and no longer when it ends.
    assert [(e["node"], e["demand_mb"], e["factor"]) for e in paged] == [(0, 110.0, f), (0, 60.0, 1.0)]
    assert paged[1]["t"] > paged[0]["t"] == pytest.approx(0.5)
    # The job is held back by its paging rank: later than alone by more than the session's CPU share.
    assert rows["par"]["execution_time"] > alone["par"]["execution_time"] + 0.3
    # Without memory figures nothing pages: the same run as before the model.
    events, _ = _run("local", [_par(0.0), _user(0.0)])
    assert not [e for e in events if e["kind"] == ev.NODE_PAGING]


def test_ccs_stops_the_swapping_task_and_resumes_it_with_stop_and_resume_to_its_other_node():
    # M_D = 100 x 0.5 = 50 MB; the parallel process (60) exceeds it while the node swaps (110 > 100).
    events, rows = _run("ccs", [_par(60.0), _user(50.0)], {"share_l": 0.5})
    sent = [(e["node"], e["event"]) for e in events if e["kind"] == ev.COOP_SENT]
    assert sent == [(0, "Local"), (0, "Stop"), (0, "NoLocal"), (0, "Resume")]
    got = [(e["node"], e["event"]) for e in events if e["kind"] == ev.COOP_RECEIVED]
    assert got == [(1, "Local"), (1, "Stop"), (1, "NoLocal"), (1, "Resume")]
    # Stopped, its memory is out: the node never pages, the session runs alone (slowdown 1).
    assert not [e for e in events if e["kind"] == ev.NODE_PAGING and e["factor"] < 1]
    assert _slowdown(events) == pytest.approx(1.0, abs=1e-9)
    assert rows["par"]["final_state"] == rows["user"]["final_state"] == results.FinalState.COMPLETED


def test_pool_oversize_reject_refuses_parallel_jobs_over_m_d_but_never_a_local_session():
    # M_D = 100 x 0.5 = 50 MB. The parallel job at 60 MB is refused; the local user's session at 80 MB is
    # the owner's work, which no global policy admits, so it runs all the same (and the node, with
    # nothing else on it, never pages). A parallel job within M_D runs.
    params = {"share_l": 0.5, "memory_pool": 0.5, "pool_oversize": "reject"}
    small = Job(JobSpec("small", 2, 0.0, memory_mb=50.0), SyntheticConfig(iterations=2, gcomp=100.0))
    events, rows = _run("ccs", [_par(60.0), _user(80.0), small], params)
    assert rows["par"]["final_state"] == results.FinalState.REJECTED
    assert rows["user"]["final_state"] == rows["small"]["final_state"] == results.FinalState.COMPLETED
    (rejected,) = [e for e in events if e["kind"] == ev.JOB_REJECTED]
    assert "more than the parallel memory pool M_D = 50 MB" in rejected["reason"]
    # 'alone' (the default) runs it: alone on its nodes until the session comes, then CCS stops it.
    events, rows = _run("ccs", [_par(60.0), _user(80.0), small], {**params, "pool_oversize": "alone"})
    assert rows["par"]["final_state"] == results.FinalState.COMPLETED
    assert [e["event"] for e in events if e["kind"] == ev.COOP_SENT and e["event"] == "Stop"]


@pytest.mark.parametrize(
    ("cluster", "params", "expect"),
    [
        ({"nodes": 2}, {"memory_pool": 0.5}, "needs every node's memory; give cluster.memory_mb"),
        (
            {"nodes": 2, "memory_mb": 100},
            {"memory_pool": 0.5, "memory_aware": False},
            "acts only with memory_aware true",
        ),
    ],
)
def test_a_memory_pool_that_could_hold_nothing_back_is_refused_in_one_line(cluster, params, expect):
    from testbed.scenario import ScenarioError, load

    doc = {"name": "t", "cluster": cluster, "scheduler": {"name": "ccs", "params": params}}
    doc["workload"] = {"jobs": [{"size": 2}]}
    with pytest.raises(ScenarioError) as exc:
        load(doc=doc)
    assert str(exc.value).count("\n") == 0 and f"scheduler.params.memory_pool: {expect}" in str(exc.value)
    # A sweep variant that sets it is checked as well.
    doc["scheduler"]["params"] = {}
    doc["sweep"] = [{"name": "v", "set": {"scheduler.params": params}}]
    with pytest.raises(ScenarioError, match="memory_pool"):
        load(doc=doc)


def test_the_scenario_s_paging_cost_defaults_to_the_model_s_and_reaches_the_simulation():
    from testbed.emulator.agent import NodeConfig
    from testbed.scenario import load
    from testbed.sim.engine import _options

    doc = {"name": "t", "cluster": {"nodes": 2, "memory_mb": 100}, "workload": {"jobs": [{"size": 2}]}}
    node = NodeConfig("r", 0, "/", 1.0)
    assert load(doc=doc).cluster.paging_cost == paging.PAGE_FAULT_COST == node.paging_cost
    doc["cluster"]["paging_cost"] = 3
    assert _options(load(doc=doc))["paging_cost"] == 3.0


@pytest.mark.parametrize("cost", [0.0, 3.0, 10.0])
def test_the_paging_cost_sets_the_factor_a_node_over_its_memory_computes_at(cost):
    events, rows = _run("local", [_par(60.0), _user(50.0)], paging_cost=cost)
    paged = [(e["demand_mb"], e["factor"]) for e in events if e["kind"] == ev.NODE_PAGING]
    if cost == 0:
        # No slowing, so no factor to log, and the job runs as if nothing declared memory.
        _, plain = _run("local", [_par(0.0), _user(0.0)])
        assert not paged and rows["par"]["execution_time"] == pytest.approx(plain["par"]["execution_time"])
    else:
        assert paged == [(110.0, 1 / (1 + cost * 10 / 110)), (60.0, 1.0)]


@pytest.mark.parametrize("bad", [-1, float("nan")])
def test_a_bad_paging_cost_is_refused_in_one_line_naming_the_field(bad):
    from testbed.scenario import ScenarioError, load

    doc = {"name": "t", "cluster": {"nodes": 2, "paging_cost": bad}, "workload": {"jobs": [{"size": 2}]}}
    with pytest.raises(ScenarioError) as exc:
        load(doc=doc)
    assert str(exc.value).count("\n") == 0 and "cluster.paging_cost: " in str(exc.value)
    with pytest.raises(ValueError, match="paging_cost"):
        Simulation([_par(60.0)], registry.get("local"), {}, nodes=2, paging_cost=bad)
