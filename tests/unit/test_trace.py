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
