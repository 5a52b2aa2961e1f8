"""Paired gang scheduling (paper 002; docs/policies.md, "Paired gang"): prediction, pairing rule, matching
(the paper's §4.1.2 and §2.4 examples), slot homogeneity, sharp change, never-pair, Dispatch sets, and the
simulator."""

from __future__ import annotations

import pytest
from testbed.apps.synthetic import SyntheticConfig
from testbed.schedulers import registry
from testbed.schedulers.base import Dispatch, GlobalPolicy, JobSpec, PolicyConfigError, Reject, Start
from testbed.schedulers.gang import Gang, GangGlobal, GangLocal
from testbed.schedulers.paired import Paired, PairedGlobal, predict

from testbed.core.jobs import Job
from testbed.sim.engine import Simulation


def policy(nodes: int, **params) -> PairedGlobal:
    params.setdefault("lead_ms", 10.0)
    p = Paired.make_global(nodes, params, 0)
    assert isinstance(p, PairedGlobal)
    return p


def feed(p: GlobalPolicy, job_id: str, util: float, quanta: int = 4, size: int = 1) -> None:
    """``quanta`` measured quanta of ``util`` on every rank of the job."""
    for _ in range(quanta):
        for rank in range(size):
            assert p.utilization(0.0, job_id, rank, util, 0.1) == []


def dispatch(p: PairedGlobal) -> Dispatch:
    [d] = [a for a in p.tick(p.next_tick()) if isinstance(a, Dispatch)]
    return d


def submit_rows(p: PairedGlobal, jobs: list[tuple[str, int]], **spec) -> None:
    """Submits jobs at time 0; with size = nodes each lands in its own row, in order."""
    for job_id, size in jobs:
        acts = p.submit(0.0, JobSpec(job_id, size, 0.0, **spec.get(job_id, {})))
        assert isinstance(acts[0], Start)


def run_round(p: PairedGlobal) -> list[tuple[int, int | None]]:
    """Ticks to the start of a round (row 0 next), then one round: (row, partner row) per quantum."""
    while p.row != p.mpl - 1:
        dispatch(p)
    out = []
    for _ in range(p.mpl):
        dispatch(p)
        out.append((p.row, p.last_partner))
    return out


def chosen_share(plan: list[tuple[int, int | None]], rows: int) -> list[float]:
    """Fraction of the round's quanta in which each row was the chosen partner (paper 002, fig. 7)."""
    return [sum(1 for _, partner in plan if partner == r) / len(plan) for r in range(rows)]


# --------------------------------------------------------------------------------------------------------
# Registration and parameters


def test_registered_with_gang_defaults_plus_pairing():
    assert registry.get("paired") is Paired
    assert Paired.local_policy is GangLocal
    assert Paired.global_policy.wants_utilization is True
    assert Gang.global_policy.wants_utilization is False  # the base default
    assert Paired.defaults == {
        **Gang.defaults,
        "margin_pct": 1.0,
        "band_pct": 20.0,
        "sharp_change_pct": 20.0,
        "matching": "fair",
    }
    assert Paired.all_defaults()["memory_aware"] is True


@pytest.mark.parametrize(
    ("params", "name"),
    [({"margin_pct": -1}, "margin_pct"), ({"band_pct": 0}, "band_pct"), ({"sharp_change_pct": 101},
     "sharp_change_pct"), ({"matching": "greedy"}, "matching"), ({"mpl": 0}, "mpl"),
     ({"quantum_ms": 0}, "quantum_ms"), ({"memory_aware": "yes"}, "memory_aware")],
)  # fmt: skip
def test_bad_params_name_the_parameter(params, name):
    with pytest.raises(PolicyConfigError, match=name):
        policy(4, **params)


# --------------------------------------------------------------------------------------------------------
# Prediction


def test_prediction_weights_are_04_03_02_01_most_recent_first():
    assert predict([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.4)
    assert predict([0.0, 1.0, 0.0, 0.0]) == pytest.approx(0.3)
    assert predict([0.0, 0.0, 1.0, 0.0]) == pytest.approx(0.2)
    assert predict([0.0, 0.0, 0.0, 1.0]) == pytest.approx(0.1)
    assert predict([0.5, 0.2, 0.9, 0.1]) == pytest.approx(0.4 * 0.5 + 0.3 * 0.2 + 0.2 * 0.9 + 0.1 * 0.1)


def test_new_job_at_100_percent_then_its_measured_quanta_take_over():
    p = policy(2, mpl=2)
    submit_rows(p, [("A", 2)])
    assert p.predicted("A") == 1.0
    expected = [0.6, 0.3, 0.1, 0.0]  # one quantum at 0 % each time; older quanta postulated at 100 %
    for e in expected:
        feed(p, "A", 0.0, quanta=1, size=2)
        assert p.predicted("A") == pytest.approx(e)
    # A fifth quantum pushes the oldest out: only the last four count.
    feed(p, "A", 1.0, quanta=1, size=2)
    assert p.predicted("A") == pytest.approx(0.4)


def test_a_quantum_is_the_mean_over_the_jobs_processes():
    p = policy(2, mpl=2)
    submit_rows(p, [("A", 2)])
    p.utilization(0.0, "A", 0, 0.2, 0.1)
    assert p.predicted("A") == 1.0  # rank 1 has not reported: the quantum is still open
    p.utilization(0.0, "A", 1, 0.6, 0.1)
    assert p.predicted("A") == pytest.approx(0.4 * 0.4 + 0.6)
    # A rank reporting twice closes the last quantum with what arrived (rank 1 lost, say).
    p.utilization(0.0, "A", 0, 0.3, 0.1)
    p.utilization(0.0, "A", 0, 0.3, 0.1)
    assert p.predicted("A") == pytest.approx(0.4 * 0.3 + 0.3 * 0.4 + 0.3)


def test_samples_of_unknown_jobs_ranks_or_empty_intervals_are_ignored():
    p = policy(1, mpl=2)
    submit_rows(p, [("A", 1)])
    assert p.utilization(0.0, "nope", 0, 0.0, 0.1) == []
    p.utilization(0.0, "A", 3, 0.0, 0.1)
    p.utilization(0.0, "A", 0, 0.0, 0.0)
    assert p.predicted("A") == 1.0
    p.finished(1.0, "A")
    assert p.utilization(1.0, "A", 0, 0.0, 0.1) == []


# --------------------------------------------------------------------------------------------------------
# Pairing rule


@pytest.mark.parametrize(("margin", "paired"), [(1.0, True), (2.0, False)])
def test_pairing_needs_the_sum_plus_margin_below_100(margin, paired):
    p = policy(2, mpl=2, margin_pct=margin)
    submit_rows(p, [("A", 2), ("B", 2)])
    feed(p, "A", 0.6, size=2)
    feed(p, "B", 0.385, size=2)  # 0.6 + 0.385 = 0.985: + 1 % fits, + 2 % does not
    plan = run_round(p)
    assert all((partner is not None) == paired for _, partner in plan)


def test_new_jobs_are_not_paired_until_measured():
    p = policy(2, mpl=2)
    submit_rows(p, [("A", 2), ("B", 2)])
    assert all(partner is None for _, partner in run_round(p))  # both postulated at 100 %
    feed(p, "A", 0.9, size=2)
    feed(p, "B", 0.0, size=2)
    assert all(partner is not None for _, partner in run_round(p))


def test_paired_dispatch_allows_both_slots_jobs_on_each_node():
    p = policy(2, mpl=2)
    submit_rows(p, [("A", 2), ("B", 2)])
    feed(p, "A", 0.9, size=2)
    feed(p, "B", 0.0, size=2)
    run_round(p)
    d = dispatch(p)
    assert {n: set(js) for n, js in d.allowed.items()} == {0: {"A", "B"}, 1: {"A", "B"}}
    assert p.paired_quanta > 0 and p.quanta > p.paired_quanta  # the first quanta ran alone


def test_slot_utilization_is_the_max_over_its_jobs():
    p = policy(2, mpl=3)
    submit_rows(p, [("A", 1), ("B", 1)])  # both in row 0, columns 0 and 1
    feed(p, "A", 0.30)
    feed(p, "B", 0.45)
    assert p.slot_utilization(0) == pytest.approx(0.45)


# --------------------------------------------------------------------------------------------------------
# Matching: paper 002 §4.1.2 (fig. 7, lower part) and §2.4


def test_paper_example_four_io_jobs_best_fit_skews_fair_spreads():
    # Four I/O-bound jobs at 0 %: best fit scans the slots in the same order and ties go to the last
    # one, so slot 3 is chosen when slots 0, 1, 2 run (75 %) and slot 2 when slot 3 runs (25 %).
    p = policy(1, mpl=4, matching="best-fit")
    submit_rows(p, [(f"io{i}", 1) for i in range(4)])
    for i in range(4):
        feed(p, f"io{i}", 0.0)
    plan = run_round(p)
    assert plan == [(0, 3), (1, 3), (2, 3), (3, 2)]
    assert chosen_share(plan, 4) == [0.0, 0.0, 0.25, 0.75]
    # Fair matching: each slot gets a distinct partner: every slot is chosen 25 % of the time.
    p = policy(1, mpl=4)
    submit_rows(p, [(f"io{i}", 1) for i in range(4)])
    for i in range(4):
        feed(p, f"io{i}", 0.0)
    for _ in range(3):
        plan = run_round(p)
        assert chosen_share(plan, 4) == [0.25] * 4
        assert all(partner is not None for _, partner in plan)


def test_paper_example_one_compute_three_io_jobs():
    # One compute job (slot 0) and three I/O jobs: with best fit the compute job is matched with all I/O
    # jobs (75 %) but only the last I/O job is matched with the compute job (25 %).
    def make(matching):
        p = policy(1, mpl=4, matching=matching)
        submit_rows(p, [("c", 1), ("io1", 1), ("io2", 1), ("io3", 1)])
        feed(p, "c", 0.9)
        for i in (1, 2, 3):
            feed(p, f"io{i}", 0.0)
        return p

    plan = run_round(make("best-fit"))
    assert plan == [(0, 3), (1, 0), (2, 0), (3, 0)]
    assert chosen_share(plan, 4) == [0.75, 0.0, 0.0, 0.25]
    # Fair: sorted I/O, I/O, I/O, compute; the lowest I/O goes with the compute job, the other two with
    # each other: every slot is chosen once per round, and every quantum is paired.
    p = make("fair")
    for _ in range(3):
        plan = run_round(p)
        assert chosen_share(plan, 4) == [0.25] * 4
        assert all(partner is not None for _, partner in plan)


def test_paper_example_one_io_three_compute_jobs_io_matched_with_all():
    # One I/O job and three compute jobs of slightly different utilisation: the I/O job is matched with
    # every compute job (75 %). Fair matching: the lowest (I/O) with the highest; the other two compute
    # slots fit no unmatched slot and are matched to the already matched I/O slot.
    p = policy(1, mpl=4)
    submit_rows(p, [("io", 1), ("c1", 1), ("c2", 1), ("c3", 1)])
    feed(p, "io", 0.0)
    for i, u in ((1, 0.90), (2, 0.91), (3, 0.92)):
        feed(p, f"c{i}", u)
    plan = run_round(p)
    assert plan == [(0, 3), (1, 0), (2, 0), (3, 0)]
    assert chosen_share(plan, 4)[0] == 0.75


def test_paper_unfairness_example_80_and_81_percent():
    # §2.4: many I/O jobs at <= 5 % and two jobs at 80 % and 81 %. Best fit always picks the 81 % job
    # for the I/O jobs and never the 80 % one; fair matching gives each slot one partner per round.
    utils = [0.02, 0.03, 0.04, 0.05, 0.80, 0.81]

    def make(matching):
        p = policy(1, mpl=6, matching=matching)
        submit_rows(p, [(f"j{i}", 1) for i in range(6)])
        for i, u in enumerate(utils):
            feed(p, f"j{i}", u)
        return p

    plan = run_round(make("best-fit"))
    assert [partner for _, partner in plan[:4]] == [5, 5, 5, 5]  # the 81 % slot
    assert chosen_share(plan, 6)[4] == 0.0  # the 80 % slot is never chosen
    plan = run_round(make("fair"))
    assert dict(plan) == {0: 5, 5: 0, 1: 4, 4: 1, 2: 3, 3: 2}
    assert chosen_share(plan, 6) == [pytest.approx(1 / 6)] * 6


# --------------------------------------------------------------------------------------------------------
# Slot homogeneity, sharp change, never-pair


@pytest.mark.parametrize(
    ("util_b", "band", "moves"), [(0.25, 20, True), (0.15, 20, False), (0.25, 30, False)]
)
def test_homogeneity_band_moves_a_job_out_to_a_new_slot(util_b, band, moves):
    p = policy(2, mpl=2, band_pct=band)
    submit_rows(p, [("A", 1), ("B", 1)])  # both in row 0
    assert p.placed["A"][0] == 0 and p.placed["B"][0] == 0
    feed(p, "A", 0.0)
    feed(p, "B", util_b)
    d = dispatch(p)
    assert p.placed["B"][0] == (1 if moves else 0)
    assert p.placed["A"][0] == 0  # the slot's minimum stays
    if moves:  # B now has a slot of its own; A's slot runs without it
        assert {n: set(js) for n, js in d.allowed.items()} in ({0: {"A"}, 1: set()}, {0: set(), 1: {"B"}})


def test_homogeneity_prefers_another_slot_within_the_band_to_a_new_one():
    p = policy(2, mpl=3)
    submit_rows(p, [("A", 1), ("B", 1), ("C", 2)])  # A, B in row 0; C in row 1
    p.finished(0.0, "C")
    submit_rows(p, [("C", 1)])  # row 1, column 0
    assert (p.placed["A"][0], p.placed["B"][0], p.placed["C"]) == (0, 0, (1, (0,)))
    feed(p, "A", 0.0)
    feed(p, "B", 0.5)
    feed(p, "C", 0.55)
    dispatch(p)
    assert p.placed["B"] == (1, (1,))  # joins C (range 5 %), not the empty row 2
    assert p.moves == 1


def test_sharp_change_runs_the_job_one_quantum_alone():
    p = policy(1, mpl=2)
    submit_rows(p, [("A", 1), ("B", 1)])
    feed(p, "A", 0.5)
    feed(p, "B", 0.0)
    assert all(partner is not None for _, partner in run_round(p))
    feed(p, "B", 0.15, quanta=1)  # a change of 15 %: not sharp
    assert all(partner is not None for _, partner in run_round(p))
    feed(p, "B", 0.45, quanta=1)  # 30 %: sharp (the prediction, 0.23, would still pair)
    assert p.slot_utilization(0) + p.slot_utilization(1) + 0.01 < 1.0
    history = []
    while True:
        d = dispatch(p)
        history.append(set(d.allowed[0]))
        if history[-1] == {"B"}:
            break  # B's quantum alone
        assert history[-1] == {"A"}  # until then nothing is paired
    assert len(history) <= 2
    assert set(dispatch(p).allowed[0]) == {"A", "B"}  # then pairing resumes


def test_never_pair_flag():
    for exclusive in (True, False):
        p = policy(1, mpl=2)
        submit_rows(p, [("A", 1), ("B", 1)], A={"exclusive": exclusive})
        feed(p, "A", 0.0)
        feed(p, "B", 0.0)
        plans = run_round(p) + run_round(p)
        assert all((partner is None) == exclusive for _, partner in plans)


@pytest.mark.parametrize(("util_c", "node2"), [(0.55, {"C"}), (0.9, set())])
def test_alternate_jobs_must_fall_in_the_band_of_the_running_slot(util_c, node2):
    # Row 0: A on columns 0-1 (column 2 idle); row 1: B on columns 0-1, C on column 2. When row 0 runs
    # (alone: A and B do not fit together), C may fill column 2 only within the band of A's slot.
    p = policy(3, mpl=2)
    submit_rows(p, [("A", 2), ("X", 1), ("B", 2), ("C", 1)])
    p.finished(0.0, "X")
    assert (p.placed["A"], p.placed["B"], p.placed["C"]) == ((0, (0, 1)), (1, (0, 1)), (1, (2,)))
    feed(p, "A", 0.5, size=2)
    feed(p, "B", 0.9, size=2)
    feed(p, "C", util_c)
    allowed = {}
    for _ in range(2):
        d = dispatch(p)
        allowed[p.row] = {n: set(js) for n, js in d.allowed.items()}
    assert allowed[0] == {0: {"A"}, 1: {"A"}, 2: node2}
    assert allowed[1] == {0: {"B"}, 1: {"B"}, 2: {"C"}}


# --------------------------------------------------------------------------------------------------------
# Simulator


def _io_app(iterations: int = 100_000) -> SyntheticConfig:
    return SyntheticConfig(iterations=iterations, gcomp=0.0, gio=20, io_time_ms=0.5)


def _compute_app(iterations: int = 100_000) -> SyntheticConfig:
    return SyntheticConfig(iterations=iterations, gcomp=10.0)


def _mix(scheduler, nodes: int = 4, duration: float = 4.0, **params) -> Simulation:
    jobs = [
        Job(JobSpec("io", nodes, 0.0), _io_app()),
        Job(JobSpec("comp", nodes, 0.0), _compute_app()),
    ]
    # 200 us per barrier message: the barrier's "I/O-like activity" (paper 002 §4.1.1) keeps the
    # compute job near 96 % CPU; at ~99 % the 1 % margin leaves no room to pair it with anything.
    sim = Simulation(jobs, scheduler, {"mpl": 2, **params}, nodes=nodes, duration=duration, latency_s=200e-6)
    sim.run()
    return sim


def _rate(sim: Simulation, job_id: str) -> float:
    """Barriers per second of the job's slowest rank, at its last progress report."""
    last: dict[int, tuple[float, float]] = {}
    for e in sim.events:
        if e["kind"] == "progress" and e["job"] == job_id:
            last[e["rank"]] = (e["value"], e["t"])
    return min(value / t for value, t in last.values())


def test_sim_io_job_gains_from_pairing_without_hurting_the_compute_job():
    strict = _mix(Gang)
    paired = _mix(Paired)
    io_s, io_p = _rate(strict, "io"), _rate(paired, "io")
    comp_s, comp_p = _rate(strict, "comp"), _rate(paired, "comp")
    assert io_p > 1.5 * io_s  # markedly more barriers/s
    assert comp_p > 0.9 * comp_s  # not markedly slower
    gp = paired.gp
    assert isinstance(gp, PairedGlobal)
    assert gp.paired_quanta > gp.quanta / 2
    assert gp.predicted("io") < 0.05 and 0.8 < gp.predicted("comp") < 0.99


def test_sim_reports_each_quantums_exact_cpu_share():
    class Recording(GangGlobal):
        wants_utilization = True

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.log: list[tuple[float, str, int, float, float]] = []

        def utilization(self, now, job_id, rank, util, interval):
            self.log.append((now, job_id, rank, util, interval))
            return []

    class Rec(Gang):
        name = "rec"
        global_policy = Recording

    jobs = [
        Job(JobSpec("A", 1, 0.0), SyntheticConfig(iterations=3, gcomp=100.0, barrier=False)),
        Job(JobSpec("B", 1, 0.0), SyntheticConfig(iterations=100, gcomp=0.0, gio=1, io_time_ms=10.0)),
    ]
    sim = Simulation(jobs, Rec, {"mpl": 2, "lead_ms": 10.0}, nodes=1)
    sim.run()
    log = sim.gp.log
    # Slot 0 (A) from 0.01, slot 1 (B) from 0.11, ...: nothing ran before the first switch.
    assert log[0] == (pytest.approx(0.11), "A", 0, pytest.approx(1.0), pytest.approx(0.1))
    assert log[1] == (pytest.approx(0.21), "B", 0, pytest.approx(0.0), pytest.approx(0.1))
    assert log[2][1:3] == ("A", 0)
    assert len({entry[0] for entry in log}) == len(log)  # one process ran in each quantum

    class Plain(GangGlobal):  # wants_utilization stays False: never called
        def utilization(self, *a, **k):
            raise AssertionError("called")

    class NoRec(Gang):
        name = "norec"
        global_policy = Plain

    Simulation(jobs, NoRec, {"mpl": 2}, nodes=1).run()


def test_sim_paired_rejects_a_job_bigger_than_the_cluster():
    sim = Simulation([Job(JobSpec("big", 5, 0.0), _compute_app(1))], Paired, {}, nodes=4)
    events = sim.run()
    assert [e["kind"] for e in events if e["kind"].startswith("job_")] == ["job_submitted", "job_rejected"]
    assert isinstance(Paired.make_global(4, {}, 0).submit(0.0, JobSpec("big", 5, 0.0))[0], Reject)


def _mix_events(scheduler) -> list[dict]:
    from testbed.sim.engine import simulate

    jobs = [
        Job(JobSpec("io", 4, 0.0, job_class="io"), _io_app()),
        Job(JobSpec("comp", 4, 0.0, job_class="cpu"), _compute_app()),
    ]
    return simulate(jobs, scheduler, {"mpl": 2}, nodes=4, duration=4.0, latency_s=200e-6)


def test_summary_reports_paired_share_and_barrier_rates_per_class():
    """The paper-002 metrics as the results module computes them from the event log alone."""
    from testbed.results import summary as results

    facts = results.RunFacts(4, 1.0, 1, 219.1, 18.968, 1.0, "modelled", "sim", "x")
    strict = results.summarize(_mix_events(Gang), facts)
    paired = results.summarize(_mix_events(Paired), facts)
    assert strict["quanta_paired_fraction"] == 0.0
    assert paired["quanta_paired_fraction"] > 0.5
    assert paired["barriers_per_s.io"] > 1.5 * strict["barriers_per_s.io"]
    assert paired["barriers_per_s.cpu"] > 0.9 * strict["barriers_per_s.cpu"]
    # The rate from progress events agrees with the processes' own barrier counts.
    assert strict["barriers_per_s.io"] == pytest.approx(_rate(_mix(Gang), "io"), rel=0.1)
    assert results.summarize([], facts)["quanta_paired_fraction"] is None
