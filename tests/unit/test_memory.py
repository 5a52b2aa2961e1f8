"""Memory-aware allocation (paper 003 §5.3; docs/policies.md, "Batch, allocation and energy"): a job whose
processes do not fit in the free memory of the nodes waits until memory frees; one bigger than a whole node is
rejected; every placing scheduler (batch, local, gang, paired, the coscheduling family) honours it, in the
policy and the sim."""

from __future__ import annotations

import pytest
from testbed.apps.synthetic import SyntheticConfig
from testbed.schedulers import registry
from testbed.schedulers.base import Dispatch, GlobalPolicy, JobSpec, PolicyConfigError, Reject, Start
from testbed.schedulers.placement import MemoryAwareParams, NodeMemory

from testbed.core.jobs import Job
from testbed.sim import simulate

#: Every scheduler that places jobs on nodes; all accept memory_aware.
PLACING = ["batch", "local", "gang", "paired", "spin", "dcs", "sb", "sy", "pb", "pbsb", "cc", "hybrid"]
#: Those that put several processes on a node (batch never does: MPL 1).
SHARING = [n for n in PLACING if n != "batch"]


def make(name: str, nodes: int, memory: float | None, **params) -> GlobalPolicy:
    p = registry.get(name).make_global(nodes, params, 0)
    p.set_node_memory(memory)
    return p


def spec(job_id: str, size: int, mb: float) -> JobSpec:
    return JobSpec(job_id, size, 0.0, memory_mb=mb)


def starts(actions) -> list[Start]:
    return [a for a in actions if isinstance(a, Start)]


def test_base_hook_defaults_and_validation():
    p = make("local", 2, None)
    assert p.node_memory_mb is None
    p.set_node_memory(512)
    assert p.node_memory_mb == 512.0
    for bad in (0, -1, True, "512"):
        with pytest.raises(ValueError, match="node memory"):
            p.set_node_memory(bad)
    p.set_node_memory(None)
    assert p.node_memory_mb is None


@pytest.mark.parametrize("name", PLACING)
def test_every_placing_scheduler_accepts_memory_aware(name):
    cls = registry.get(name)
    assert cls.all_defaults()["memory_aware"] is True
    assert issubclass(cls.Params, MemoryAwareParams)  # the one definition, composed into each model
    with pytest.raises(PolicyConfigError, match="memory_aware"):
        cls.make_global(2, {"memory_aware": 1}, 0)


@pytest.mark.parametrize("name", PLACING)
def test_a_job_bigger_than_a_node_is_rejected_naming_both_figures(name):
    p = make(name, 4, 1024)
    [r] = p.submit(0.0, spec("big", 2, 1500))
    assert isinstance(r, Reject) and r.job_id == "big"
    assert "1500 MB" in r.reason and "1024 MB" in r.reason
    assert len(p.queue) == 0
    # Exactly a node's memory fits.
    assert starts(p.submit(0.0, spec("whole", 2, 1024)))


@pytest.mark.parametrize("name", SHARING)
def test_a_job_that_does_not_fit_waits_until_memory_frees(name):
    p = make(name, 2, 1000, mpl=3)
    assert [s.job_id for s in starts(p.submit(0.0, spec("A", 2, 600)))] == ["A"]
    assert starts(p.submit(0.0, spec("B", 2, 600))) == []  # 600 + 600 > 1000 on both nodes
    assert len(p.queue) == 1
    assert starts(p.submit(0.0, spec("C", 1, 100))) == []  # FCFS: queued behind B
    acts = p.finished(1.0, "A")
    assert [s.job_id for s in starts(acts)] == ["B", "C"]


@pytest.mark.parametrize("name", SHARING)
def test_memory_check_off_without_node_memory_or_when_disabled(name):
    for memory, params in ((None, {}), (1000, {"memory_aware": False})):
        p = make(name, 2, memory, mpl=3, **params)
        p.submit(0.0, spec("A", 2, 600))
        assert [s.job_id for s in starts(p.submit(0.0, spec("B", 2, 600)))] == ["B"]  # would swap
        assert not any(isinstance(a, Reject) for a in p.submit(0.0, spec("C", 1, 5000)))


@pytest.mark.parametrize("name", SHARING)
def test_a_job_goes_to_the_nodes_where_it_fits(name):
    p = make(name, 3, 1000, mpl=3)
    assert starts(p.submit(0.0, spec("A", 1, 800)))[0].nodes == (0,)
    assert starts(p.submit(0.0, spec("X", 2, 100)))[0].nodes == (1, 2)  # (gang: fills row 0)
    [s] = starts(p.submit(0.0, spec("B", 2, 300)))
    assert s.nodes == (1, 2)  # node 0 has only 200 MB left


def test_batch_a_free_node_always_has_room():
    p = make("batch", 2, 1000)
    assert starts(p.submit(0.0, spec("A", 2, 900)))
    assert starts(p.submit(0.0, spec("B", 2, 900))) == []  # MPL 1: waits for nodes, not for memory
    assert [s.job_id for s in starts(p.finished(1.0, "A"))] == ["B"]


def test_gang_memory_blocks_a_free_matrix_row_and_frees_on_finish():
    p = make("gang", 2, 1000, mpl=3)
    acts = p.submit(0.0, spec("A", 2, 600))
    assert starts(acts) and any(isinstance(a, Dispatch) for a in acts)
    assert starts(p.submit(0.0, spec("B", 2, 600))) == []  # rows 1-2 are free, memory is not
    assert p.mem.used == [600.0, 600.0]
    acts = p.finished(0.5, "A")
    assert [s.job_id for s in starts(acts)] == ["B"]
    assert p.mem.used == [600.0, 600.0]


def test_node_memory_helper_accounts_per_job():
    p = make("local", 3, 1000)
    mem = NodeMemory(p)
    a = spec("A", 2, 400)
    assert mem.fitting([2, 0, 1], a) == [2, 0, 1]
    mem.take(a, (0, 1))
    mem.take(spec("B", 1, 700), (1,))
    assert mem.used == [400.0, 1100.0, 0.0]
    assert mem.fitting(range(3), spec("C", 1, 600)) == [0, 2]
    mem.release("A")
    mem.release("unknown")
    assert mem.used == [0.0, 700.0, 0.0]


# --------------------------------------------------------------------------------------------------------
# Simulator


def _job(job_id: str, size: int, mb: float, t: float = 0.0) -> Job:
    return Job(JobSpec(job_id, size, t, memory_mb=mb), SyntheticConfig(iterations=5, gcomp=100.0))


def _times(events, kind: str) -> dict[str, float]:
    return {e["job"]: e["t"] for e in events if e["kind"] == kind}


@pytest.mark.parametrize("name", ["local", "gang", "paired", "hybrid"])
def test_sim_delays_a_job_until_memory_frees_and_rejects_one_that_never_fits(name):
    jobs = [_job("A", 2, 600), _job("B", 2, 600, t=0.1), _job("huge", 1, 2048, t=0.2)]
    events = simulate(jobs, registry.get(name), {"mpl": 2}, nodes=2, node_memory_mb=1000)
    started, finished = _times(events, "job_started"), _times(events, "job_finished")
    assert started["B"] == pytest.approx(finished["A"])  # waited for A's memory
    [rej] = [e for e in events if e["kind"] == "job_rejected"]
    assert rej["job"] == "huge" and "2048 MB" in rej["reason"] and "1000 MB" in rej["reason"]
    # Without node memory the two share the nodes from the start.
    events = simulate(jobs[:2], registry.get(name), {"mpl": 2}, nodes=2)
    assert _times(events, "job_started")["B"] == pytest.approx(0.1)


def test_sim_batch_rejects_what_never_fits():
    events = simulate([_job("A", 1, 100), _job("huge", 1, 4096)], registry.get("batch"), {}, nodes=1,
                      node_memory_mb=1024)  # fmt: skip
    assert _times(events, "job_rejected").keys() == {"huge"}
    assert _times(events, "job_finished").keys() == {"A"}
