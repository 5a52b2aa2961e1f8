"""Gang scheduling on an Ousterhout matrix: placement, slot plan, alternate scheduling, local side."""

from __future__ import annotations

import random

import pytest
from testbed.schedulers import registry
from testbed.schedulers.base import (
    Dispatch,
    JobSpec,
    PolicyConfigError,
    Proc,
    ProcAdded,
    ProcExited,
    Reject,
    SlotStart,
    Start,
)
from testbed.schedulers.gang import Gang, GangLocal


def spec(job_id: str, size: int) -> JobSpec:
    return JobSpec(job_id, size, 0.0)


def policy(nodes: int, seed: int = 0, **params):
    # The hand-worked timings below use a 10 ms lead; the default is longer (see Gang.defaults).
    params.setdefault("lead_ms", 10.0)
    return Gang.make_global(nodes, params, seed)


def only_dispatch(actions) -> Dispatch:
    [d] = [a for a in actions if isinstance(a, Dispatch)]
    return d


def rows(d: Dispatch) -> dict[int, set[str]]:
    return {n: set(js) for n, js in d.allowed.items()}


def test_registered_and_defaults():
    assert registry.get("gang") is Gang
    assert Gang.local_policy is GangLocal
    assert Gang.defaults == {
        "memory_aware": True,
        "mpl": 3,
        "quantum_ms": 100.0,
        "alternate": True,
        "packing": True,
        "lead_ms": 25.0,
    }


@pytest.mark.parametrize(
    ("params", "name"),
    [({"quantum_ms": 0}, "quantum_ms"), ({"lead_ms": -1}, "lead_ms"), ({"lead_ms": 100.0}, "lead_ms"),
     ({"mpl": 0}, "mpl"), ({"alternate": 1}, "alternate")],
)  # fmt: skip
def test_bad_params_name_the_parameter(params, name):
    with pytest.raises(PolicyConfigError, match=name):
        policy(4, **params)


def test_idle_cluster_has_no_ticks():
    p = policy(4)
    assert p.next_tick() is None
    assert p.tick(5.0) == []
    assert p.lead == pytest.approx(0.010)


def test_matrix_placement_round_robin_and_early_switch():
    p = policy(4, mpl=2)
    acts = p.submit(0.0, spec("A", 4))
    assert acts[0] == Start("A", (0, 1, 2, 3))
    d0 = only_dispatch(acts)  # the job placed into an idle cluster runs promptly
    assert d0.at == pytest.approx(0.010) and d0.slot == 0
    assert rows(d0) == {n: {"A"} for n in range(4)}
    assert p.next_tick() == pytest.approx(0.100)  # slot 1 at 0.110, planned lead_ms ahead

    assert p.submit(0.02, spec("B", 2)) == [Start("B", (0, 1))]  # row 1
    assert p.submit(0.03, spec("C", 2)) == [Start("C", (2, 3))]  # row 1, columns 2-3
    assert p.submit(0.04, spec("D", 1)) == []  # no room in either row
    assert len(p.queue) == 1

    d1 = only_dispatch(p.tick(0.100))
    assert (d1.slot, d1.at) == (1, pytest.approx(0.110))
    assert rows(d1) == {0: {"B"}, 1: {"B"}, 2: {"C"}, 3: {"C"}}  # alternate adds nothing: A needs all
    d2 = only_dispatch(p.tick(0.200))
    assert (d2.slot, d2.at) == (2, pytest.approx(0.210))
    assert rows(d2) == {n: {"A"} for n in range(4)}

    # A ends mid-slot: D takes row 0 column 0, and row 1 starts early instead of an idle quantum.
    acts = p.finished(0.25, "A")
    assert acts[0] == Start("D", (0,))
    d3 = only_dispatch(acts)
    assert (d3.slot, d3.at) == (3, pytest.approx(0.26))
    assert rows(d3) == {0: {"B"}, 1: {"B"}, 2: {"C"}, 3: {"C"}}  # D's column is busy in row 1
    assert p.next_tick() == pytest.approx(0.35)
    d4 = only_dispatch(p.tick(0.35))
    assert rows(d4) == {0: {"D"}, 1: set(), 2: {"C"}, 3: {"C"}}  # C fills row 0's idle columns

    assert p.finished(0.4, "B") == []  # C still running in the current slot
    p.finished(0.41, "C")
    p.finished(0.42, "D")
    assert p.next_tick() is None


def test_alternate_scheduling_fills_idle_columns_only_when_enabled():
    for alternate, expect in ((True, {"C"}), (False, set())):
        p = policy(4, mpl=2, alternate=alternate)
        p.submit(0, spec("A", 3))  # row 0, columns 0-2
        assert p.submit(0, spec("B", 3)) == [Start("B", (0, 1, 2))]  # row 1
        assert p.submit(0, spec("C", 1)) == [Start("C", (3,))]  # row 0, column 3
        d = only_dispatch(p.tick(p.next_tick()))
        assert rows(d) == {0: {"B"}, 1: {"B"}, 2: {"B"}, 3: expect}
        d = only_dispatch(p.tick(p.next_tick()))
        assert rows(d) == {0: {"A"}, 1: {"A"}, 2: {"A"}, 3: {"C"}}


def test_round_robin_skips_empty_rows_and_dispatch_covers_every_node():
    p = policy(3, mpl=3)
    p.submit(0, spec("A", 2))
    p.submit(0, spec("B", 3))
    p.submit(0, spec("C", 3))
    p.finished(0.05, "B")  # row 1 now empty (A's slot still running, so no early switch)
    seen = []
    slots = []
    for _ in range(4):
        d = only_dispatch(p.tick(p.next_tick()))
        assert set(d.allowed) == {0, 1, 2}
        seen.append(frozenset().union(*d.allowed.values()))
        slots.append(d.slot)
    assert seen == [{"C"}, {"A"}, {"C"}, {"A"}]
    assert slots == [1, 2, 3, 4]


@pytest.mark.parametrize("alternate", [True, False])
def test_a_slot_is_planned_by_job_as_a_scan_of_the_matrix_plans_it(alternate):
    """A Dispatch gives the slot by job (each job it runs and its columns; SlotJobs): its jobs and their
    order are those of a pass over the matrix's cells (each row's jobs by lowest column, then the
    alternates), and each row's free columns those of a pass over its cells, while the matrix changes under
    random arrivals, ends and nodes going down and up; its node view is the matrix's row with the
    alternates in its idle columns."""
    rng = random.Random(5)
    p = policy(12, mpl=3, alternate=alternate, packing=False)
    running: list[str] = []  # the jobs started (by any call) and not ended

    def started(actions) -> None:
        running.extend(a.job_id for a in actions if isinstance(a, Start))

    for i in range(400):
        now, roll = i * 0.01, rng.random()
        if roll < 0.05:
            node = rng.randrange(12)
            started(p.node_down(now, node))  # its jobs then end, as the core ends them
            for j in [j for j in running if node in p.placed[j][1]]:
                running.remove(j)
                started(p.finished(now, j))
        elif roll < 0.15 and p.down:
            started(p.node_up(now, rng.choice(sorted(p.down))))
        elif running and roll < 0.55:
            started(p.finished(now, running.pop(rng.randrange(len(running)))))
        else:
            started(p.submit(now, spec(f"j{i}", rng.randint(1, 7))))
        for r in range(p.mpl):
            scan = [c for c, cell in enumerate(p.matrix[r]) if cell is None and c not in p.down]
            assert p._free_cols(r) == scan
        if not p.placed:
            continue
        d = only_dispatch(p.tick(p.next_tick()))
        row = d.rows[0]
        scan = list(dict.fromkeys(cell for cell in p.matrix[row] if cell is not None))
        busy = {c for j in scan for c in p.placed[j][1]}
        for step in range(1, p.mpl if alternate else 1):
            for j in dict.fromkeys(cell for cell in p.matrix[(row + step) % p.mpl] if cell is not None):
                if busy.isdisjoint(p.placed[j][1]):
                    scan.append(j)
                    busy.update(p.placed[j][1])
        assert list(d.by_job) == scan and all(d.by_job[j] is p.placed[j][1] for j in scan)
        assert rows(d) == {n: {j for j in scan if n in p.placed[j][1]} for n in range(12)}


def test_quantum_timing_is_regular():
    p = policy(2, quantum_ms=50.0, lead_ms=5.0)
    p.submit(1.0, spec("A", 2))
    ats = [only_dispatch(p.tick(p.next_tick())).at for _ in range(3)]
    assert ats == pytest.approx([1.055, 1.105, 1.155])


def test_late_tick_keeps_the_lead():
    p = policy(2)
    p.submit(0, spec("A", 2))
    d = only_dispatch(p.tick(0.5))  # due at 0.1
    assert d.at == pytest.approx(0.51)


def test_placement_prefers_contiguous_then_any_free_cells():
    p = policy(4, mpl=2)
    p.submit(0, spec("A", 1))  # row 0 col 0
    p.submit(0, spec("B", 2))  # row 0 cols 1-2
    p.submit(0, spec("C", 4))  # row 1
    p.finished(0.02, "B")  # row 0 free: 1 2 3
    assert p.submit(0.03, spec("D", 1)) == [Start("D", (1,))]
    # row 0 free: 2 3 -> contiguous
    assert p.submit(0.04, spec("E", 2)) == [Start("E", (2, 3))]
    p.finished(0.05, "D")
    p.finished(0.05, "A")
    p.submit(0.06, spec("F", 1))  # row 0 col 0
    # row 0 free: 1 only; nothing fits contiguously nor otherwise for size 2
    assert p.submit(0.07, spec("G", 2)) == []


def test_non_contiguous_fallback():
    p = policy(4, mpl=1)
    p.submit(0, spec("A", 1))  # 0
    p.submit(0, spec("B", 1))  # 1
    p.submit(0, spec("C", 1))  # 2
    p.finished(0.02, "B")  # free: 1 3
    assert p.submit(0.03, spec("D", 2)) == [Start("D", (1, 3))]


def test_random_placement_is_deterministic_per_seed():
    def placements(seed):
        p = policy(8, seed=seed, packing=False, mpl=2)
        return [a.nodes for i in range(4) for a in p.submit(0, spec(f"j{i}", 3)) if isinstance(a, Start)]

    assert placements(1) == placements(1)
    assert any(placements(s) != placements(1) for s in range(2, 7))


def test_oversize_rejected_with_sizes():
    [r] = policy(4).submit(0, spec("X", 5))
    assert isinstance(r, Reject) and "5" in r.reason and "4" in r.reason


def test_gang_local_runs_only_the_allowed_jobs():
    lp = Gang.make_local(0, {}, 0)
    a, b = Proc("A", 0), Proc("B", 0)
    assert lp.on_event(0, ProcAdded(a)).run == frozenset()  # before any slot nothing runs
    assert lp.on_event(0.01, SlotStart(0, frozenset({"A"}))).run == {a}
    assert lp.on_event(0.02, ProcAdded(b)).run == {a}  # B waits for its slot
    assert lp.on_event(0.11, SlotStart(1, frozenset({"B"}))).run == {b}
    assert lp.on_event(0.12, ProcExited(b)).run == frozenset()
    assert lp.on_event(0.21, SlotStart(2, frozenset())).run == frozenset()
