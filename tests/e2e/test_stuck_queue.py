"""A queue that can never move again on real processes (issue 24): after a node goes down for good, a
job wider than the nodes still up ends the run with one line naming the job and why (the simulator's
side: tests/unit/test_stuck_queue.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from testbed.emulator.mechanism import hostmem

from .conftest import wait_clean

pytestmark = pytest.mark.extended  # a real run: Ray's start-up alone is most of a minute on 2 cores

DOC = {
    "name": "stuck-real",
    "cluster": {"nodes": 4},
    "clock": {"rate_probe_s": 0.3},
    "scheduler": {"name": "batch"},
    "monitoring": {"enabled": False},
    "workload": {
        "jobs": [
            {"id": "a", "size": 2, "app": {"iterations": 10, "gcomp": 50}},
            {"id": "wide", "size": 4, "submit_s": 1},
        ]
    },
    "faults": {"script": [{"at_s": 0.5, "node": 3, "kind": "down"}]},
}


def test_a_job_too_wide_for_the_nodes_left_ends_a_real_run_naming_it(tmp_path):
    path = tmp_path / "stuck.yaml"
    path.write_text(yaml.safe_dump(DOC))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(path), "--out", str(out), "-q"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    why = (
        "job wide can never start: it needs 4 nodes and 3 of 4 are up (node(s) 3 went down and no fault "
        "brings them back)"
    )
    assert p.returncode == 1, p.stdout + p.stderr
    # The one line besides the error may be the host's own memory warning (a VM that returns freed memory
    # to its hypervisor at once, as CI's does): it says something true of the host, not of this run.
    lines = [ln for ln in p.stderr.strip().splitlines() if ln != hostmem.page_reporting_note()]
    assert lines == [f"error: the run ended with an error: {why}"], p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["error"] == why and s["jobs_by_state"]["COMPLETED_SUCCESSFULLY"] == 1
    assert wait_clean(out) == ([], [])
