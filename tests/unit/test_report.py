"""The report's parts on hand-made event logs and rows: the timeline (running and stopped spans, the gang
matrix, the queue, utilisation whose mean is the summary's), the units a person reads, the sweep's axes
and readable labels (tests/e2e/test_report.py opens whole pages in Chromium)."""

from __future__ import annotations

import pytest
from matplotlib.container import ErrorbarContainer

from testbed.core import events as ev
from testbed.results import plots, report, timeline, units
from testbed.results.timeline import Cell, Segment


def _e(kind: str, t: float, **fields) -> dict:
    return {"t": t, "wall": t, "src": "x", "kind": kind, **fields}


def _gang_log() -> list[dict]:
    """Two jobs on node 0 of a 2-node cluster, in rows 0 and 1 of a gang matrix, switched every 0.1 s;
    job b also has a rank on node 1, which logs no switch before b comes (an idle node's skipped slots)."""
    log = [
        _e(ev.JOB_SUBMITTED, 0.0, job="a", size=1, job_class="cpu"),
        _e(ev.JOB_STARTED, 0.0, job="a", nodes=[0]),
        _e(ev.PROC_STARTED, 0.0, job="a", rank=0, node=0),
        _e(ev.JOB_SUBMITTED, 0.0, job="b", size=2, job_class="io"),
        _e(ev.SLOT_PLANNED, 0.0, slot=0, at=0.0, rows=[0]),
        _e(ev.SLOT_SWITCH, 0.0, node=0, slot=0, at=0.0, effect=0.0, jobs=["a"]),
        _e(ev.JOB_STARTED, 0.05, job="b", nodes=[0, 1]),
        _e(ev.PROC_STARTED, 0.05, job="b", rank=0, node=0),
        _e(ev.SLOT_PLANNED, 0.1, slot=1, at=0.1, rows=[1]),
        _e(ev.SLOT_SWITCH, 0.1, node=0, slot=1, at=0.1, effect=0.1, jobs=["b"]),
        _e(ev.PROC_STARTED, 0.15, job="b", rank=1, node=1),  # node 1 skipped slot 1's switch
        _e(ev.SLOT_PLANNED, 0.2, slot=2, at=0.2, rows=[0]),
        _e(ev.SLOT_SWITCH, 0.2, node=0, slot=2, at=0.2, effect=0.2, jobs=["a"]),
        _e(ev.SLOT_SWITCH, 0.2, node=1, slot=2, at=0.2, effect=0.2, jobs=[]),
        _e(ev.PROC_EXITED, 0.3, job="a", rank=0, node=0, cpu_s=0.2),
        _e(ev.JOB_FINISHED, 0.3, job="a"),
        _e(ev.SLOT_PLANNED, 0.3, slot=3, at=0.3, rows=[1]),
        _e(ev.SLOT_SWITCH, 0.3, node=0, slot=3, at=0.3, effect=0.3, jobs=["b"]),
        _e(ev.SLOT_SWITCH, 0.3, node=1, slot=3, at=0.3, effect=0.3, jobs=["b"]),
        _e(ev.PROC_EXITED, 0.4, job="b", rank=0, node=0, cpu_s=0.1),
        _e(ev.PROC_EXITED, 0.4, job="b", rank=1, node=1, cpu_s=0.1),
        _e(ev.JOB_FINISHED, 0.4, job="b"),
    ]
    return log


def test_gang_spans_running_and_stopped():
    tl = timeline.build(_gang_log(), nodes=2)
    assert tl.sliced and tl.jobs == ["a", "b"] and tl.job_class == {"a": "cpu", "b": "io"}
    node0 = [(s.job, s.t0, s.t1, s.running) for s in tl.segments if s.node == 0]
    assert sorted(node0) == [
        ("a", 0.0, 0.1, True),
        ("a", 0.1, 0.2, False),
        ("a", 0.2, 0.3, True),
        ("b", 0.05, 0.1, False),  # started in a's slot: stopped until its own
        ("b", 0.1, 0.2, True),
        ("b", 0.2, 0.3, False),
        ("b", 0.3, 0.4, True),
    ]
    # Node 1 logged no switch for slot 1: its rank runs as slot 1's jobs say on the nodes that logged it.
    node1 = [(s.t0, s.t1, s.running) for s in tl.segments if s.node == 1]
    assert node1 == [(0.15, 0.2, True), (0.2, 0.3, False), (0.3, 0.4, True)]


def test_gang_matrix_cells_end_with_their_job():
    tl = timeline.build(_gang_log(), nodes=2)
    assert Cell((0,), 0, ("a",), 0.0, 0.3) in tl.cells  # row 0 holds a until a ends, not until the run's end
    assert Cell((1,), 0, ("b",), 0.1, 0.4) in tl.cells
    assert [(t0, t1, rows) for t0, t1, rows in tl.active] == [
        (0.0, 0.1, (0,)),
        (0.1, 0.2, (1,)),
        (0.2, 0.3, (0,)),
        (0.3, 0.4, (1,)),
    ]


def test_utilisation_mean_is_the_summarys():
    tl = timeline.build(_gang_log(), nodes=2)
    util = tl.utilisation(0.0, 0.4, 8, capacity=2.0)
    # CPU 0.4 s over 2 nodes x 0.4 s: 50 %, as summary.json computes it.
    assert sum(u for _, u in util) / len(util) == pytest.approx(0.4 / (2 * 0.4))
    # a's 0.2 s of CPU over its 0.2 s of running: node 0 fully busy in [0, 0.05) -> 50 % of the cluster.
    assert util[0] == (0.0, pytest.approx(0.5))


def test_queue_and_running_counts():
    log = [
        _e(ev.JOB_SUBMITTED, 0.0, job="a", size=1),
        _e(ev.JOB_SUBMITTED, 1.0, job="b", size=1),
        _e(ev.JOB_REJECTED, 1.5, job="c_unknown"),
        _e(ev.JOB_STARTED, 2.0, job="a", nodes=[0]),
        _e(ev.JOB_REQUEUED, 3.0, job="a", reason="node down"),
        _e(ev.JOB_STARTED, 4.0, job="b", nodes=[0]),
        _e(ev.JOB_FINISHED, 5.0, job="b"),
    ]
    tl = timeline.build(log, nodes=1)
    assert tl.queued == [(0.0, 1), (1.0, 2), (1.5, 2), (2.0, 1), (3.0, 2), (4.0, 1), (5.0, 1)]
    assert tl.running == [(0.0, 0), (1.0, 0), (1.5, 0), (2.0, 1), (3.0, 0), (4.0, 1), (5.0, 0)]


def test_without_slots_a_process_runs_from_start_to_exit():
    log = [
        _e(ev.JOB_SUBMITTED, 0.0, job="a", size=1),
        _e(ev.PROC_STARTED, 1.0, job="a", rank=0, node=0),
        _e(ev.PROC_STARTED, 1.0, job="a", rank=1, node=5),  # a head process: outside the cluster
        _e(ev.PROC_EXITED, 3.0, job="a", rank=0, node=0, cpu_s=2.0),
    ]
    tl = timeline.build(log, nodes=1)
    assert not tl.sliced and tl.segments == [Segment(0, "a", 0, 1.0, 3.0, True)]


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        ("energy_j", 13413.04, "13.4 kJ"),
        ("energy_j", 7.49e8, "749 MJ"),
        ("utilization", 0.5575, "55.8 %"),
        ("mean_response_time_s", 1.0, "1.00 s"),
        ("mean_response_time_s", 0.0123, "12.3 ms"),
        ("makespan_s", 22454.0, "22,454 s"),
        ("mean_slowdown", 1.0187, "1.02"),
        ("gang_skew_ms_p99", 0.19, "0.190 ms"),
        ("barriers_per_s.io", 41.3, "41.3/s"),
        ("jobs_rejected", 3, "3"),
        ("jobs.compute", 5, "5"),
        ("cpu_rate_error_max", None, "-"),
    ],
)
def test_values_read_with_their_units(key, value, text):
    assert units.show(key, value) == text


def test_metric_names_carry_their_unit_once():
    spread = units.scale_for("finish_spread_s", [3.0])
    assert units.axis_label("finish_spread_s", spread) == "finish spread (s)"
    assert units.axis_label("energy_j", units.scale_for("energy_j", [7.49e5])) == "energy (kJ)"
    assert units.axis_label("reject_ratio", units.scale_for("reject_ratio", [0.2])) == "reject ratio (%)"


def test_swept_keys_become_axes_and_readable_labels(tmp_path):
    rows = [
        {"variant": f"v{i}", "scheduler": s, "scheduler.params.admission": a, "workload.divisible.load": x,
         "workload.generator.classes.1.weight": w, "status": "ok", "reject_ratio": "0.1"}
        for i, (s, a, x, w) in enumerate(
            [('{"name": "1gs"}', "true", "0.5", "0.1111"), ('{"name": "2dcs-ps"}', "false", "1.0", "9.0")]
        )
    ]  # fmt: skip
    axes = report.sweep_axes(rows)
    assert [(a.key, a.numeric) for a in axes] == [
        ("scheduler", False),
        ("scheduler.params.admission", False),
        ("workload.divisible.load", True),
        ("workload.generator.classes.1.weight", False),  # a mix, not a number to draw a line along
    ]
    scn = tmp_path / "v0" / "scenario.yaml"
    scn.parent.mkdir()
    scn.write_text(
        "name: m\nworkload:\n  generator:\n    count: 2\n    mean_interarrival_s: 1\n    classes:\n"
        "      - {name: rt, weight: 1.0}\n      - {name: be, weight: 0.1111}\n"
    )
    name = report._Namer(tmp_path)
    assert name("scheduler", {"name": "1gs", "params": {}}) == "1gs"
    assert name("scheduler.params.admission", True) == "admission on"
    assert name("workload.generator.classes.1.weight", 0.1111) == "RT:BE 9:1"
    assert name("workload.generator.classes.1.weight", 9.0) == "RT:BE 1:9"
    assert name("workload.generator.classes.1.weight", 0.5) == "RT:BE 2:1"
    assert name("scheduler.params.quantum_ms", 100) == "quantum (ms) 100"


def test_warnings_for_figures_not_to_trust():
    ok = {"cpu_rate_error_max": 0.01, "cpu_rate_fixed": True, "envelope": "cgroup-v2", "error": None}
    assert report.run_warnings(ok) == []
    texts = [t for t, _ in report.run_warnings({**ok, "cpu_rate_error_max": 0.32})]
    assert len(texts) == 1 and "32.0%" in texts[0]
    texts = [t for t, _ in report.run_warnings({**ok, "envelope": "none", "cpu_rate_fixed": False})]
    assert len(texts) == 1 and "'none'" in texts[0] and "not fixed" in texts[0]


def test_a_folder_the_report_cannot_read_is_named_with_its_fix(tmp_path):
    run = tmp_path / "killed"
    (run / "events").mkdir(parents=True)
    (run / "events" / "coordinator.jsonl").write_text("")
    (run / "summary.json").write_text("{}")
    (run / "scenario.yaml").write_text(
        "name: k\nworkload:\n  jobs: [{id: a, size: 1, app: {iterations: 1}}]\n"
    )
    with pytest.raises(report.ReportError, match=r"no events.jsonl .* `testbed results .*killed`"):
        report.page(run)
    (run / "summary.json").unlink()
    with pytest.raises(report.ReportError, match=r"no summary.json; rebuild it with `testbed results"):
        report.page(run)
    with pytest.raises(report.ReportError, match="no such folder"):
        report.page(tmp_path / "nowhere")


@pytest.fixture
def drawn(monkeypatch):
    """The axes of every figure plots.py draws, kept as it turns them into SVG."""
    kept, to_svg = [], plots.svg

    def keep(fig):
        kept.append(fig.axes[0])
        return to_svg(fig)

    monkeypatch.setattr(plots, "svg", keep)
    return kept


def _sweep_figures(metric: str, ys: list[float], errs: list[float | None]) -> list[str]:
    """The metric as the report draws a sweep: a line against a numeric axis, a bar per variant, bars
    grouped by mix."""
    return [
        plots.lines(metric, "load", [plots.Line("mcdf", [0.25, 1.0], ys, errs)], "95 % CI", "scheduler"),
        plots.bars(metric, ["a", "b"], ys, errs, "95 % CI"),
        plots.grouped_bars(
            metric, ["9:1", "1:9"], "mix", [plots.Line("mcdf", [0, 1], ys, errs)], "95 % CI", ""
        ),
    ]


def _tick_labels(ax) -> list[str]:
    return [t.get_text() for t in ax.get_yticklabels()]


@pytest.mark.parametrize("metric", ["reject_ratio", "energy_j", "mean_response_time_s"])
def test_an_all_zero_metric_reads_as_zero(drawn, metric):
    """Not matplotlib's -0.06..0.06 around a flat line: an axis from 0, saying every value is 0."""
    svgs = _sweep_figures(metric, [0.0, 0.0], [None, None])
    assert len(drawn) == 3
    for ax, svg in zip(drawn, svgs, strict=True):
        assert ax.get_ylim() == (0.0, 1.0)
        assert _tick_labels(ax)[0] in ("0", "0.0") and not any("\u2212" in t for t in _tick_labels(ax))
        assert "all values 0" in svg


def _bar_ends(ax) -> list[float]:
    """Where every error bar ends, in the axis's unit (the vertical segments matplotlib draws)."""
    ends = []
    for c in ax.containers:
        errorbar = c if isinstance(c, ErrorbarContainer) else getattr(c, "errorbar", None)
        if errorbar is None:
            continue
        for coll in errorbar.lines[2]:
            ends += [y for seg in coll.get_segments() for _, y in seg]
    return ends


def test_error_bars_of_a_fraction_stay_between_0_and_100_percent(drawn):
    # Two repetitions: a 95 % half-width of 12.7 x the stdev runs far past a ratio's range.
    _sweep_figures("reject_ratio", [0.05, 0.9], [0.2, 0.4])
    for ax in drawn:
        ends = _bar_ends(ax)
        assert ends and min(ends) == pytest.approx(0.0) and max(ends) == pytest.approx(100.0)
        assert pytest.approx(25.0) in ends  # 5 % + 20 % above; below, cut at 0
        assert ax.get_ylim()[1] <= 110.0, ax.get_ylim()
    assert units.error_span("reject_ratio.rt", 0.9, 0.4) == pytest.approx((0.4, 0.1))
    # A time has no upper bound: its bars reach as far as the interval does.
    drawn.clear()
    _sweep_figures("mean_response_time_s", [5.0, 90.0], [20.0, 40.0])
    for ax in drawn:
        assert max(_bar_ends(ax)) == pytest.approx(130.0) and min(_bar_ends(ax)) == pytest.approx(-15.0)
