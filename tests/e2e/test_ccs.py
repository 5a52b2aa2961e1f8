"""Paper 004's CCS on real processes (issue 22): a local user's session and a CPU-bound parallel job share
a node, and CCS gives the parallel process L of the CPU and the session 1 - L (CFS weights through nice
values, schedulers/ccs.py), where native local scheduling halves it; the LOCAL and NO_LOCAL events go from
the user's node to the job's other node, in the log of both backends."""

from __future__ import annotations

import copy
import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

L = 0.3
#: A session that always computes (cpu_fraction 1) beside a parallel rank that always computes: the session
#: gets 1 - L of the node under CCS (slowdown about 1 / 0.7), half under local scheduling (slowdown 2).
SCENARIO = {
    "name": "ccs-share",
    "cluster": {"nodes": 2},
    "clock": {"tdf": 2},
    "scheduler": {"name": "ccs", "params": {"share_l": L}},
    "workload": {
        "jobs": [
            # No barrier: a rank that never sleeps, so what is measured is the share the weights give.
            # With a barrier each iteration the kernel gives the waking rank more than its weight (below).
            {
                "id": "par",
                "size": 2,
                "app": {"kind": "synthetic", "iterations": 60, "gcomp": 40, "barrier": False},
            },
            {
                "id": "user",
                "size": 1,
                "app": {
                    "kind": "localuser",
                    "profile": "cpu",
                    "cpu_fraction": 1.0,
                    "session_s": 1.5,
                    "node": 0,
                },
            },
        ]
    },
}
#: Real against simulated session slowdown under CCS. Measured 1.415, 1.418 and 1.489 real against 1.413
#: simulated (3 runs, load average 5.8-6 on this 2-core host); 10 % bounds what was seen.
TOLERANCE = 0.10


def _run(path: Path, out: Path, backend: str) -> tuple[dict, list[dict]]:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            str(path),
            "--out",
            str(out),
            "-q",
            "--backend",
            backend,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out / "jobs.csv") as fh:
        rows = {r["job_id"]: r for r in csv.DictReader(fh)}
    with open(out / "events.jsonl") as fh:
        events = [json.loads(line) for line in fh]
    return rows, events


def test_ccs_gives_a_local_user_its_share_on_real_processes_as_in_the_simulator(tmp_path):
    path = tmp_path / "ccs.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    slowdown, coop = {}, {}
    for backend in ("sim", "ray"):
        rows, events = _run(path, tmp_path / backend, backend)
        assert rows["par"]["final_state"] == rows["user"]["final_state"] == "COMPLETED_SUCCESSFULLY", rows
        slowdown[backend] = float(rows["user"]["local_slowdown"])
        coop[backend] = [(e["kind"], e["node"], e["event"]) for e in events if e["kind"].startswith("coop_")]
    print(f"session slowdown under CCS, L = {L}: {slowdown}")
    # The simulator: 1 / (1 - L) to within a nice value's step of CFS weight.
    assert slowdown["sim"] == pytest.approx(1 / (1 - L), rel=0.05)
    assert slowdown["ray"] == pytest.approx(slowdown["sim"], rel=TOLERANCE)
    assert slowdown["ray"] < 1.8  # local scheduling's is 2: the session is really protected
    expected = [("coop_sent", 0, "Local"), ("coop_received", 1, "Local")]
    expected += [("coop_sent", 0, "NoLocal"), ("coop_received", 1, "NoLocal")]
    assert coop["sim"] == expected
    assert sorted(coop["ray"]) == sorted(expected)


@pytest.mark.extended
@pytest.mark.xfail(
    strict=False,
    reason="a parallel rank that sleeps in a barrier every iteration gets more than its CFS weight on this "
    "kernel (6.18, EEVDF; how it places a waking task is the likely cause, not yet shown), so the "
    "session's slowdown is 1.69-2.00 real against 1.41 simulated (4 runs, load 0.5-3); the simulator "
    "models weights only "
    "(docs/measurements.md, 'CFS weights against frequent wake-ups')",
)
def test_a_rank_that_waits_often_gets_its_weight_on_real_processes_as_in_the_simulator(tmp_path):
    doc = copy.deepcopy(SCENARIO)
    doc["workload"]["jobs"][0]["app"]["barrier"] = True
    path = tmp_path / "ccs-barrier.yaml"
    path.write_text(yaml.safe_dump(doc))
    slowdown = {b: float(_run(path, tmp_path / b, b)[0]["user"]["local_slowdown"]) for b in ("sim", "ray")}
    print(f"session slowdown under CCS beside a barrier job, L = {L}: {slowdown}")
    assert slowdown["ray"] == pytest.approx(slowdown["sim"], rel=TOLERANCE)
