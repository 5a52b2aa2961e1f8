"""Batch (FCFS, MPL 1, EASY backfilling): hand-worked allocation and queueing examples."""

from __future__ import annotations

import random

import pytest
from testbed.schedulers import registry
from testbed.schedulers.base import JobSpec, PolicyConfigError, Reject, RunAll, Start
from testbed.schedulers.batch import Batch
from testbed.schedulers.placement import contiguous_block, pack


def spec(job_id: str, size: int, estimate: float | None = None, t: float = 0.0) -> JobSpec:
    return JobSpec(job_id, size, t, estimate=estimate)


def policy(nodes: int, seed: int = 0, **params):
    return Batch.make_global(nodes, params, seed)


def test_registered():
    assert registry.get("batch") is Batch
    assert Batch.local_policy is RunAll
    assert Batch.defaults == {"memory_aware": True, "backfill": False, "packing": True}


def test_unknown_and_bad_params_name_the_parameter():
    with pytest.raises(PolicyConfigError, match="mpl"):
        policy(4, mpl=2)
    with pytest.raises(PolicyConfigError, match="backfill"):
        policy(4, backfill="yes")


def test_fcfs_order_and_head_blocking():
    p = policy(4)
    assert p.submit(0.0, spec("A", 3)) == [Start("A", (0, 1, 2))]
    assert p.submit(1.0, spec("B", 2)) == []  # one node free
    assert p.submit(2.0, spec("C", 1)) == []  # fits, but B is ahead of it
    assert len(p.queue) == 2
    assert p.finished(5.0, "A") == [Start("B", (0, 1)), Start("C", (2,))]
    assert len(p.queue) == 0


def test_oversize_and_empty_jobs_are_rejected_with_sizes_in_the_reason():
    p = policy(4)
    [r] = p.submit(0.0, spec("big", 5))
    assert isinstance(r, Reject) and r.job_id == "big"
    assert "5" in r.reason and "4" in r.reason
    [r0] = p.submit(0.0, spec("none", 0))
    assert isinstance(r0, Reject) and "0" in r0.reason
    assert len(p.queue) == 0


def test_contiguous_block_helper():
    assert contiguous_block([0, 1, 3, 4, 5, 7], 3) == (3, 4, 5)
    assert contiguous_block([0, 2, 4], 2) is None
    assert pack({7, 0, 1, 5, 6}, 3) == (5, 6, 7)
    assert pack({0, 1, 5, 6, 7}, 4) == (0, 1, 5, 6)  # no block of 4: lowest free nodes


def test_packing_takes_first_contiguous_block_else_lowest_nodes():
    p = policy(8)
    assert p.submit(0, spec("A", 2)) == [Start("A", (0, 1))]
    assert p.submit(0, spec("B", 3)) == [Start("B", (2, 3, 4))]
    assert p.finished(1, "A") == []
    assert p.submit(2, spec("C", 3)) == [Start("C", (5, 6, 7))]  # first block that fits
    assert p.finished(3, "B") == []
    assert p.submit(4, spec("D", 4)) == [Start("D", (0, 1, 2, 3))]
    q = policy(8)
    q.submit(0, spec("A", 2))
    q.submit(0, spec("B", 3))
    q.finished(1, "A")  # free: 0 1 5 6 7
    assert q.submit(2, spec("C", 4)) == [Start("C", (0, 1, 5, 6))]


def test_packing_on_the_free_map_chooses_what_pack_chooses_on_the_free_set():
    # The policy finds a job's block in a byte map of its free nodes: each start must be pack()'s choice
    # on the free set as it was (FCFS: every start is the head's), a node down and up again included.
    rng = random.Random(3)
    p = policy(64)
    p.node_down(0, 9)
    sizes: dict[str, int] = {}
    for k in range(400):
        if k == 200:
            p.node_up(k, 9)
        if p.running and rng.random() < 0.5:
            job = rng.choice(sorted(p.running))
            free = p.free | {n for n in p.running[job][0] if n not in p.down}
            actions = p.finished(k, job)
        else:
            sizes[f"j{k}"] = rng.choice([1, 2, 3, 5, 8, 13])
            free = set(p.free)
            actions = p.submit(k, spec(f"j{k}", sizes[f"j{k}"]))
        for a in actions:
            assert a.nodes == pack(free, sizes[a.job_id])
            free -= set(a.nodes)
        assert bytes(p.free_map) == bytes(int(n in p.free) for n in range(64))


def test_random_allocation_is_deterministic_per_seed():
    def nodes_for(seed: int) -> list[tuple[int, ...]]:
        p = policy(16, seed=seed, packing=False)
        return [a.nodes for i in range(4) for a in p.submit(0, spec(f"j{i}", 4))]

    first = nodes_for(7)
    assert first == nodes_for(7)
    assert sorted(n for ns in first for n in ns) == list(range(16))
    assert any(nodes_for(s) != first for s in range(8, 12))
    assert any(ns != tuple(range(ns[0], ns[0] + 4)) for ns in first)  # not simply packed


def test_easy_backfill_lets_a_short_job_pass_and_refuses_one_that_would_delay_the_head():
    p = policy(4, backfill=True)
    assert p.submit(0, spec("A", 3, estimate=10)) == [Start("A", (0, 1, 2))]
    # B needs the whole cluster: reserved for t=10, when A should end.
    assert p.submit(1, spec("B", 4, estimate=5)) == []
    # C ends (by its estimate) at 6 <= 10: it may use node 3.
    assert p.submit(1, spec("C", 1, estimate=5)) == [Start("C", (3,))]
    assert p.finished(6, "C") == []
    # D would end at 6 + 20 > 10 on a node B needs: refused.
    assert p.submit(6, spec("D", 1, estimate=20)) == []
    # E has no estimate: treated as never ending, so refused too.
    assert p.submit(6, spec("E", 1)) == []
    assert p.finished(10, "A") == [Start("B", (0, 1, 2, 3))]  # B not delayed
    assert len(p.queue) == 2


def test_easy_backfill_long_job_on_nodes_the_reservation_does_not_need():
    p = policy(6, backfill=True)
    assert p.submit(0, spec("A", 4, estimate=10)) == [Start("A", (0, 1, 2, 3))]
    assert p.submit(0, spec("B", 4, estimate=10)) == []  # reserved at t=10 on nodes 0-3
    assert p.submit(0, spec("L", 2, estimate=100)) == [Start("L", (4, 5))]
    assert p.finished(10, "A") == [Start("B", (0, 1, 2, 3))]


def test_easy_backfill_only_short_jobs_when_the_spare_nodes_are_needed():
    p = policy(6, backfill=True)
    p.submit(0, spec("A", 4, estimate=10))  # 0-3
    assert p.submit(0, spec("B", 5, estimate=10)) == []  # needs 5 of 6 at t=10: one spare node
    assert p.submit(0, spec("L", 2, estimate=100)) == []  # two long nodes would delay B
    assert p.submit(0, spec("M", 1, estimate=100)) == [Start("M", (5,))]  # the spare one
    assert p.submit(0, spec("S", 1, estimate=3)) == [Start("S", (4,))]  # short: anywhere free
    assert p.finished(3, "S") == []
    assert p.finished(10, "A") == [Start("B", (0, 1, 2, 3, 4))]


def test_easy_backfill_holds_the_nodes_freed_by_the_shadow_time_first():
    """EASY's extra nodes (free at the shadow time beyond the head's size) may go to a long job: the head
    holds the nodes freed by then first, not its packed block, which held a free node here (2, 3, 4)."""
    p = policy(6, backfill=True)
    assert p.submit(0, spec("A", 2, estimate=100)) == [Start("A", (0, 1))]
    assert p.submit(0, spec("X", 2, estimate=1)) == [Start("X", (2, 3))]
    assert p.submit(0, spec("B", 2, estimate=10)) == [Start("B", (4, 5))]
    assert p.finished(1, "X") == []
    assert p.submit(1, spec("H", 3, estimate=10)) == []  # at t=10: nodes 2, 3 and B's 4, 5; one extra
    assert p.submit(1, spec("L", 1, estimate=100)) == [Start("L", (3,))]  # holds no node H needs
    assert p.submit(1, spec("M", 1, estimate=100)) == []  # a second one would delay H
    assert p.finished(10, "B") == [Start("H", (2, 4, 5))]  # H not delayed


def test_no_backfill_past_a_running_job_without_estimate():
    p = policy(4, backfill=True)
    p.submit(0, spec("A", 3))  # no estimate: may never end
    assert p.submit(0, spec("B", 4, estimate=1)) == []
    assert p.submit(0, spec("C", 1, estimate=0.1)) == []
    assert p.finished(50, "A") == [Start("B", (0, 1, 2, 3))]


def test_without_backfill_short_jobs_wait():
    p = policy(4, backfill=False)
    p.submit(0, spec("A", 3, estimate=10))
    p.submit(0, spec("B", 4, estimate=5))
    assert p.submit(0, spec("C", 1, estimate=1)) == []


def test_job_finished_while_queued_leaves_the_queue():
    p = policy(2)
    p.submit(0, spec("A", 2))
    p.submit(0, spec("B", 2))
    p.submit(0, spec("C", 1))
    assert p.finished(1, "B") == []  # killed while queued
    assert p.finished(2, "A") == [Start("C", (0,))]
