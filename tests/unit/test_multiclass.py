"""Paper 000's schemes worked by hand (docs/policies.md, "Real-time and best-effort classes"): the 2DCS-PS
virtual-time example, laxity allocation, both admission formulas, 1GS replication and eviction after w, and
the node level's class favour. Every expected figure below is computed in the comments, not by the code."""

from __future__ import annotations

import pytest
from testbed.schedulers import registry
from testbed.schedulers.base import (
    Dispatch,
    JobSpec,
    Proc,
    ProcAdded,
    RealTime,
    ReceiverBlocked,
    ReceiverWaiting,
    Reject,
    Start,
    Timer,
)
from testbed.schedulers.multiclass import (
    BE,
    RT,
    OneGsGlobal,
    TwoDcsGlobal,
    VirtualTimes,
    dcs_fits,
    gs_rows_needed,
    rt_rows,
)


def rt(job_id: str, size: int, phi, d: float, t: float = 0.0, w: float | None = None, b: int = 10) -> JobSpec:
    work = tuple(phi) if isinstance(phi, (list, tuple)) else (phi,) * size
    return JobSpec(job_id, size, t, job_class="rt", realtime=RealTime(d, b, work, w))


def be(job_id: str, size: int, t: float = 0.0) -> JobSpec:
    return JobSpec(job_id, size, t, job_class="be")


def starts(actions) -> dict[str, tuple[int, ...]]:
    return {a.job_id: a.nodes for a in actions if isinstance(a, Start)}


# --------------------------------------------------------------------------------------------------------
# 2DCS-PS virtual times (figure 4, x:y = 2:1)


def test_virtual_time_example_of_figure_4_with_the_reset_rule():
    vt = VirtualTimes(2 / 3)
    # 0: both ready, tie -> RT (A runs).
    assert vt.event(0, rt_ready=True, be_ready=True) == RT
    # 10: A blocks. RT ran 10 at share 2/3: vt_RT = 10 * 3/2 = 15; BE (0 < 15) runs: B.
    assert vt.event(10, rt_ready=False, be_ready=True) == BE
    assert vt.vt == {RT: pytest.approx(15), BE: 0}
    # 30: B's quantum ends. BE ran 20 at share 1/3: vt_BE = 60; RT has nothing ready: BE again (C).
    assert vt.event(30, rt_ready=False, be_ready=True) == BE
    assert vt.vt == {RT: pytest.approx(15), BE: pytest.approx(60)}
    # 35: A's message. vt_BE = 60 + 5 * 3 = 75. The paper keeps vt_RT = 15; the reset rule (applied here)
    # starts RT again from BE's virtual time: 75. Tie -> RT, A runs, as in the paper.
    assert vt.event(35, rt_ready=True, be_ready=True) == RT
    assert vt.vt == {RT: pytest.approx(75), BE: pytest.approx(75)}
    # 45: RT ran 10 more: vt_RT = 75 + 15 = 90 > 75, so BE runs now. (Without the reset RT would still
    # be at 30, and keep the CPU for 30 more units.)
    assert vt.event(45, rt_ready=True, be_ready=True) == BE


def test_a_class_that_ran_ahead_keeps_its_debt_when_it_comes_back():
    vt = VirtualTimes(0.5)
    vt.event(0, True, False)  # RT alone
    vt.event(10, False, True)  # RT ran 10 at 1/2: 20; BE comes in from RT's 20 (its 0 < 20: reset)
    assert vt.vt == {RT: 20, BE: 20}
    vt.event(12, True, True)  # BE ran 2: 24. RT comes back: max(20, 24) = 24; tie -> RT
    assert vt.vt[RT] == 24 and vt.running == RT
    assert vt.event(13, False, False) is None  # nothing ready: nobody runs, nobody is charged after


# --------------------------------------------------------------------------------------------------------
# Admission formulas


def test_1gs_rows_needed_with_and_without_the_context_switch():
    # r = ceil(M (Q + ω) phi_max / (Q d)). M = 4, Q = 1, d = 1, phi = 1/4: 4 * 1 * 0.25 / 1 = 1 -> 1 row.
    assert gs_rows_needed(4, 1.0, 0.0, 0.25, 1.0) == 1
    # ω = 0.01: 4 * 1.01 * 0.25 = 1.01 -> 2 rows.
    assert gs_rows_needed(4, 1.0, 0.01, 0.25, 1.0) == 2
    # Paper's figures: M = 6, Q = 0.5, ω = 200 us, d = 1/30, phi = 10 ms: 6 * 0.5002 * 0.01 * 60 / 0.5 = 3.6
    # ... / Q already in: 6 * (0.5002 / 0.5) * 0.01 * 30 = 1.80072 -> 2.
    assert gs_rows_needed(6, 0.5, 200e-6, 0.010, 1 / 30) == 2
    assert rt_rows(6, 2, 1) == 4 and rt_rows(3, 2, 1) == 2


def test_2dcs_admission_test():
    # Phi_i + phi + cost <= min(d_i, d_A) * share. Share 2/3, d = 30 ms: the bound is 20 ms.
    assert dcs_fits(0.010, 0.030, 0.010, 0.030, 2 / 3, 0.0)  # 20 <= 20
    assert not dcs_fits(0.010, 0.030, 0.010, 0.030, 2 / 3, 0.0005)  # 20.5 > 20
    # The node's smallest period binds: a node holding a 15 ms job allows 10 ms in all.
    assert not dcs_fits(0.005, 0.015, 0.006, 0.030, 2 / 3, 0.0)  # 11 > 10
    assert dcs_fits(0.005, 0.015, 0.005, 0.030, 2 / 3, 0.0)  # 10 <= 10


# --------------------------------------------------------------------------------------------------------
# 2DCS allocation


P0 = {"context_switch_us": 0.0, "interrupt_us": 0.0, "sync_ms": 0.0}


def dcs(nodes: int, **params) -> TwoDcsGlobal:
    return registry.get("2dcs-ps").make_global(nodes, {**P0, **params}, 0)


def test_laxity_allocation_by_hand():
    g = dcs(3)
    # A: d = 30 ms, phi = (12, 6, 9) ms. Empty nodes: laxity 2/3 * 30 = 20 ms each. Descending phi:
    # rank 0 (12) -> node 0 (tie: lowest), lax 8; rank 2 (9) -> node 1, lax 11; rank 1 (6) -> node 2, 14.
    assert starts(g.submit(0, rt("A", 3, (0.012, 0.006, 0.009), 0.030))) == {"A": (0, 2, 1)}
    # B: d = 60 ms, phi 20 ms each. Laxities use min(d_i, d_B) = 30: node 0: 8, node 1: 11, node 2: 14.
    # rank 0 -> node 2 (14 -> -6); rank 1 -> node 1 (11 -> -9); rank 2 -> node 0 (8 -> -12).
    assert starts(g.submit(1, rt("B", 3, 0.020, 0.060))) == {"B": (2, 1, 0)}
    assert g.phi == pytest.approx([0.032, 0.029, 0.026])
    # BE jobs go to the nodes with the fewest BE processes: all 0 -> nodes 0, 1; then 2 and 0.
    assert starts(g.submit(2, be("C", 2))) == {"C": (0, 1)}
    assert starts(g.submit(3, be("D", 2))) == {"D": (0, 2)}


def test_processes_of_one_job_may_share_a_node():
    g = dcs(2)
    # Two nodes, lax 20 ms each. phi (10, 4, 4): rank 0 -> node 0 (10); rank 1 -> node 1 (16);
    # rank 2 -> node 1 again (16 > 10 -> 12).
    assert starts(g.submit(0, rt("A", 3, (0.010, 0.004, 0.004), 0.030))) == {"A": (0, 1, 1)}


def test_2dcs_admission_queues_then_evicts_after_w_and_serves_at_departure():
    g = dcs(3, admission=True)
    assert starts(g.submit(0, rt("A", 3, (0.012, 0.006, 0.009), 0.030))) == {"A": (0, 2, 1)}
    # B (20 ms each) fails on the node of most slack (node 2: 6 + 20 > 20): it waits, w = 5 s.
    assert g.submit(1, rt("B", 3, 0.020, 0.060, t=1, w=5)) == []
    assert g.next_tick() == 6
    # C would fit (2 ms, slack 14 on node 2) but the RT queue is FCFS: it waits behind B.
    assert g.submit(2, rt("C", 1, 0.002, 0.030, t=2)) == []
    # A leaves at 3: empty nodes bound B by min(inf, 60 ms) * 2/3 = 40 ms: ranks on nodes 0, 1, 2 (20 ms
    # each). C (d = 30 ms) then sees min(60, 30) * 2/3 - 20 = 0 ms of slack everywhere: still waits.
    assert starts(g.finished(3, "A")) == {"B": (0, 1, 2)}
    # B leaves at 4: C goes to node 0.
    assert starts(g.finished(4, "B")) == {"C": (0,)}
    # D (3 x 19 ms, d = 30 ms) fits nodes 1 and 2 but not node 0 (2 + 19 > 20): it waits from 5, and is
    # turned away at 5 + w = 7.
    assert g.submit(5, rt("D", 3, 0.019, 0.030, t=5, w=2)) == []
    assert g.tick(6.9) == []
    (rej,) = g.tick(7.0)
    assert isinstance(rej, Reject) and rej.job_id == "D" and "waited 2 s" in rej.reason


def test_2dcs_admission_rejects_at_once_what_never_fits():
    g = dcs(3, admission=True)
    (rej,) = g.submit(0, rt("A", 1, 0.025, 0.030))  # 25 ms > 20 ms on an empty node
    assert isinstance(rej, Reject) and "even on an empty cluster" in rej.reason


def test_2dcs_admission_counts_the_context_switch_and_interrupt_costs():
    g = registry.get("2dcs-tdm").make_global(
        1, {"admission": True, "context_switch_us": 200, "interrupt_us": 50, "sync_ms": 0}, 0
    )
    # Cost per frame = 2 * 200 + 50 = 450 us. 19.5 + 0.45 <= 20 fits; a second 0.1 ms does not (20.05 > 20).
    assert starts(g.submit(0, rt("A", 1, 0.0195, 0.030))) == {"A": (0,)}
    (rej,) = g.submit(1, rt("B", 1, 0.0001, 0.030, t=1, w=1)) or [None]
    assert rej is None  # waits
    assert [a.job_id for a in g.tick(2.0)] == ["B"]


# --------------------------------------------------------------------------------------------------------
# 1GS


def onegs(nodes: int, **params) -> OneGsGlobal:
    base = {"rows": 3, "quantum_ms": 1000, "lead_ms": 0, **P0}
    return registry.get("1gs").make_global(nodes, {**base, **params}, 0)


def matrix(g: OneGsGlobal) -> list[str]:
    return [" ".join(c or "." for c in row) for row in g.matrix]


def test_1gs_replication_by_hand():
    # p = 4, M = 3 at 2:1: rows 0 and 1 RT, row 2 BE. Q = 1 s, ω = 0.
    g = onegs(4)
    # A: size 2, phi 20 ms, d = 1/30: r = ceil(3 * 0.02 * 30) = ceil(1.8) = 2. Placed in row 0, columns
    # 0-1; short of its rate (1 < 2): step 1 copies it into row 1.
    assert starts(g.submit(0, rt("A", 2, 0.020, 1 / 30))) == {"A": (0, 1)}
    assert matrix(g) == ["A A . .", "A A . .", ". . . ."]
    # B: size 2, phi 5 ms: r = ceil(0.45) = 1; row 0 columns 2-3. Meets its rate: no copy.
    assert starts(g.submit(1, rt("B", 2, 0.005, 1 / 30))) == {"B": (2, 3)}
    # C: BE size 3 -> row 2, columns 0-2. Step 4 (BE into RT rows): no RT row has 0-2 free.
    assert starts(g.submit(2, be("C", 3))) == {"C": (0, 1, 2)}
    # D: BE size 1 -> row 2 column 3. Step 4: row 0 column 3 is B's; row 1 column 3 is free: a copy.
    assert starts(g.submit(3, be("D", 1))) == {"D": (3,)}
    assert matrix(g) == ["A A B B", "A A . D", "C C C D"]
    # A leaves: copies go, then again: B meets its rate; C fits row 1 (0-2 free) and D row 1 column 3.
    assert g.finished(4, "A") == []
    assert matrix(g) == [". . B B", "C C C D", "C C C D"]


def test_1gs_admission_holds_r_rows_in_the_same_columns_and_evicts_after_w():
    g = onegs(4, admission=True)
    # A needs r = 2 rows: rows 0 and 1, columns 0-1 (originals, not copies).
    assert starts(g.submit(0, rt("A", 2, 0.020, 1 / 30))) == {"A": (0, 1)}
    assert g.orig["A"] == ((0, 1), (0, 1))
    # E: size 3, r = 1: no RT row has 3 free columns (2-3 only): it waits, w = 5 s.
    assert starts(g.submit(1, rt("E", 3, 0.001, 1 / 30, t=1, w=5))) == {}
    assert min(g.next_tick(), 6.0) <= 6.0
    rej = [a for a in g.tick(6.0) if isinstance(a, Reject)]
    assert [r.job_id for r in rej] == ["E"] and "waited 5 s" in rej[0].reason
    # F needs r = ceil(3 * 0.03 * 30) = 3 rows, more than the 2 RT rows: refused at once.
    (f,) = g.submit(7, rt("F", 1, 0.030, 1 / 30))
    assert isinstance(f, Reject) and "needs 3 RT rows" in f.reason


def test_1gs_slots_cycle_through_the_rows():
    g = onegs(4)
    acts = g.submit(0, rt("A", 2, 0.020, 1 / 30)) + g.submit(0, be("C", 4))
    d0 = [a for a in acts if isinstance(a, Dispatch)][0]
    assert d0.rows == (0,) and d0.allowed[0] == {"A"} and d0.allowed[3] == frozenset()
    rows = [g.tick(t)[0].rows[0] for t in (1.0, 2.0, 3.0)]
    assert rows == [1, 2, 0]  # A's copy in row 1, C in row 2


# --------------------------------------------------------------------------------------------------------
# The node level


def local(name: str, **params):
    return registry.get(name).make_local(0, {"gamma_ms": 300, **params} if name == "2dcs-tdm" else params, 0)


def test_tdm_divisions_favour_rt_then_be_and_edf_orders_rt():
    pol = local("2dcs-tdm")  # Γ = 300 ms at 2:1: RT owns [0, 200) ms, BE [200, 300)
    a, b, c = Proc("A", 0), Proc("B", 0), Proc("C", 0)
    d = pol.on_event(0.0, ProcAdded(a, rt("A", 1, 0.005, 0.040)))
    assert d.wakeup == pytest.approx(0.2)  # the division's end
    pol.on_event(0.0, ProcAdded(b, rt("B", 1, 0.005, 0.030)))
    pol.on_event(0.001, ProcAdded(c, be("C", 1)))
    # RT division: B's next deadline (30 ms) before A's (40 ms): B first; C borrows only.
    assert pol.applied == {a: -10, b: -20, c: 19}
    # B waits for a message: A is the ready RT process with the earliest deadline.
    pol.on_event(0.002, ReceiverWaiting(b, "spin-block"))
    assert pol.applied[a] == -20 and pol.applied[b] == -10
    pol.on_event(0.2, Timer())  # BE division: RT borrows; C alone in BE: no pick, its normal nice
    assert pol.applied == {a: 19, b: 19, c: 0}


def test_ps_favours_the_class_behind_in_virtual_time():
    pol = local("2dcs-ps", quantum_ms=10)
    a, c = Proc("A", 0), Proc("C", 0)
    pol.on_event(0.0, ProcAdded(a, rt("A", 1, 0.005, 0.030)))
    pol.on_event(0.0, ProcAdded(c, be("C", 1)))
    assert pol.applied == {a: -20, c: 19}  # both ready, tie -> RT
    pol.on_event(0.010, ReceiverBlocked(a))  # RT ran 10 ms: vt_RT = 15 ms; A blocked -> BE
    assert pol.applied == {a: 19, c: 0}
    assert pol.vt.vt[RT] == pytest.approx(0.015)
