"""Honest repetitions (issue 24): in the simulator repetition k draws its workload from seed + k and says
so; real processes keep the seed unless told; one-seed repetitions of the simulator are refused, and
repetitions that came out identical are reported; the results carry mean, stdev and a 95 % interval."""

from __future__ import annotations

import json
import statistics

import pytest

from testbed import runner
from testbed.core.backend import PreflightError
from testbed.results import comparison, stats
from testbed.scenario import load, sweep

GEN = {
    "name": "reps",
    "cluster": {"nodes": 4},
    "scheduler": {"name": "gang"},
    "workload": {"seed": 3, "generator": {"count": 6, "mean_interarrival_s": 1, "duration": {"mean_s": 2}}},
    "repetitions": 3,
}


def test_simulated_repetitions_draw_seed_plus_k_and_carry_intervals(tmp_path):
    out = tmp_path / "out"
    summaries = runner.run(load(doc=GEN), "sim", out)
    assert [s["workload_seed"] for s in summaries] == [3, 4, 5]
    csvs = {(out / f"rep-{k}" / "jobs.csv").read_text() for k in (1, 2, 3)}
    assert len(csvs) == 3  # three different runs, not one counted three times
    for k in (1, 2, 3):  # stated in each repetition's own results
        assert load(out / f"rep-{k}" / "scenario.yaml").workload.seed == 2 + k
        assert json.loads((out / f"rep-{k}" / "summary.json").read_text())["workload_seed"] == 2 + k
    doc = json.loads((out / stats.REPETITIONS_FILE).read_text())
    assert doc["workload_seeds"] == [3, 4, 5] and doc["identical_results"] is False
    vals = [s["mean_response_time_s"] for s in summaries]
    m = doc["metrics"]["mean_response_time_s"]
    assert m["mean"] == pytest.approx(statistics.mean(vals)) and m["stdev"] == pytest.approx(
        statistics.stdev(vals)
    )
    half = 4.303 * statistics.stdev(vals) / 3**0.5  # t(0.975, 2 df) from the table
    assert (m["ci95_low"], m["ci95_high"]) == pytest.approx((m["mean"] - half, m["mean"] + half), rel=1e-3)
    assert m["stdev"] > 0
    # Every file the repetitions' folder holds is a run's own (--force may replace it).
    from testbed.results.folder import RUN_ENTRIES

    assert {p.name for p in out.iterdir()} - RUN_ENTRIES == {"rep-1", "rep-2", "rep-3"}


def test_real_process_repetitions_keep_the_seed_unless_told():
    scn = load(doc=GEN)
    assert [sweep.repetition(scn, k, "ray").workload.seed for k in range(3)] == [3, 3, 3]
    assert [sweep.repetition(scn, k, "sim").workload.seed for k in range(3)] == [3, 4, 5]
    vary = load(doc={**GEN, "repetition_seeds": "vary"})
    assert [sweep.repetition(vary, k, "ray").workload.seed for k in range(3)] == [3, 4, 5]


def test_one_seed_repetitions_of_the_simulator_are_refused(tmp_path):
    same = load(doc={**GEN, "repetition_seeds": "same"})
    with pytest.raises(PreflightError, match=r"^repetitions: 3 runs of the simulator with one workload seed"):
        runner.preflight(same, "sim", tmp_path / "out")
    assert runner.preflight(same, "ray", tmp_path / "out") is not None  # real processes: noise, allowed


def test_repetitions_that_come_out_identical_are_reported(tmp_path):
    doc = {**GEN, "workload": {"jobs": [{"size": 2, "app": {"iterations": 3}}, {"size": 4, "submit_s": 0.5}]}}
    said: list[str] = []
    runner.run(load(doc={**doc, "repetitions": 2}), "sim", tmp_path / "out", notice=said.append)
    assert json.loads((tmp_path / "out" / stats.REPETITIONS_FILE).read_text())["identical_results"] is True
    assert any("2 repetitions ended with identical jobs.csv files" in s for s in said), said


def test_t_quantiles_match_the_table():
    for df, want in [(1, 12.706), (2, 4.303), (5, 2.571), (9, 2.262), (30, 2.042)]:
        assert stats.t_quantile(0.975, df) == pytest.approx(want, abs=1e-3)
    assert stats.describe([5.0]).ci95_low is None and stats.describe([]) is None


def test_a_sweeps_comparison_carries_the_interval(tmp_path):
    doc = {**GEN, "repetitions": 2, "sweep": {"scheduler.name": ["gang", "batch"]}}
    rows = runner.run(load(doc=doc), "sim", tmp_path / "out")
    for r in rows:
        d = stats.describe(
            [
                s["makespan_s"]
                for s in (
                    json.loads((tmp_path / "out" / r["variant"] / f"rep-{k}" / "summary.json").read_text())
                    for k in (1, 2)
                )
            ]
        )
        assert r["makespan_s" + comparison.CI95] == pytest.approx(d.ci95_half)
        assert (tmp_path / "out" / r["variant"] / stats.REPETITIONS_FILE).exists()
    # The table shows the overridden key and the metrics, not the bookkeeping columns as if they were keys.
    from rich.console import Console

    con = Console(record=True, width=200)
    con.print(comparison.table(rows))
    text = con.export_text()
    assert "scheduler.name" in text and "not_as_planned" not in text
