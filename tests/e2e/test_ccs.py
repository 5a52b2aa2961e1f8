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
            # No barrier: a rank that never sleeps (the second test adds one).
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
#: Real against simulated session slowdown under CCS. Measured with the node pinned while weighted (the
#: agent's _place_weighted): 1.411-1.424 real (3 runs, quiet host) and 1.481 with a busy process beside,
#: against 1.413 simulated; 10 % bounds what was seen. Unpinned it was 1.42-2.00: weights act on one
#: run-queue only (docs/measurements.md, "CFS weights under a quota on several CPUs").
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
    slowdown, coop, alone = {}, {}, {}
    for backend in ("sim", "ray"):
        rows, events = _run(path, tmp_path / backend, backend)
        assert rows["par"]["final_state"] == rows["user"]["final_state"] == "COMPLETED_SUCCESSFULLY", rows
        slowdown[backend] = float(rows["user"]["local_slowdown"])
        # The parallel job's reference alone on a dedicated cluster, as the results derive its slowdown.
        alone[backend] = float(rows["par"]["execution_time"]) / float(rows["par"]["parallel_slowdown"])
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
    # Simulated for both backends from the same job: 60 x 40 ms of CPU at rate 1 (jobs.csv's 6 decimals).
    assert alone["sim"] == pytest.approx(2.4, rel=1e-5) and alone["ray"] == pytest.approx(2.4, rel=1e-5)


@pytest.mark.extended  # 18 s more of the default run for the same mechanism as the test above
def test_a_rank_that_waits_often_gets_its_weight_on_real_processes_as_in_the_simulator(tmp_path):
    """A rank that sleeps in a barrier every 40 ms of compute: measured 1.407-1.415 real (3 runs, quiet
    host) and 1.403 with a busy process beside, against 1.413 simulated."""
    doc = copy.deepcopy(SCENARIO)
    doc["workload"]["jobs"][0]["app"]["barrier"] = True
    path = tmp_path / "ccs-barrier.yaml"
    path.write_text(yaml.safe_dump(doc))
    slowdown = {b: float(_run(path, tmp_path / b, b)[0]["user"]["local_slowdown"]) for b in ("sim", "ray")}
    print(f"session slowdown under CCS beside a barrier job, L = {L}: {slowdown}")
    assert slowdown["ray"] == pytest.approx(slowdown["sim"], rel=TOLERANCE)


#: Memory (rules 3-5): two 100 MB nodes, M_D = 100 x 0.5 = 50 MB. The parallel job's processes hold 60 MB
#: each and a session of 50 MB arrives on node 0 at 0.5 s: node 0 swaps (110 > 100) with its parallel
#: process over M_D, so CCS stops it (STOP to node 1) and lets it run again when the session ends
#: (RESUME). Every figure is really allocated and touched by the workers.
MEMORY = {
    "name": "ccs-memory",
    "cluster": {"nodes": 2, "memory_mb": 100},
    "clock": {"tdf": 2},
    "scheduler": {"name": "ccs", "params": {"share_l": 0.5}},
    "workload": {
        "jobs": [
            {
                "id": "par",
                "size": 2,
                "memory_mb": 60,
                "app": {"kind": "synthetic", "iterations": 30, "gcomp": 40, "barrier": False},
            },
            {
                "id": "user",
                "size": 1,
                "submit_s": 0.5,
                "app": {"kind": "localuser", "profile": "xwin", "memory_mb": 50, "session_s": 1.0, "node": 0},
            },
        ]
    },
}


@pytest.mark.extended  # 40 s: both backends, real workers holding their memory
def test_ccs_stops_its_swapping_task_on_real_processes_as_in_the_simulator(tmp_path):
    path = tmp_path / "mem.yaml"
    path.write_text(yaml.safe_dump(MEMORY))
    coop, stopped = {}, {}
    for backend in ("sim", "ray"):
        rows, events = _run(path, tmp_path / backend, backend)
        assert rows["par"]["final_state"] == rows["user"]["final_state"] == "COMPLETED_SUCCESSFULLY", rows
        coop[backend] = [(e["kind"], e["node"], e["event"]) for e in events if e["kind"].startswith("coop_")]
        # Stopped, the swapping task's memory is out: no node needs more than it has at any time.
        assert not [e for e in events if e["kind"] == "node_paging" and e["factor"] < 1], backend
        stopped[backend] = float(rows["par"]["execution_time"])
    expected = [("coop_sent", 0, "Local"), ("coop_sent", 0, "Stop")]
    expected += [("coop_received", 1, "Local"), ("coop_received", 1, "Stop")]
    expected += [("coop_sent", 0, "NoLocal"), ("coop_sent", 0, "Resume")]
    expected += [("coop_received", 1, "NoLocal"), ("coop_received", 1, "Resume")]
    assert sorted(coop["sim"]) == sorted(expected) and sorted(coop["ray"]) == sorted(expected)
    # The job waited out the session on both backends: 1.2 s of CPU a rank, plus about the session's 1 s.
    assert stopped["sim"] > 2.0 and stopped["ray"] > 2.0, stopped


@pytest.mark.extended  # 30 s on real processes
def test_a_real_node_over_its_memory_is_logged_and_warned_about_not_paged(tmp_path):
    # Under local scheduling nothing is stopped: node 0 needs 110 MB of its 100 while the session runs.
    # The simulator slows it (the paging model); real processes cannot page here, and the run says so.
    doc = copy.deepcopy(MEMORY)
    doc["scheduler"] = {"name": "local", "params": {"mpl": 2}}
    path = tmp_path / "mem.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "ray"
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(path), "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "paging is not emulated on real processes" in p.stderr
    with open(out / "events.jsonl") as fh:
        paged = [json.loads(line) for line in fh if '"node_paging"' in line]
    assert [(e["node"], e["demand_mb"], e["emulated"]) for e in paged[:1]] == [(0, 110.0, False)]
    summary = json.loads((out / "summary.json").read_text())
    assert 0.5 < summary["paging_node_s"] < 3.0
