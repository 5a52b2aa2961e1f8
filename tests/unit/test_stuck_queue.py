"""A queue that can never move again (issue 24): after a node goes down for good, a job wider than the
nodes still up ends the run with one line naming the job and why, not a stall blamed on every job."""

from __future__ import annotations

import json

import pytest

from testbed import runner
from testbed.scenario import load

DOC = {
    "name": "stuck",
    "cluster": {"nodes": 4},
    "scheduler": {"name": "batch"},
    "workload": {
        "jobs": [
            {"id": "a", "size": 2, "app": {"iterations": 20}},
            {"id": "wide", "size": 4, "submit_s": 1},
            {"id": "c", "size": 1, "submit_s": 1.5},
        ]
    },
    "faults": {"script": [{"at_s": 0.5, "node": 3, "kind": "down"}]},
}
WHY = (
    "job wide can never start: it needs 4 nodes and 3 of 4 are up (node(s) 3 went down and no fault brings "
    "them back)"
)


def test_a_job_too_wide_for_the_nodes_left_ends_the_run_naming_it(tmp_path):
    with pytest.raises(runner.RunFailed) as exc:
        runner.run(load(doc=DOC), "sim", tmp_path / "out")
    assert str(exc.value) == WHY
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["error"] == WHY and s["ended"] == WHY
    assert s["jobs_by_state"]["COMPLETED_SUCCESSFULLY"] == 1  # the job that had started ended as it should


def test_the_same_jobs_with_the_node_back_run_to_the_end(tmp_path):
    back = {**DOC, "faults": {"script": [*DOC["faults"]["script"], {"at_s": 3, "node": 3, "kind": "up"}]}}
    summaries = runner.run(load(doc=back), "sim", tmp_path / "out")
    assert summaries[0]["error"] is None and summaries[0]["jobs_by_state"]["COMPLETED_SUCCESSFULLY"] == 3
