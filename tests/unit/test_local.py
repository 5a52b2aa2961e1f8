"""Native local scheduling (NLS): placement under the MPL limit, FCFS queueing."""

from __future__ import annotations

import pytest
from testbed.schedulers import registry
from testbed.schedulers.base import (
    JobSpec,
    PolicyConfigError,
    Proc,
    ProcAdded,
    ProcExited,
    Reject,
    RunAll,
    Start,
)
from testbed.schedulers.local import Local
from testbed.schedulers.placement import least_loaded


def spec(job_id: str, size: int) -> JobSpec:
    return JobSpec(job_id, size, 0.0)


def policy(nodes: int, seed: int = 0, **params):
    return Local.make_global(nodes, params, seed)


def test_registered():
    assert registry.get("local") is Local
    assert Local.local_policy is RunAll
    assert Local.defaults == {
        "memory_aware": True,
        "memory_pool": None,
        "mpl": 3,
        "packing": True,
        "pool_oversize": "alone",
    }


@pytest.mark.parametrize("mpl", [0, -1, 1.5, "3", True])
def test_bad_mpl_names_the_parameter(mpl):
    with pytest.raises(PolicyConfigError, match="mpl"):
        policy(4, mpl=mpl)


def test_mpl_limits_processes_per_node_and_head_blocks():
    p = policy(2, mpl=2)
    assert p.submit(0, spec("A", 2)) == [Start("A", (0, 1))]
    assert p.submit(0, spec("B", 2)) == [Start("B", (0, 1))]
    assert p.submit(0, spec("C", 2)) == []
    assert p.submit(0, spec("D", 1)) == []  # would fit nowhere anyway; queued behind C
    assert len(p.queue) == 2
    assert p.finished(1, "A") == [Start("C", (0, 1))]
    assert p.finished(2, "B") == [Start("D", (0,))]


def test_head_blocks_even_when_a_later_job_fits():
    p = policy(2, mpl=1)
    p.submit(0, spec("A", 1))  # node 0
    assert p.submit(0, spec("B", 2)) == []
    assert p.submit(0, spec("C", 1)) == []  # node 1 is free but B is first
    assert p.finished(1, "A") == [Start("B", (0, 1))]


def test_least_loaded_nodes_ties_by_lowest_index():
    p = policy(4)
    assert p.submit(0, spec("A", 2)) == [Start("A", (0, 1))]
    assert p.submit(0, spec("B", 2)) == [Start("B", (2, 3))]
    assert p.submit(0, spec("C", 1)) == [Start("C", (0,))]
    # loads 2 1 1 1: the three least loaded are 1 2 3 (contiguous as it happens)
    assert p.submit(0, spec("D", 3)) == [Start("D", (1, 2, 3))]


def test_least_loaded_prefers_an_equally_loaded_contiguous_block():
    p = policy(4)
    p.submit(0, spec("A", 1))  # node 0
    p.submit(0, spec("B", 1))  # node 1
    p.finished(1, "A")  # loads 0 1 0 0
    assert p.submit(2, spec("C", 2)) == [Start("C", (2, 3))]  # not (0, 2)
    assert least_loaded([0, 1, 1, 0], [0, 1, 2, 3], 2) == (0, 3)  # no idle block: least load wins
    assert least_loaded([2, 0, 0, 1], [1, 2, 3], 2) == (1, 2)


def test_oversize_rejected_with_sizes():
    [r] = policy(4).submit(0, spec("X", 9))
    assert isinstance(r, Reject) and "9" in r.reason and "4" in r.reason


def test_random_placement_is_deterministic_per_seed():
    def placements(seed):
        p = policy(8, seed=seed, packing=False, mpl=1)
        return [a.nodes for i in range(4) for a in p.submit(0, spec(f"j{i}", 2))]

    assert placements(3) == placements(3)
    assert any(placements(s) != placements(3) for s in range(4, 8))


def test_run_all_local_policy_runs_every_process():
    lp = Local.make_local(0, {}, 0)
    a, b = Proc("A", 0), Proc("B", 0)
    assert lp.on_event(0, ProcAdded(a)).run == {a}
    assert lp.on_event(0, ProcAdded(b)).run == {a, b}
    assert lp.on_event(1, ProcExited(a)).run == {b}
