"""Every exit path leaves no worker process (running or stopped) and no cgroup behind; a crashed worker
fails its job with the reason; results written before a crash stay readable (DESIGN.md, Faults)."""

from __future__ import annotations

import csv
import json
import os
import signal
import time

import pytest

from testbed import events as ev
from testbed import runner
from testbed.scenario import load

from .conftest import LONG, SMALL, kill_tree, start_cli, wait_clean, wait_for_event

pytestmark = pytest.mark.slow


def _running(e):
    return e["kind"] == ev.PROGRESS


def _jobs(path):
    with open(path / "jobs.csv") as fh:
        return {r["job_id"]: r for r in csv.DictReader(fh)}


def test_ctrl_c_cleans_up_and_keeps_partial_results(scenario_file, tmp_path):
    out = tmp_path / "out"
    p = start_cli(["run", str(scenario_file(LONG)), "--out", str(out), "-q"])
    try:
        wait_for_event(out, _running)
        p.send_signal(signal.SIGINT)
        text, _ = p.communicate(timeout=60)
    finally:
        kill_tree(p)
    assert p.returncode == 130, text
    assert wait_clean(out) == ([], [])
    rows = _jobs(out)
    assert rows["long"]["final_state"] == "COMPLETED_KILLED"
    assert "interrupted" in rows["long"]["reason"]


def test_exception_in_runner_cleans_up(tmp_path):
    scn = load(doc=LONG)
    out = tmp_path / "out"

    def boom(st):
        if st["counts"].get("running"):
            raise RuntimeError("injected runner failure")

    with pytest.raises(RuntimeError, match="injected"):
        runner.run_once(scn, "ray", out, on_status=boom)
    assert wait_clean(out) == ([], [])
    assert (out / "jobs.csv").exists() and (out / "events.jsonl").exists()


def test_crashing_worker_fails_its_job_and_the_run_exits_3(scenario_file, tmp_path):
    doc = {
        **SMALL,
        "name": "crash",
        "workload": {
            "seed": 1,
            "jobs": [
                {"id": "victim", "size": 2, "app": {"iterations": 400, "gcomp": 20}},
                {"id": "other", "size": 2, "app": {"iterations": 10, "gcomp": 20}},
            ],
        },
    }
    out = tmp_path / "out"
    p = start_cli(["run", str(scenario_file(doc)), "--out", str(out), "-q"])
    try:
        started = wait_for_event(out, lambda e: e["kind"] == ev.PROC_STARTED and e["job"] == "victim")
        wait_for_event(out, lambda e: e["kind"] == ev.PROGRESS and e["job"] == "victim")
        os.kill(started["pid"], signal.SIGKILL)
        text, _ = p.communicate(timeout=120)  # the run ends by itself once "other" is done
    finally:
        kill_tree(p)
    rows = _jobs(out)
    assert rows["victim"]["final_state"] == "COMPLETED_FAILED"
    assert "signal 9" in rows["victim"]["reason"], rows["victim"]["reason"]
    assert rows["other"]["final_state"] == "COMPLETED_SUCCESSFULLY"
    # Exit 3, and one line that names the job and the reason.
    assert p.returncode == 3, text
    lines = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "job victim failed" in lines[0] and "signal 9" in lines[0], text
    summary = json.loads((out / "summary.json").read_text())
    assert [b["job"] for b in summary["jobs_not_as_planned"]] == ["victim"]
    assert wait_clean(out) == ([], [])


def test_kill_9_of_a_node_agent(scenario_file, tmp_path):
    # Two nodes per agent process: killing node 3's process takes nodes 2 and 3 down, and only those.
    doc = {**LONG, "cluster": {**LONG["cluster"], "nodes_per_process": 2}}
    out = tmp_path / "out"
    p = start_cli(["run", str(scenario_file(doc)), "--out", str(out), "-q"])
    try:
        info = wait_for_event(out, lambda e: e["kind"] == ev.RUN_INFO and e.get("node") == 3 and "pid" in e)
        wait_for_event(out, _running)
        os.kill(info["pid"], signal.SIGKILL)
        for node in (2, 3):
            wait_for_event(out, lambda e, n=node: e["kind"] == ev.NODE_DOWN and e["node"] == n, timeout=30)
        # The nodes' workers died with them; the cgroups stay until the run ends.
        failed = wait_for_event(out, lambda e: e["kind"] == ev.JOB_FAILED, timeout=30)
        assert "node 2" in failed["reason"] or "node 3" in failed["reason"], failed
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    finally:
        kill_tree(p)
    down = {e["node"] for e in ev.read_jsonl(out / "events.jsonl") if e["kind"] == ev.NODE_DOWN}
    assert down == {2, 3}, down
    assert wait_clean(out) == ([], [])


def _session_group() -> str | None:
    """This session's autogroup nice; None on a kernel without autogroups (nothing to raise there)."""
    try:
        with open("/proc/self/autogroup") as f:
            return f.read().split()[-1]
    except FileNotFoundError:
        return None


def test_kill_9_of_the_driver(scenario_file, tmp_path):
    out = tmp_path / "out"
    before = _session_group()
    p = start_cli(["run", str(scenario_file(LONG)), "--out", str(out), "-q"])
    try:
        wait_for_event(out, _running)
        # The run raised this session's autogroup (its control plane's), where there is one.
        assert _session_group() in (None, "-10")
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        kill_tree(p)
    assert wait_clean(out, timeout=30) == ([], [])
    # ...and the janitor put it back, as the driver would have.
    deadline = time.monotonic() + 10
    while _session_group() != before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_group() == before
    # What was written before the crash is readable.
    assert list(ev.read_jsonl(out / "events" / "coordinator.jsonl"))


def test_oversize_job_is_rejected_with_reason_and_small_run_completes(scenario_file, tmp_path):
    doc = {
        **SMALL,
        "workload": {
            **SMALL["workload"],
            "jobs": [*SMALL["workload"]["jobs"], {"id": "huge", "size": 9, "app": {"gcomp": 1}}],
        },
    }
    out = tmp_path / "out"
    t = time.monotonic()
    p = start_cli(["run", str(scenario_file(doc)), "--out", str(out), "-q"])
    text, _ = p.communicate(timeout=240)
    assert p.returncode == 0, text
    rows = _jobs(out)
    assert rows["huge"]["final_state"] == "REJECTED" and "9" in rows["huge"]["reason"]
    for j in ("a", "b", "c"):
        assert rows[j]["final_state"] == "COMPLETED_SUCCESSFULLY", rows[j]
    assert wait_clean(out) == ([], [])
    assert time.monotonic() - t < 240
