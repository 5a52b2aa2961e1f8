"""SWF trace replay (testbed/scenario/swf.py, workload.trace): the shipped NASA log read as the archive
describes
it, scaled as the scenario says, and bad traces refused naming the file and line."""

from __future__ import annotations

from pathlib import Path

import pytest
from testbed.apps.synthetic import Synthetic

from testbed.scenario import ScenarioError, load, swf
from testbed.scenario.workload import build

NASA = Path(__file__).resolve().parents[2] / "scenarios" / "traces" / "NASA-iPSC-1993-3.1-cln.swf.gz"


def test_the_nasa_log_reads_as_its_header_says():
    head = swf.header(NASA)
    assert head["MaxProcs"] == "128" and head["MaxJobs"] == "42264"
    jobs = list(swf.read(NASA))
    assert len(jobs) == 18239  # the cleaned log's job lines
    assert max(j.procs for j in jobs) == 128 and min(j.procs for j in jobs) == 1
    assert all(j.run >= 0 for j in jobs)


def _scn(tmp_path, **trace):
    doc = {
        "cluster": {"nodes": 64},
        "scheduler": {"name": "batch"},
        "workload": {"trace": {"path": str(NASA), **trace}},
    }
    return load(doc=doc)


def test_replayed_jobs_keep_the_traces_shape_scaled(tmp_path):
    raw = [j for j in swf.read(NASA) if j.run > 0 and j.procs > 0][5:25]
    jobs = build(
        _scn(tmp_path, skip=5, count=20, time_scale=0.5, arrival_scale=0.1, step_s=30, oversize="clamp")
    )
    assert {j.job_id for j in jobs} == {f"t{r.job}" for r in raw}  # ids are the trace's job numbers
    by_id = {j.job_id: j for j in jobs}
    t0 = raw[0].submit
    for r in raw:
        j = by_id[f"t{r.job}"]
        assert j.spec.submit_time == pytest.approx((r.submit - t0) * 0.5 * 0.1)
        assert j.spec.size == min(64, r.procs)  # clamped to the cluster, as asked
        run = r.run * 0.5
        assert Synthetic.ideal_runtime(j.app) == pytest.approx(run)  # the recorded run time, exactly
        assert j.app.iterations == max(1, -(-run // 30))  # in steps of at most 30 s
        assert j.spec.estimate == (pytest.approx(r.req_time * 0.5) if r.req_time else pytest.approx(run))
        assert j.spec.job_class == "trace"


def test_sizes_scale_and_estimates_can_be_withheld(tmp_path):
    jobs = build(_scn(tmp_path, count=200, size_scale=0.25, estimate="none"))
    assert all(1 <= j.spec.size <= 32 and j.spec.estimate is None for j in jobs)


def test_a_missing_or_bad_trace_is_refused_naming_the_field_or_line(tmp_path):
    with pytest.raises(ScenarioError, match=r"workload.trace.path: no file .*nope.swf; give an SWF trace"):
        load(doc={"workload": {"trace": {"path": str(tmp_path / "nope.swf")}}})
    bad = tmp_path / "bad.swf"
    bad.write_text("; MaxProcs: 4\n1 0 -1 10 2 -1 -1 2 20 -1 1 1 1 1 1 1 -1 -1\n2 5 -1 10 2\n")
    with pytest.raises(swf.TraceError, match=r"bad.swf:3: 5 fields, an SWF job line has 18"):
        list(swf.read(bad))


def _swf(tmp_path) -> Path:
    """Four jobs: 1 completed on 2 processors, 2 failed (status 0) on 4, 3 completed on 32, 4 cancelled
    (status 5) on 1."""
    p = tmp_path / "small.swf"
    rows = [(1, 0, 2, 1), (2, 5, 4, 0), (3, 9, 32, 1), (4, 12, 1, 5)]
    lines = [f"{j} {t} -1 10 {n} -1 -1 {n} 20 -1 {st} 1 1 1 1 1 -1 -1" for j, t, n, st in rows]
    p.write_text("; MaxProcs: 32\n" + "\n".join(lines) + "\n")
    return p


def _small(tmp_path, **trace):
    doc = {"cluster": {"nodes": 8}, "scheduler": {"name": "batch"}}
    return load(doc={**doc, "workload": {"trace": {"path": str(_swf(tmp_path)), **trace}}})


def test_a_trace_job_wider_than_the_cluster_is_refused_unless_clamped_dropped_or_rejected(tmp_path):
    from testbed import runner
    from testbed.core.backend import PreflightError
    from testbed.scenario.workload import trace_notes

    with pytest.raises(swf.TraceError, match=r"1 job\(s\) wider than the cluster's 8 nodes, the first job 3"):
        build(_small(tmp_path))
    with pytest.raises(PreflightError, match=r"^workload.trace: 1 job\(s\) wider .*oversize: clamp, drop"):
        runner.preflight(_small(tmp_path), "sim", tmp_path / "out")
    sizes = {j.job_id: j.spec.size for j in build(_small(tmp_path, oversize="clamp"))}
    assert sizes == {"t1": 2, "t2": 4, "t3": 8, "t4": 1}
    assert "t3" not in {j.job_id for j in build(_small(tmp_path, oversize="drop"))}
    assert {j.job_id: j.spec.size for j in build(_small(tmp_path, oversize="reject"))}["t3"] == 32
    notes = runner.preflight(_small(tmp_path, oversize="clamp"), "sim", tmp_path / "out")
    assert notes == ["workload.trace.oversize clamp: 1 trace job(s) wider than 8 nodes clamped to 8 nodes"]
    assert trace_notes(_small(tmp_path, oversize="drop"))[0].endswith("wider than 8 nodes dropped")


def test_a_trace_is_filtered_by_its_status_field(tmp_path):
    from testbed.scenario.workload import trace_notes

    kept = build(_small(tmp_path, status=[1], oversize="drop"))
    assert [j.job_id for j in kept] == ["t1"]
    assert [j.job_id for j in build(_small(tmp_path, status=[0, 5]))] == ["t2", "t4"]
    assert trace_notes(_small(tmp_path, status=[1]))[0] == (
        "workload.trace.status [1]: 2 of the trace's 4 jobs left out by status"
    )


def test_a_listed_job_wider_than_the_cluster_is_refused_unless_rejection_is_asked():
    doc = {"cluster": {"nodes": 16}, "workload": {"jobs": [{"size": 4}, {"id": "big", "size": 17}]}}
    with pytest.raises(ScenarioError) as exc:
        load(doc=doc)
    assert str(exc.value) == (
        "invalid scenario: workload.jobs.1.size: 17 is above cluster.nodes (16), so the job can never run; "
        "lower it, add nodes, or set workload.oversize: reject to have the scheduler reject it"
    )
    assert (
        load(doc={**doc, "workload": {**doc["workload"], "oversize": "reject"}}).workload.jobs[1].size == 17
    )


def test_a_trace_out_of_submission_order_is_replayed_sorted_with_a_note(tmp_path):
    from testbed.scenario.workload import trace_notes

    p = tmp_path / "shuffled.swf"
    # Arrivals 10, 19, 15, 22, 13 in file order: the third and the fifth arrive before a job above them.
    rows = [(1, 10), (2, 19), (3, 15), (4, 22), (5, 13)]
    lines = [f"{j} {t} -1 10 2 -1 -1 2 20 -1 1 1 1 1 1 1 -1 -1" for j, t in rows]
    p.write_text("; MaxProcs: 8\n" + "\n".join(lines) + "\n")
    doc = {"cluster": {"nodes": 8}, "scheduler": {"name": "batch"}, "workload": {"trace": {"path": str(p)}}}
    scn = load(doc=doc)
    jobs = build(scn)
    assert [(j.job_id, j.spec.submit_time) for j in jobs] == [
        ("t1", 0.0),
        ("t5", 3.0),
        ("t3", 5.0),
        ("t2", 9.0),
        ("t4", 12.0),
    ]  # from the earliest arrival, never negative, in arrival order
    assert trace_notes(scn) == [
        "workload.trace: 2 trace job(s) out of submission order: replayed sorted by arrival"
    ]
    assert trace_notes(_small(tmp_path)) == []  # a trace in order gets no such note
