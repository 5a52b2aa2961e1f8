"""Sweeps: grid expansion, named variants, errors that name the variant and the field, the same jobs for
every variant, and the comparison table (from fake summaries; nothing is simulated here)."""

from __future__ import annotations

import csv
import statistics

import pytest

from testbed import runner
from testbed.results import comparison
from testbed.results import summary as results
from testbed.scenario import ScenarioError, load, model, sweep, workload

GEN = {
    "seed": 5,
    "generator": {
        "count": 12,
        "mean_interarrival_s": 0.5,
        "duration": {"dist": "erlang", "mean_s": 1.0},
        "size": {"min": 2, "max": 8},
        "classes": [
            {"name": "cpu", "app": {"gcomp": 50}},
            {"name": "io", "app": {"gcomp": 5, "gio": 2, "wait_mode": "spin"}},
        ],
    },
}


def _doc(sweep_section, scheduler=None):
    return {
        "name": "s",
        "cluster": {"nodes": 8},
        "scheduler": scheduler or {"name": "gang", "params": {"mpl": 2, "quantum_ms": 50}},
        "workload": GEN,
        "sweep": sweep_section,
    }


def _err(doc, overrides=()):
    with pytest.raises(ScenarioError) as ei:
        load(doc=doc, overrides=list(overrides))
    return str(ei.value)


def test_grid_is_the_cartesian_product_named_from_the_values():
    scn = load(doc=_doc({"scheduler.name": ["local", "gang"], "scheduler.params.mpl": [1, 3]}))
    vs = sweep.variants(scn)
    assert [v.name for v in vs] == ["local-mpl1", "local-mpl3", "gang-mpl1", "gang-mpl3"]
    assert [(v.scenario.scheduler.name, v.scenario.scheduler.params["mpl"]) for v in vs] == [
        ("local", 1),
        ("local", 3),
        ("gang", 1),
        ("gang", 3),
    ]
    # local has no quantum: the base's is dropped, and the notes say so; gang keeps it.
    assert "quantum_ms" not in vs[0].scenario.scheduler.params
    assert any("quantum_ms dropped" in n for n in vs[0].notes)
    assert vs[2].scenario.scheduler.params == {"mpl": 1, "quantum_ms": 50} and not vs[2].notes
    # The variants carry no sweep; the base keeps its sweep, expanded.
    assert all(v.scenario.sweep is None for v in vs) and len(scn.sweep) == 4
    # A grid over non-string values names them with the key's last part; dict values by position.
    g = model.grid({"scheduler.params.quantum_ms": [50, 100.5], "scheduler.params": [{}, {"mpl": 2}]})
    assert [v["name"] for v in g] == [
        "quantum_ms50-params1",
        "quantum_ms50-params2",
        "quantum_ms100.5-params1",
        "quantum_ms100.5-params2",
    ]


def test_named_variants_apply_like_set_overrides():
    scn = load(
        doc=_doc(
            [
                {"name": "batch", "set": {"scheduler.name": "batch", "scheduler.params": {}}},
                {"name": "gang-q100", "set": {"scheduler.params.quantum_ms": 100}},
                {"name": "big", "set": {"cluster.nodes": 16, "duration_s": 30}},
            ]
        )
    )
    batch, gq, big = sweep.variants(scn)
    assert batch.scenario.scheduler.name == "batch" and batch.scenario.scheduler.params == {}
    # A dotted key changes one parameter and keeps the rest, as --set does.
    assert gq.scenario.scheduler.params == {"mpl": 2, "quantum_ms": 100}
    assert big.scenario.cluster.nodes == 16 and big.scenario.duration_s == 30
    assert big.scenario.scheduler == scn.scheduler
    assert comparison.override_keys([batch, gq, big]) == [
        "scheduler.name",
        "scheduler.params",
        "scheduler.params.quantum_ms",
        "cluster.nodes",
        "duration_s",
    ]
    # --set on the command line changes the base, so every variant.
    scn7 = load(doc=_doc([{"name": "a", "set": {"scheduler.name": "gang"}}]), overrides=["workload.seed=7"])
    assert sweep.variants(scn7)[0].scenario.workload.seed == 7
    # --set can give the whole sweep, grid included.
    scn_g = load(doc=_doc(None), overrides=["sweep={scheduler.name: [gang, paired]}"])
    assert [v.name for v in sweep.variants(scn_g)] == ["gang", "paired"]


def test_every_bad_variant_is_named_with_its_field_up_front():
    msg = _err(
        _doc(
            [
                {"name": "ok", "set": {"scheduler.name": "batch", "scheduler.params": {}}},
                {"name": "typo", "set": {"scheduler.params.quantum": 5}},
                {"name": "nodez", "set": {"cluster.nodez": 4}},
                {"name": "fifo", "set": {"scheduler.name": "fifo"}},
                {"name": "tiny", "set": {"cluster.nodes": 2}},
            ]
        )
    )
    assert msg.startswith("invalid sweep:")
    assert "variant 'typo': scheduler.params: unknown parameter(s) quantum" in msg and "quantum_ms" in msg
    assert "variant 'nodez': cluster.nodez: unknown field; did you mean 'nodes'?" in msg
    assert "variant 'fifo': scheduler.name: unknown scheduler 'fifo'" in msg
    assert "variant 'tiny'" in msg and "size.max (8) is above cluster.nodes (2)" in msg
    assert "variant 'ok'" not in msg
    # The sweep section's own shape.
    assert "duplicate variant name(s) a" in _err(_doc([{"name": "a", "set": {"x": 1}}] * 2))
    assert "taken by the sweep's own output" in _err(_doc([{"name": "plots", "set": {"duration_s": 1}}]))
    assert "not usable as a folder name" in _err(_doc([{"name": "a/b", "set": {"duration_s": 1}}]))
    assert "sweep.0.set: required field is missing" in _err(_doc([{"name": "a"}]))
    assert "sweep.0.set: empty: give the keys this variant changes" in _err(_doc([{"name": "a", "set": {}}]))
    assert "cannot change the sweep itself" in _err(_doc([{"name": "a", "set": {"sweep": []}}]))
    assert "sweep.0.sett: unknown field; did you mean 'set'?" in _err(_doc([{"name": "a", "sett": {}}]))
    assert "give a list of values" in _err(_doc({"scheduler.name": "batch"}))
    assert "no variants" in _err(_doc([]))
    msg = _err(_doc({"scheduler.params": [{"mpl": 1}], "scheduler.name": ["gang", "gang"]}))
    assert "two variants the name(s) params1-gang" in msg
    # An override that walks into a value is named too.
    msg = _err(_doc([{"name": "deep", "set": {"cluster.nodes.x": 1}}]))
    assert "variant 'deep': set cluster.nodes.x: cluster.nodes is a value, not a section" in msg


def _fingerprint(scn):
    """Every generated job as data; the wait mode and spin time are the scheduler's (a coscheduling
    scheme imposes its own), so they are compared apart."""
    out = []
    for j in workload.build(scn):
        app = j.app.model_dump()
        out.append((j.spec, {k: v for k, v in app.items() if k not in ("wait_mode", "spin_time_us")}))
    return out


def test_every_variant_runs_the_same_generated_jobs():
    names = ["batch", "gang", "hybrid", "sb"]
    scn = load(doc=_doc({"scheduler.name": names}, scheduler={"name": "gang", "params": {}}))
    vs = sweep.variants(scn)
    ref = _fingerprint(scn)
    assert len(ref) == 12
    for v in vs:
        assert _fingerprint(v.scenario) == ref, v.name
        assert v.scenario.workload == scn.workload
        assert not v.notes
    # The wait mode is the policy's: spin-block under SB; the job's own under gang.
    modes = {v.name: {j.wait.mode for j in workload.build(v.scenario)} for v in vs}
    assert modes["sb"] == {"spin-block"} and modes["gang"] == {"block", "spin"}


def test_a_variant_that_changes_the_jobs_says_so():
    scn = load(
        doc=_doc(
            [
                {"name": "same", "set": {"scheduler.params.mpl": 3}},
                {"name": "seed9", "set": {"workload.seed": 9}},
                {"name": "slow", "set": {"cluster.cpu_rate": 0.5}},
            ]
        )
    )
    same, seed9, slow = sweep.variants(scn)
    assert not same.notes
    assert seed9.notes == (
        "variant 'seed9' overrides workload.seed: its jobs are not the other variants' jobs",
    )
    assert _fingerprint(seed9.scenario) != _fingerprint(scn)
    assert (
        len(slow.notes) == 1
        and "jobs differ from the base scenario's (it sets cluster.cpu_rate)" in slow.notes[0]
    )


def _summary(resp, util, done=3, failed=0, killed=0, rejected=0):
    return {
        "scheduler": "x",
        "backend": "sim",
        "mean_response_time_s": resp,
        "mean_waiting_time_s": resp / 2 if resp is not None else None,
        "mean_slowdown": 1.5,
        "utilization": util,
        "makespan_s": 10.0,
        "energy_j": 12345.678,
        "jobs_by_state": {
            results.FinalState.COMPLETED: done,
            results.FinalState.FAILED: failed,
            results.FinalState.KILLED: killed,
            results.FinalState.REJECTED: rejected,
        },
    }


def _variants(reps=1):
    doc = _doc(
        [
            {"name": "batch", "set": {"scheduler.name": "batch", "scheduler.params": {}}},
            {"name": "gang", "set": {"scheduler.params.quantum_ms": 100}},
            {"name": "broken", "set": {"scheduler.name": "local"}},
        ]
    )
    doc["repetitions"] = reps
    return sweep.variants(load(doc=doc))


def test_comparison_csv_one_row_per_variant(tmp_path):
    vs = _variants()
    res = [
        comparison.VariantResult(vs[0], [_summary(4.0, 0.5)], comparison.VariantStatus.OK),
        comparison.VariantResult(
            vs[1],
            [
                {
                    **_summary(None, 0.25, done=0, killed=2, rejected=1),
                    "jobs_not_as_planned": [
                        {"job": "j1", "state": results.FinalState.KILLED, "reason": "interrupted (Ctrl-C)"},
                        {"job": "j2", "state": results.FinalState.KILLED, "reason": "interrupted (Ctrl-C)"},
                    ],
                }
            ],
            comparison.VariantStatus.OK,
        ),
        comparison.VariantResult(vs[2], [], comparison.VariantStatus.FAILED, "RuntimeError: boom"),
    ]
    rows = comparison.comparison_rows(res)
    comparison.write_csv(tmp_path / "c.csv", rows)
    with open(tmp_path / "c.csv") as fh:
        reader = csv.DictReader(fh)
        got = list(reader)
        cols = reader.fieldnames
    assert cols == [
        "variant",
        "scheduler.name",
        "scheduler.params",
        "scheduler.params.quantum_ms",
        "status",
        "repetitions",
        *comparison.METRICS,
        *comparison.JOB_STATES,
        "jobs_not_as_planned",
        "not_as_planned",
        "error",
    ]
    assert [r["variant"] for r in got] == ["batch", "gang", "broken"]
    b, g, x = got
    # Effective values of every overridden key, for every variant.
    assert (b["scheduler.name"], b["scheduler.params"], b["scheduler.params.quantum_ms"]) == (
        "batch",
        "{}",
        "",
    )
    assert (g["scheduler.name"], g["scheduler.params"]) == ("gang", '{"mpl":2,"quantum_ms":100}')
    assert x["scheduler.params"] == '{"mpl":2}'  # the gang quantum dropped for local
    assert b["mean_response_time_s"] == "4.0" and b["mean_waiting_time_s"] == "2.0"
    assert b["energy_j"] == "12345.678" and b["jobs_completed"] == "3" and b["jobs_failed"] == "0"
    assert b["jobs_not_as_planned"] == "0" and b["not_as_planned"] == ""
    assert g["jobs_not_as_planned"] == "2"
    assert g["not_as_planned"] == "job j1 was killed: interrupted (Ctrl-C) (and 1 more)"
    assert g["mean_response_time_s"] == "" and g["utilization"] == "0.25"
    assert (g["jobs_completed"], g["jobs_killed"], g["jobs_rejected"]) == ("0", "2", "1")
    assert (x["status"], x["repetitions"], x["error"], x["utilization"]) == (
        "failed",
        "0",
        "RuntimeError: boom",
        "",
    )
    # The same rows as a rich table.
    from rich.console import Console

    con = Console(width=200, record=True)
    con.print(comparison.table(got, title="t"))
    text = con.export_text()
    assert "batch" in text and "RuntimeError: boom" in text and "4.000 s" in text and "3/0/0/0" in text


def test_comparison_with_repetitions_has_mean_and_stdev():
    vs = _variants(reps=3)
    res = [
        comparison.VariantResult(
            vs[0], [_summary(r, 0.5, done=d) for r, d in ((1.0, 3), (2.0, 2), (4.0, 3))], "ok"
        )
    ]
    (row,) = comparison.comparison_rows(res)
    assert row["repetitions"] == 3
    assert row["mean_response_time_s"] == pytest.approx(7 / 3)
    assert row["mean_response_time_s_stdev"] == pytest.approx(statistics.stdev([1.0, 2.0, 4.0]))
    assert row["utilization_stdev"] == 0.0
    assert row["jobs_completed"] == pytest.approx(8 / 3) and row["jobs_completed_stdev"] > 0
    # One finished repetition: a mean but no stdev.
    (row,) = comparison.comparison_rows(
        [comparison.VariantResult(vs[1], [_summary(1.0, 0.5)], "failed", "x")]
    )
    assert row["mean_response_time_s"] == 1.0 and row["mean_response_time_s_stdev"] is None


def test_spread_columns_of_rates_are_not_metrics_of_their_own(tmp_path):
    """A per-class rate's name is open-ended (``bytes_per_s.<class>``): its ``_stdev`` and ``_ci95``
    columns are its spread, not more metrics with figures, table columns and plots of their own."""
    from testbed.results import report

    vs = _variants(reps=2)
    res = [
        comparison.VariantResult(
            v,
            [
                {**_summary(1.0 + k, 0.5), "reject_ratio": 0.1 * k, "bytes_per_s.divisible": 100.0 + k}
                for k in (1, 2)
            ],
            comparison.VariantStatus.OK,
        )
        for v in vs[:2]
    ]
    comparison.write_csv(tmp_path / "comparison.csv", comparison.comparison_rows(res))
    rows = comparison.read_csv(tmp_path / "comparison.csv")  # as the report reads it
    assert "bytes_per_s.divisible_stdev" in rows[0] and "bytes_per_s.divisible" + comparison.CI95 in rows[0]
    metrics = [k for k in rows[0] if comparison.is_metric(k)]
    assert "bytes_per_s.divisible" in metrics and "reject_ratio" in metrics
    assert not [m for m in metrics if m.endswith(comparison.SPREAD_SUFFIXES)], metrics
    ids = [fid for _, _, fid in report.sweep_figures(rows, report.sweep_axes(rows), report._Namer(tmp_path))]
    assert "fig-bytes_per_s.divisible" in ids
    assert not [i for i in ids if "stdev" in i or "ci95" in i], ids
    names = [p.name for p in comparison.plot(tmp_path / "plots", rows)]
    assert "bytes_per_s.divisible.png" in names
    assert not [n for n in names if "stdev" in n or "ci95" in n], names


def test_a_sweeps_closing_line_names_its_report(tmp_path, capsys):
    """`testbed run` of a sweep points to the page with the paper-style figures (`testbed report DIR`, a
    command to copy, whole on one line), not to the one-colour plots/*.png."""
    from testbed import cli

    vs = _variants()
    res = [comparison.VariantResult(v, [_summary(1.0, 0.5)], comparison.VariantStatus.OK) for v in vs]
    dest = tmp_path / ("a long folder name " * 4) / "my sweep"
    cli._report_sweep(vs[0].scenario, "sim", dest, comparison.comparison_rows(res))
    lines = capsys.readouterr().out.splitlines()
    want = f"comparison: {dest / 'comparison.csv'}; figures: testbed report '{dest}'"
    assert want in lines, lines
    assert not [ln for ln in lines if "plots" in ln], lines


def test_runner_records_a_failing_variant_and_goes_on(tmp_path, monkeypatch):
    calls = []

    def fake_run_once(scn, backend, run_dir, *a, **k):
        calls.append((scn.scheduler.name, run_dir))
        if scn.scheduler.name == "local":
            raise RuntimeError("boom")
        run_dir.mkdir(parents=True, exist_ok=True)
        return _summary(2.0, 0.5)

    monkeypatch.setattr(runner, "run_once", fake_run_once)
    monkeypatch.setattr(comparison, "plot", lambda out, rows, title="": [])  # plots: e2e test
    doc = _doc(
        [
            {"name": "a", "set": {"scheduler.name": "local"}},
            {"name": "b", "set": {"scheduler.name": "gang"}},
        ]
    )
    doc["repetitions"] = 2
    scn = load(doc=doc)
    notes = []
    rows = runner.run(scn, "sim", tmp_path, notice=notes.append)
    assert [(n, d.relative_to(tmp_path).as_posix()) for n, d in calls] == [
        ("local", "a/rep-1"),
        ("gang", "b/rep-1"),
        ("gang", "b/rep-2"),
    ]
    assert [(r["variant"], r["status"], r["repetitions"]) for r in rows] == [
        ("a", "failed", 0),
        ("b", "ok", 2),
    ]
    assert rows[0]["error"] == "RuntimeError: boom (repetition 1)"
    assert "boom" in (tmp_path / "a" / "error.txt").read_text()
    assert (tmp_path / "b" / "summaries.json").exists() and (tmp_path / "scenario.yaml").exists()
    assert len(comparison.read_csv(tmp_path / "comparison.csv")) == 2
    assert any("variant a failed" in n for n in notes) and any("quantum_ms dropped" in n for n in notes)


def test_ctrl_c_stops_the_sweep_and_still_writes_the_comparison(tmp_path, monkeypatch):
    def fake_run_once(scn, backend, run_dir, *a, **k):
        if scn.scheduler.name == "paired":
            raise KeyboardInterrupt
        return _summary(2.0, 0.5)

    monkeypatch.setattr(runner, "run_once", fake_run_once)
    monkeypatch.setattr(comparison, "plot", lambda out, rows, title="": [])
    scn = load(doc=_doc({"scheduler.name": ["gang", "paired", "batch"]}))
    with pytest.raises(KeyboardInterrupt):
        runner.run(scn, "sim", tmp_path)
    rows = comparison.read_csv(tmp_path / "comparison.csv")
    assert [(r["variant"], r["status"]) for r in rows] == [
        ("gang", "ok"),
        ("paired", "interrupted"),
        ("batch", "not run"),
    ]
    assert rows[0]["mean_response_time_s"] == "2.0" and rows[2]["mean_response_time_s"] == ""


def test_plots_are_written_from_rows(tmp_path):
    rows = [
        {"variant": "a", "status": "ok", "mean_response_time_s": 1.0, "mean_response_time_s_stdev": 0.2},
        {"variant": "b", "status": "failed", "mean_response_time_s": None},
    ]
    paths = comparison.plot(tmp_path, rows, "t")
    assert sorted(p.name for p in paths) == sorted([f"{m}.png" for m in comparison.METRICS] + ["jobs.png"])
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths)


@pytest.mark.parametrize(
    "metrics, shown",
    [
        # Paired share and per-class barrier rates (papers 002 and 003's paired gang).
        (
            {"quanta_paired_fraction": (0.0, 0.7), "barriers_per_s.io": (2.0, 7.5)},
            ["barriers/s, io", "7.500", "0.700"],
        ),
        # Local users' slowdown: what the parallel jobs cost the workstations' owners (paper 004).
        (
            {"local_slowdown_mean": (2.0, 1.41), "local_slowdown_max": (2.4, 1.5)},
            ["local users' slowdown, mean", "1.410", "2.400"],
        ),
    ],
)
def test_optional_metrics_are_compared_when_a_variant_has_them(tmp_path, metrics, shown):
    """An optional metric some variant has becomes a column, table rows and a plot; absent ones do not."""
    rows = [
        {"variant": v, "status": "ok", **{m: values[k] for m, values in metrics.items()}}
        for k, v in enumerate(("a", "b"))
    ]
    names = {p.name for p in comparison.plot(tmp_path, rows, "t")}
    assert {f"{m}.png" for m in metrics} <= names
    assert not {f"{m}.png" for m in comparison.OPTIONAL_METRICS if m not in metrics} & names
    assert comparison.metric_label("barriers_per_s.io") == "barriers/s, io"
    from rich.console import Console

    con = Console(record=True, width=200)
    con.print(comparison.table(rows))
    text = con.export_text()
    assert all(s in text for s in shown), text
