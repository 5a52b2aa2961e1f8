"""The Lublin-Feitelson model (testbed/scenario/lublin.py, ``generator.kind: lublin``): the moments of what
it generates against those that follow from the paper's parameters (Lublin & Feitelson, JPDC 63(11),
2003; the "all jobs" fit on a 128-node machine), within 10 %."""

from __future__ import annotations

import math

import numpy as np
import pytest

from testbed.scenario import ScenarioError, load
from testbed.scenario import lublin as L
from testbed.scenario.workload import build

#: The paper's "all jobs" parameters, restated here (not read from the module under test).
SERIAL, ULOW, UMED, UHI, UPROB = 0.244, 0.8, 4.5, 7.0, 0.86
A1, B1, A2, B2, PA, PB = 4.2, 0.94, 312.0, 0.03, -0.0054, 0.78


@pytest.fixture(scope="module")
def jobs():
    return L.draw(20_000, 128, seed=3)


def _close(got: float, want: float) -> None:
    assert got == pytest.approx(want, rel=0.10), (got, want)


def test_sizes_have_the_papers_serial_share_and_two_stage_uniform_mean(jobs):
    sizes = np.array([j.size for j in jobs])
    _close(float((sizes == 1).mean()), SERIAL)
    # log2 of a parallel job's size is the two-stage uniform (rounded for the power-of-two jobs).
    want = (UPROB * (ULOW + UMED) + (1 - UPROB) * (UMED + UHI)) / 2
    _close(float(np.log2(sizes[sizes > 1]).mean()), want)
    assert sizes.max() <= 128
    # The power-of-two emphasis: most parallel jobs are powers of two.
    par = sizes[sizes > 1]
    assert float((par & (par - 1) == 0).mean()) > 0.576 / (1 - SERIAL)


def test_run_times_are_log_hyper_gamma_correlated_with_size(jobs):
    sizes = np.array([j.size for j in jobs])
    logs = np.log([j.run_s for j in jobs])

    def mean_log(n):  # E[log run time | n processes]: the hyper-gamma's mean at p = pa*n + pb
        p = np.clip(PA * n + PB, 0, 1)
        return p * A1 * B1 + (1 - p) * A2 * B2

    _close(float(logs[sizes == 1].mean()), float(mean_log(1)))
    _close(float(logs.mean()), float(mean_log(sizes).mean()))
    wide = sizes >= 32
    _close(float(logs[wide].mean()), float(mean_log(sizes[wide]).mean()))
    assert logs[wide].mean() > logs[sizes == 1].mean() + 1  # wider jobs run longer (pa < 0)
    # Second moment of the serial jobs' hyper-gamma: Var = E[Var | gamma] + Var[E | gamma].
    p = PA + PB
    m1, m2 = A1 * B1, A2 * B2
    var = p * A1 * B1**2 + (1 - p) * A2 * B2**2 + p * (1 - p) * (m1 - m2) ** 2
    _close(float(logs[sizes == 1].var()), var)


def test_arrivals_follow_the_daily_cycle(jobs):
    start = 8 * 3600  # start_hour 8
    hours = ((np.array([j.submit_s for j in jobs]) + start) % 86_400) // 3600
    got = np.bincount(hours.astype(int), minlength=24) / len(jobs)
    # The cycle's weights: gamma(8.1737, 3.9631) over half-hour buckets i = 11..58, bucket (i-1) mod 48.
    anum, bnum = 8.1737, 3.9631
    xs = np.linspace(0.5, 60.5, 60_001)
    pdf = np.exp((anum - 1) * np.log(xs) - xs / bnum - math.lgamma(anum) - anum * math.log(bnum))
    half = np.zeros(48)
    for i in range(11, 59):
        sel = (xs >= i - 0.5) & (xs < i + 0.5)
        half[(i - 1) % 48] = pdf[sel].mean()
    want = (half[0::2] + half[1::2]) / half.sum()
    for lo in range(0, 24, 6):  # each quarter of the day
        _close(float(got[lo : lo + 6].sum()), float(want[lo : lo + 6].sum()))
    assert got[12:18].sum() > 3 * got[0:6].sum()  # afternoons are far busier than nights


def test_the_generator_in_a_scenario_is_seeded_scaled_and_fits_the_cluster():
    doc = {
        "cluster": {"nodes": 16},
        "scheduler": {"name": "batch"},
        "workload": {"seed": 4, "generator": {"kind": "lublin", "count": 300, "time_scale": 0.001}},
    }
    a, b = build(load(doc=doc)), build(load(doc=doc))
    assert [(j.spec.size, j.spec.submit_time) for j in a] == [(j.spec.size, j.spec.submit_time) for j in b]
    assert a[0].spec.submit_time == 0.0 and all(1 <= j.spec.size <= 16 for j in a)
    assert {j.spec.job_class for j in a} == {"lublin"}
    other = build(load(doc={**doc, "workload": {**doc["workload"], "seed": 5}}))
    assert [j.spec.size for j in other] != [j.spec.size for j in a]
    split = {
        **doc,
        "workload": {**doc["workload"], "generator": {**doc["workload"]["generator"], "job_types": "split"}},
    }
    assert {j.spec.job_class for j in build(load(doc=split))} == {"batch", "interactive"}
    with pytest.raises(ScenarioError, match=r"workload.generator.kind: unknown generator kind 'lublim'"):
        load(doc={"workload": {"generator": {"kind": "lublim", "count": 3}}})


def test_the_generators_times_and_work_are_python_floats():
    """The drawn numpy values reach the jobs as Python floats of the same value: a numpy scalar made every
    time of a simulation one (slower arithmetic and rounding, and a conversion for each log record; issue
    23), and rounded a logged time by numpy's rule, not Python's correctly rounded one."""
    doc = {
        "cluster": {"nodes": 16},
        "scheduler": {"name": "batch"},
        "workload": {"seed": 4, "generator": {"kind": "lublin", "count": 50, "app": {"barrier": False}}},
    }
    jobs = build(load(doc=doc))
    assert all(type(j.spec.submit_time) is float for j in jobs)
    assert all(type(j.spec.estimate) is float for j in jobs if j.spec.estimate is not None)
    drawn = L.draw(50, 16, 4)
    t0 = drawn[0].submit_s
    assert [j.spec.submit_time for j in jobs] == sorted(float(round(d.submit_s - t0, 6)) for d in drawn)
    work = [j.kind.compute_only(j.app, j.spec.size) for j in jobs]
    assert all(type(w) is float for w in work)
