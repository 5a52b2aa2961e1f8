"""How a run's jobs ended against what the scenario planned (the exit status of `testbed run`)."""

from __future__ import annotations

from testbed.core import events as ev
from testbed.results import summary as results


def _row(job, state, reason=""):
    return {"job_id": job, "final_state": state, "reason": reason}


def test_planned_ends_are_completed_rejected_and_killed_by_the_duration():
    rows = [
        _row("a", results.FinalState.COMPLETED),
        _row("b", results.FinalState.REJECTED, "size 9 above 8 nodes"),
        _row("c", results.FinalState.KILLED, ev.DURATION_REACHED),
        _row("d", results.FinalState.KILLED, f"{ev.DURATION_REACHED} before it started"),
        _row("e", results.FinalState.KILLED, f"{ev.POLICY_KILL}: over budget"),
        _row("f", results.FinalState.FAILED, f"node 3 went down ({ev.SCRIPTED_FAULT})"),
    ]
    assert results.unplanned(rows) == []


def test_errors_interrupts_and_jobs_left_queued_are_not_planned():
    rows = [
        _row("a", results.FinalState.FAILED, "rank 6 on node 6 failed: [Errno 2] No such file"),
        _row("b", results.FinalState.KILLED, "interrupted (Ctrl-C)"),
        _row("c", results.FinalState.NOT_STARTED),
        _row("d", results.FinalState.COMPLETED),
        _row("e", results.FinalState.FAILED, "node 3 went down (its agent died (ActorDiedError))"),
    ]
    bad = results.unplanned(rows)
    assert [b["job"] for b in bad] == ["a", "b", "c", "e"]
    assert [results.unplanned_line(b) for b in bad] == [
        "job a failed: rank 6 on node 6 failed: [Errno 2] No such file",
        "job b was killed: interrupted (Ctrl-C)",
        "job c never started",
        "job e failed: node 3 went down (its agent died (ActorDiedError))",
    ]


def test_a_started_job_without_an_end_was_killed_by_the_run_stopping():
    evs = [
        {"t": 0.0, "kind": ev.JOB_SUBMITTED, "job": "a", "size": 2},
        {"t": 0.1, "kind": ev.JOB_STARTED, "job": "a", "nodes": [0, 1]},
        {"t": 0.2, "kind": ev.JOB_SUBMITTED, "job": "b", "size": 2},
    ]
    rows = {r["job_id"]: r for r in results.job_rows(evs)}
    assert (rows["a"]["final_state"], rows["a"]["reason"]) == (
        results.FinalState.KILLED,
        results.NO_END_RECORDED,
    )
    assert rows["b"]["final_state"] == results.FinalState.NOT_STARTED  # still queued: it never started
    assert [b["job"] for b in results.unplanned(list(rows.values()))] == ["a", "b"]


def test_every_row_has_jobs_csvs_columns_in_their_order():
    # Tally.rows() writes its keys out by hand, in JOB_COLUMNS' order, and jobs.csv takes each value by
    # its column: a column the rows left out would be written empty, not refused.
    evs = [
        {"t": 0.0, "kind": ev.JOB_SUBMITTED, "job": "a", "size": 2},
        {"t": 0.1, "kind": ev.JOB_STARTED, "job": "a", "nodes": [0, 1]},
        {"t": 0.5, "kind": ev.JOB_FINISHED, "job": "a"},
        {"t": 0.2, "kind": ev.JOB_SUBMITTED, "job": "b", "size": 2},
    ]
    rows = results.job_rows(evs)
    assert [list(r) for r in rows] == [results.JOB_COLUMNS] * 2


def test_each_nodes_cpu_is_the_same_sum_before_and_after_a_record_wide_enough_for_numpy():
    # Narrow records are added in a loop, from the first record of WIDE_RECORD nodes on by numpy: the
    # same additions, in the same order, so the same doubles (and Python floats out).
    wide = results.WIDE_RECORD
    records = [([0, 1, 2], 0.1), ([1], 0.7), (list(range(wide + 3)), 0.3), ([2, wide + 5], 1e-17), ([1], 0.2)]
    evs = [{"t": 0.0, "kind": ev.JOB_SUBMITTED, "job": "a", "size": wide + 6}]
    evs += [{"t": 1.0, "kind": ev.PROC_EXITED, "job": "a", "nodes": n, "cpu_s": c} for n, c in records]
    t = results.tally(evs)
    want = [0.0] * (wide + 6)
    for nodes, cpu in records:
        for n in nodes:
            want[n] += cpu
    got = [t.node_cpu(n) for n in range(wide + 6)]
    assert got == want and all(type(v) is float for v in got)
    assert t.node_cpu(wide + 100) == 0.0
    assert sum(t.cpu_from(2)) == sum(want[2:])


def test_describe_error_is_one_line_with_where_it_was_raised():
    def policy():
        raise ZeroDivisionError("division by zero\nsecond line")

    try:
        policy()
    except ZeroDivisionError as exc:
        line = ev.describe_error(exc)
    assert line.startswith("ZeroDivisionError: division by zero second line (unit/test_results.py:")
    assert line.endswith(" in policy)") and "\n" not in line


def _ev(kind, t=0.0, **f):
    return {"t": t, "wall": t, "src": "x", "kind": kind, **f}


def test_reject_and_deadline_miss_ratios_overall_and_per_class():
    events = [
        _ev(ev.JOB_SUBMITTED, job="r1", job_class="rt", size=1),
        _ev(ev.JOB_SUBMITTED, job="r2", job_class="rt", size=1),
        _ev(ev.JOB_SUBMITTED, job="b1", job_class="be", size=1),
        _ev(ev.JOB_REJECTED, job="r2", reason="no room"),
        _ev(ev.JOB_STARTED, job="r1", nodes=[0, 1]),
        # r1's last stage (rank 1) counts deadlines as it goes; rank 0 reports none; counters only grow.
        _ev(ev.PROGRESS, 1.0, job="r1", rank=1, unit="deadlines_met", value=80),
        _ev(ev.PROGRESS, 1.0, job="r1", rank=1, unit="deadlines_missed", value=10),
        _ev(ev.PROGRESS, 2.0, job="r1", rank=1, unit="deadlines_met", value=90),
        _ev(ev.PROGRESS, 2.0, job="r1", rank=1, unit="deadlines_missed", value=30),
        _ev(ev.JOB_FINISHED, 2.0, job="r1"),
        _ev(ev.JOB_STARTED, job="b1", nodes=[2]),
        _ev(ev.JOB_FINISHED, 3.0, job="b1"),
    ]
    t = results.tally(events)
    got = t.ratios(t.rows())
    assert got == {
        "reject_ratio": 1 / 3,
        "reject_ratio.be": 0.0,
        "reject_ratio.rt": 0.5,
        "deadline_miss_ratio": 30 / 120,
        "deadline_miss_ratio.rt": 30 / 120,
    }


def test_no_deadline_ratio_without_deadlines_and_one_reject_ratio_for_one_class():
    events = [_ev(ev.JOB_SUBMITTED, job="a", job_class="compute", size=1), _ev(ev.JOB_REJECTED, job="a")]
    t = results.tally(events)
    assert t.ratios(t.rows()) == {"reject_ratio": 1.0}


def test_paper_000_figures_from_realtime_jobs_and_latency_samples():
    events = [
        # Two RT jobs (job_submitted says realtime), one turned away; two BE jobs, one still running.
        _ev(ev.JOB_SUBMITTED, job="r1", job_class="rt", size=2, realtime=True),
        _ev(ev.JOB_SUBMITTED, job="r2", job_class="rt", size=2, realtime=True),
        _ev(ev.JOB_SUBMITTED, 0.5, job="b1", job_class="be", size=1),
        _ev(ev.JOB_SUBMITTED, 1.0, job="b2", job_class="be", size=1),
        _ev(ev.JOB_REJECTED, 1.5, job="r2", reason="waited 1.5 s (its w)"),
        _ev(ev.JOB_STARTED, job="r1", nodes=[0, 1]),
        _ev(ev.JOB_STARTED, 0.5, job="b1", nodes=[2]),
        _ev(ev.JOB_STARTED, 1.0, job="b2", nodes=[3]),
        # Latency samples are one observation each (mean of 0.05, 0.07, 0.03), not a running total.
        _ev(ev.PROGRESS, 1.0, job="r1", rank=1, unit="frame_latency_s", value=0.05),
        _ev(ev.PROGRESS, 1.1, job="r1", rank=1, unit="frame_latency_s", value=0.07),
        _ev(ev.PROGRESS, 1.2, job="r1", rank=1, unit="frame_latency_s", value=0.03),
        _ev(ev.JOB_FINISHED, 2.0, job="r1"),
        _ev(ev.JOB_FINISHED, 4.5, job="b1"),  # response 4.0 s
    ]
    t = results.tally(events)
    got = t.ratios(t.rows())
    assert got["rt_rejected_ratio"] == 0.5
    assert got["be_mean_response_time_s"] == 4.0  # b2 never finished: not counted
    assert abs(got["frame_latency_s_mean.rt"] - 0.05) < 1e-12 and got["frame_latency_s_max.rt"] == 0.07
    assert not any(k.startswith("frame_latency_s_per_s") for k in t.progress_rates())


def test_rebuilding_a_simulated_run_streams_its_log_and_keeps_its_error(tmp_path, monkeypatch):
    """`testbed results` reads a simulated run's log once, as it streams, into one Tally (held whole, the
    100,000-job run's 1 GB log took 8.9 GB): the same jobs.csv and summary.json as the run wrote, and a
    run_error record, met on the way, still becomes the summary's error."""
    import json

    import orjson

    from testbed import runner
    from testbed.scenario import load

    doc = {
        "cluster": {"nodes": 4},
        "scheduler": {"name": "batch", "params": {"backfill": True}},
        "workload": {
            "seed": 2,
            "generator": {"count": 12, "mean_interarrival_s": 1, "duration": {"mean_s": 3}},
        },
    }
    out = tmp_path / "run"
    written = runner.run_once(load(doc=doc), "sim", out)
    jobs = (out / "jobs.csv").read_text()
    steps: list[str] = []  # "read" as the log yields a record, "add" as the Tally takes one
    real_read, real_add = ev.read_jsonl, results.Tally.add

    def reading(path):
        for e in real_read(path):
            steps.append("read")
            yield e

    def adding(self, e):
        steps.append("add")
        real_add(self, e)

    monkeypatch.setattr(ev, "read_jsonl", reading)
    monkeypatch.setattr(results.Tally, "add", adding)
    assert results.rebuild(out) == written
    assert (out / "jobs.csv").read_text() == jobs
    lines = (out / "events.jsonl").read_bytes().count(b"\n")
    assert steps == ["read", "add"] * lines  # each record tallied as it is read, once
    monkeypatch.setattr(results.Tally, "add", real_add)
    error = {"t": 99.0, "wall": 99.0, "src": "coordinator", "kind": ev.RUN_ERROR, "error": "boom"}
    with open(out / "events.jsonl", "ab") as fh:
        fh.write(orjson.dumps(error) + b"\n")
    assert results.rebuild(out)["error"] == "boom"
    assert json.loads((out / "summary.json").read_text())["error"] == "boom"
    assert (out / "jobs.csv").read_text() == jobs
