"""What a simulated trace replay imports: numpy only where a workload or a result needs it (its import is
0.14 s of the NASA replay's 2 s of CPU, issue 23's comparison with AccaSim)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REPLAY = """
import sys
from testbed.core import events as ev
from testbed.results import summary as results
from testbed.scenario import load
from testbed.scenario.workload import build
jobs = build(load("scenarios/trace-nasa.yaml", ["workload.trace.count=50"]))
assert len(jobs) == 50
t = results.tally([
    {"t": 0.0, "kind": ev.JOB_SUBMITTED, "job": "a", "size": 128},
    {"t": 1.0, "kind": ev.PROC_EXITED, "job": "a", "nodes": list(range(128)), "cpu_s": 1.0},
])
assert t.node_cpu(127) == 1.0
print("numpy" in sys.modules)
"""


def test_a_trace_and_its_tally_of_narrow_jobs_leave_numpy_unimported():
    out = subprocess.run([sys.executable, "-c", REPLAY], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
