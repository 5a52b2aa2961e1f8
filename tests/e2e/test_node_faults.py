"""Scripted node faults on real processes, through the CLI: a node goes down (its processes are killed,
it starts nothing), its job fails or is requeued as the scenario says, the node comes back and is used
again; the simulator tells the same story for the same file."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import yaml

from testbed.core import events as ev

from .conftest import wait_clean

pytestmark = pytest.mark.slow


def _doc(on_node_down: str) -> dict:
    return {
        "name": f"faults-{on_node_down}",
        "cluster": {"nodes": 4},
        "clock": {"rate_probe_s": 0.3},
        "scheduler": {"name": "batch"},
        "faults": {
            "on_node_down": on_node_down,
            "script": [{"at_s": 0.5, "node": 1, "kind": "down"}, {"at_s": 1.2, "node": 1, "kind": "up"}],
        },
        "workload": {
            "jobs": [
                {"id": "hit", "size": 2, "app": {"iterations": 20, "gcomp": 50}},  # 1 s, nodes 0-1
                {"id": "late", "size": 4, "submit_s": 1.3, "app": {"iterations": 5, "gcomp": 20}},
            ]
        },
    }


def _run(tmp_path, doc, backend):
    path = tmp_path / f"{doc['name']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / backend
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "testbed.cli",
            "run",
            str(path),
            "--backend",
            backend,
            "--out",
            str(out),
            "-q",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    with open(out / "jobs.csv") as fh:
        rows = {r["job_id"]: r for r in csv.DictReader(fh)}
    return p, out, events, rows


@pytest.mark.parametrize("on_node_down", ["fail", "requeue"])
def test_scripted_node_fault_on_real_processes_and_in_the_simulator(tmp_path, on_node_down):
    for backend in ("ray", "sim"):
        p, out, events, rows = _run(tmp_path, _doc(on_node_down), backend)
        # A job failed by a fault the scenario scripted ended as planned: exit 0.
        assert p.returncode == 0, (backend, p.stdout + p.stderr)
        down = [e for e in events if e["kind"] == ev.NODE_DOWN and e["src"] == "coordinator"]
        assert [(e["node"], e["reason"]) for e in down] == [(1, ev.SCRIPTED_FAULT)], backend
        assert any(e["kind"] == ev.NODE_UP and e["src"] == "coordinator" for e in events), backend
        starts = [e for e in events if e["kind"] == ev.JOB_STARTED]
        if on_node_down == "fail":
            assert rows["hit"]["final_state"] == "COMPLETED_FAILED", backend
            assert rows["hit"]["reason"] == f"node 1 went down ({ev.SCRIPTED_FAULT})", backend
        else:
            assert rows["hit"]["final_state"] == "COMPLETED_SUCCESSFULLY", backend
            hit = [s["nodes"] for s in starts if s["job"] == "hit"]
            assert len(hit) == 2 and 1 not in hit[1], (backend, hit)  # restarted off the down node
        # Node 1 was up again for the late full-size job.
        assert rows["late"]["final_state"] == "COMPLETED_SUCCESSFULLY", backend
        assert [s["nodes"] for s in starts if s["job"] == "late"] == [[0, 1, 2, 3]], backend
        if backend == "ray":
            # The down node really killed the job's process there, and nothing was left behind.
            killed = [
                e for e in events if e["kind"] == ev.PROC_EXITED and e["node"] == 1 and e["job"] == "hit"
            ]
            assert killed and "went down" in (killed[0]["reason"] or ""), killed
            assert wait_clean(out) == ([], [])
