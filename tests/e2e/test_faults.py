"""Every exit path leaves no worker process (running or stopped), no cgroup and none of Ray's processes
behind; a crashed worker fails its job with the reason; an error in a policy ends the run with one line;
results written before a crash stay readable and can be rebuilt (docs/architecture.md, "Faults"; issue 12).

Each test runs once by default and 5 times with ``--soak`` (tests/conftest.py). Misbehaving policies and
workers come from tests/e2e/plugins (conftest.plugin_env): a scheduler registered through the
entry-point group, and real synthetic workers that fork, ignore SIGTERM or hog memory on top."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from testbed import runner
from testbed.core import events as ev
from testbed.emulator.mechanism.envelope import probe_v1
from testbed.results import summary as results
from testbed.scenario import load

from ..conftest import soak
from .conftest import (
    LONG,
    SMALL,
    kill_tree,
    plugin_env,
    run_ids,
    run_marked_pids,
    start_cli,
    wait_clean,
    wait_for_event,
)

pytestmark = pytest.mark.slow

#: Real seconds from a policy's exception to the end of the run (every job killed); issue 12 asks for 2.
#: Measured on this shared 2-core host (10 runs each): global policy 0.8-1.3 ms, local policy 3-38 ms
#: (the node's report travels to the coordinator); the driver then exits 2.6-4.8 s after the error
#: (teardown: agents ~0.8 s, ray.shutdown ~1.5 s), once 9.0 s.
POLICY_ERROR_ENDS_RUN_S = 2.0
#: Real seconds from kill -9 of the driver until nothing of its run is left (issue 12 asks for 10).
#: Measured: 0.03-0.13 s for 16-18 processes (5 runs; the janitor's pidfd wakes it at once), the
#: rebuilt summary.json 0.2-1.5 s after the kill.
DRIVER_KILL_CLEAN_S = 10.0


def _running(e):
    return e["kind"] == ev.PROGRESS


def _jobs(path):
    with open(path / "jobs.csv") as fh:
        return {r["job_id"]: r for r in csv.DictReader(fh)}


def _summary(path):
    return json.loads((path / "summary.json").read_text())


def _error_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


@soak
def test_ctrl_c_cleans_up_and_keeps_partial_results(scenario_file, tmp_path, rep):
    """Ctrl-C as a terminal sends it: SIGINT to the driver's whole process group (Ray's head processes
    are in it too)."""
    out = tmp_path / "out"
    p = start_cli(["run", str(scenario_file(LONG)), "--out", str(out), "-q"], start_new_session=True)
    try:
        wait_for_event(out, _running)
        os.killpg(p.pid, signal.SIGINT)
        text, _ = p.communicate(timeout=60)
    finally:
        kill_tree(p)
    assert p.returncode == 130, text
    assert wait_clean(out) == ([], [])
    rows = _jobs(out)
    assert rows["long"]["final_state"] == "COMPLETED_KILLED"
    assert "interrupted" in rows["long"]["reason"]
    s = _summary(out)
    assert s["ended"] == "interrupted (Ctrl-C)" and s["error"] is None


@pytest.mark.extended
@pytest.mark.parametrize("gap_s", [0.3, 2.5])
def test_a_second_ctrl_c_waits_for_the_teardown_and_the_results(scenario_file, tmp_path, gap_s):
    """Ctrl-C twice, the second in the teardown (0.3 s) or at its end (2.5 s: the teardown takes 2.5-4.5
    s here). Before, one landing between the teardown and the results left no jobs.csv or summary.json,
    and the driver died by SIGINT (issue 19). The unit test of the window: tests/unit/test_interrupts.py."""
    out = tmp_path / "out"
    p = start_cli(["run", str(scenario_file(LONG)), "--out", str(out), "-q"], start_new_session=True)
    try:
        wait_for_event(out, _running)
        os.killpg(p.pid, signal.SIGINT)
        time.sleep(gap_s)
        os.killpg(p.pid, signal.SIGINT)
        text, _ = p.communicate(timeout=60)
    finally:
        kill_tree(p)
    assert p.returncode == 130, text
    assert wait_clean(out) == ([], [])
    assert _jobs(out)["long"]["final_state"] == "COMPLETED_KILLED"
    assert _summary(out)["ended"] == "interrupted (Ctrl-C)"


@soak
def test_exception_in_runner_cleans_up(tmp_path, rep):
    scn = load(doc=LONG)
    out = tmp_path / "out"

    def boom(st):
        if st["counts"].get("running"):
            raise RuntimeError("injected runner failure")

    with pytest.raises(runner.RunFailed, match="injected runner failure"):
        runner.run_once(scn, "ray", out, on_status=boom)
    assert wait_clean(out) == ([], [])
    assert (out / "jobs.csv").exists() and (out / "events.jsonl").exists()
    s = _summary(out)
    assert "injected runner failure" in s["error"] and s["ended"] == f"error: {s['error']}"


@soak
def test_crashing_worker_fails_its_job_and_the_run_exits_3(scenario_file, tmp_path, rep):
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
    # The first report to reach the coordinator is the reason: the killed rank's own exit (signal 9), or
    # its peer's, whose NIC saw the dead rank's connection drop first (found by --soak, 1 run in 5).
    dead = f"rank {started['rank']} on node {started['node']} of job victim disconnected without closing"
    reason = rows["victim"]["reason"]
    assert "signal 9" in reason or dead in reason, reason
    assert rows["other"]["final_state"] == "COMPLETED_SUCCESSFULLY"
    # Exit 3, and one line that names the job and the reason.
    assert p.returncode == 3, text
    lines = _error_lines(text)
    assert len(lines) == 1 and "job victim failed" in lines[0] and reason in lines[0], text
    summary = _summary(out)
    assert [b["job"] for b in summary["jobs_not_as_planned"]] == ["victim"]
    assert wait_clean(out) == ([], [])


@soak
def test_kill_9_of_a_node_agent_in_the_middle_of_a_gang_slot(scenario_file, tmp_path, rep):
    """Node 3 dies while the gang matrix switches every 50 ms: with two nodes per agent process, nodes 2
    and 3 go down (and only those); the job on them fails naming a node, the job on the other nodes goes
    on switching and completes, and the run exits 3 with one line."""
    doc = {
        **LONG,
        "cluster": {**LONG["cluster"], "nodes_per_process": 2},
        "workload": {
            "seed": 1,
            "jobs": [
                {"id": "long", "size": 4, "app": {"iterations": 1000, "gcomp": 50}},
                {"id": "short", "size": 2, "app": {"iterations": 60, "gcomp": 20}},
            ],
        },
    }
    out = tmp_path / "out"
    p = start_cli(["run", str(scenario_file(doc)), "--out", str(out), "-q"])
    try:
        info = wait_for_event(out, lambda e: e["kind"] == ev.RUN_INFO and e.get("node") == 3 and "pid" in e)
        wait_for_event(out, lambda e: e["kind"] == ev.SLOT_SWITCH and e["node"] == 3 and e["slot"] >= 3)
        os.kill(info["pid"], signal.SIGKILL)
        text, _ = p.communicate(timeout=180)
    finally:
        kill_tree(p)
    assert p.returncode == 3, text
    lines = _error_lines(text)
    assert len(lines) == 1 and "job long failed" in lines[0], text
    assert "node 2" in lines[0] or "node 3" in lines[0], text
    rows = _jobs(out)
    assert rows["short"]["final_state"] == results.FinalState.COMPLETED, rows["short"]
    evs = list(ev.read_jsonl(out / "events.jsonl"))
    downs = [e for e in evs if e["kind"] == ev.NODE_DOWN]
    assert {e["node"] for e in downs} == {2, 3}, downs
    down = max(downs, key=lambda e: e["t"])
    # The gang went on switching on the surviving nodes after node 3 went down.
    assert any(e["kind"] == ev.SLOT_SWITCH and e["t"] > down["t"] and e["node"] in (0, 1) for e in evs)
    assert set(_summary(out)["nodes_down"]) == {"2", "3"}
    assert wait_clean(out) == ([], [])


def _session_group() -> str | None:
    """This session's autogroup nice; None where none applies (nothing to raise there): a kernel without
    autogroups, or a session in the root group, which reads as an empty file (CI's)."""
    try:
        with open("/proc/self/autogroup") as f:
            fields = f.read().split()
    except FileNotFoundError:
        return None
    return fields[-1] if fields else None


@soak
def test_kill_9_of_the_driver_leaves_nothing_and_the_results_are_rebuilt(scenario_file, tmp_path, rep):
    out = tmp_path / "out"
    before = _session_group()
    p = start_cli(["run", str(scenario_file(LONG)), "--out", str(out), "-q"])
    try:
        wait_for_event(out, _running)
        ids = run_ids(out)
        # The control plane is in the run's control cgroup, the driver and Ray's processes with it
        # (emulator/mechanism/controlgroup.py), where cgroup v1 allows one: the session is left alone;
        # else the run raised this session's autogroup, where there is one.
        with open(f"/proc/{p.pid}/cgroup") as f:
            cpu = next(ln.split(":", 2)[2].strip() for ln in f if "cpu" in ln.split(":")[1].split(","))
        if probe_v1() is None:
            assert cpu in {f"/testbed/{rid}/control" for rid in ids}, cpu
            assert _session_group() == before
        else:
            assert _session_group() in (None, "-10")
        # Ray's own processes carry the run's mark: the janitor can find them.
        ray_names = {_comm(pid) for pid in run_marked_pids(ids)}
        assert {"raylet", "gcs_server"} <= ray_names, ray_names
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        t_kill = time.monotonic()
    finally:
        kill_tree(p)
    # Workers, agents, coordinator, raylet, gcs_server, Ray's dashboard and runtime-env agents.
    assert wait_clean(out, timeout=DRIVER_KILL_CLEAN_S) == ([], [])
    assert time.monotonic() - t_kill < DRIVER_KILL_CLEAN_S
    # The janitor put the session's autogroup back, as the driver would have.
    deadline = time.monotonic() + 10
    while _session_group() != before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _session_group() == before
    # What was written before the kill is readable, and the janitor rebuilt the results from it.
    assert list(ev.read_jsonl(out / "events" / "coordinator.jsonl"))
    deadline = time.monotonic() + 30
    while not (out / "summary.json").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    s = _summary(out)
    assert "died without ending the run" in s["ended"], s["ended"]
    rows = _jobs(out)
    assert rows["long"]["final_state"] == results.FinalState.KILLED
    assert rows["long"]["reason"] == results.NO_END_RECORDED
    # And `testbed results` rebuilds them again from the per-node logs, saying how the jobs ended.
    (out / "jobs.csv").unlink()
    (out / "events.jsonl").unlink()
    cmd = [sys.executable, "-m", "testbed.cli", "results", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "job long was killed: no end recorded" in r.stderr
    assert _jobs(out)["long"]["final_state"] == results.FinalState.KILLED
    assert (out / "events.jsonl").exists()
    assert _summary(out)["ended"] == s["ended"]


@soak
def test_oversize_job_is_rejected_with_reason_and_small_run_completes(scenario_file, tmp_path, rep):
    doc = {
        **SMALL,
        "workload": {
            **SMALL["workload"],
            "jobs": [*SMALL["workload"]["jobs"], {"id": "huge", "size": 9, "app": {"gcomp": 1}}],
            "oversize": "reject",  # asked for: without it the scenario is refused
        },
    }
    out = tmp_path / "out"
    p = start_cli(["run", str(scenario_file(doc)), "--out", str(out), "-q"])
    text, _ = p.communicate(timeout=240)
    assert p.returncode == 0, text
    rows = _jobs(out)
    assert rows["huge"]["final_state"] == "REJECTED" and "9" in rows["huge"]["reason"]
    for j in ("a", "b", "c"):
        assert rows[j]["final_state"] == "COMPLETED_SUCCESSFULLY", rows[j]
    assert wait_clean(out) == ([], [])
    s = _summary(out)
    assert s["ended"] == "all jobs ended" and s["error"] is None


# ------------------------------------------------------------------------------------------------------
# Errors in policies


def _faulty(fault: str, **params) -> dict:
    return {
        **LONG,
        "name": f"faulty-{fault}",
        "scheduler": {
            "name": "faulty",
            "params": {"mpl": 2, "quantum_ms": 50, "fault": fault, "after_s": 0.3, **params},
        },
    }


def _policy_error_ends_the_run(scenario_file, tmp_path, doc, backend="ray"):
    out = tmp_path / "out"
    p = start_cli(
        ["run", str(scenario_file(doc)), "--out", str(out), "--backend", backend, "-q"],
        env=plugin_env(tmp_path),
    )
    try:
        text, _ = p.communicate(timeout=240)
    finally:
        kill_tree(p)
    t_exit = time.time()
    assert p.returncode == 1, text
    lines = _error_lines(text)
    assert len(lines) == 1 and "InjectedFault: injected" in lines[0] and "tb_faulty.py" in lines[0], text
    assert "Traceback" not in text
    s = _summary(out)
    assert "InjectedFault" in s["error"] and s["ended"] == f"error: {s['error']}"
    evs = list(ev.read_jsonl(out / "events.jsonl"))
    assert all(r["final_state"] != results.FinalState.COMPLETED for r in _jobs(out).values())
    return out, s, evs, t_exit


@soak
def test_an_exception_in_the_global_policy_ends_the_run_within_2_s(scenario_file, tmp_path, rep):
    out, s, evs, t_exit = _policy_error_ends_the_run(scenario_file, tmp_path, _faulty("global"))
    (err,) = [e for e in evs if e["kind"] == ev.RUN_ERROR]
    assert err["src"] == "coordinator" and "InjectedFault" in err["traceback"]
    kills = [e for e in evs if e["kind"] == ev.JOB_KILLED]
    assert {e["job"] for e in kills} == {"long", "long2"}
    assert max(e["wall"] for e in kills) - err["wall"] < POLICY_ERROR_ENDS_RUN_S
    assert wait_clean(out) == ([], [])
    print(f"policy error -> jobs killed {max(e['wall'] for e in kills) - err['wall']:.4f} s, "
          f"-> driver exited {t_exit - err['wall']:.2f} s")  # fmt: skip


@soak
def test_an_exception_in_a_local_policy_ends_the_run_within_2_s(scenario_file, tmp_path, rep):
    out, s, evs, t_exit = _policy_error_ends_the_run(scenario_file, tmp_path, _faulty("local", node=2))
    assert "node 2 (faulty local policy" in s["error"]
    errs = [e for e in evs if e["kind"] == ev.RUN_ERROR]
    reported = next(e for e in errs if e["src"] == "node2")
    kills = [e for e in evs if e["kind"] == ev.JOB_KILLED]
    assert kills and max(e["wall"] for e in kills) - reported["wall"] < POLICY_ERROR_ENDS_RUN_S
    assert wait_clean(out) == ([], [])
    print(f"local policy error -> jobs killed {max(e['wall'] for e in kills) - reported['wall']:.4f} s, "
          f"-> driver exited {t_exit - reported['wall']:.2f} s")  # fmt: skip


def test_an_exception_in_a_policy_in_the_simulator_gives_the_same_line_and_a_summary(scenario_file, tmp_path):
    out, s, evs, _ = _policy_error_ends_the_run(scenario_file, tmp_path, _faulty("global"), backend="sim")
    assert s["backend"] == "sim" and s["error"].startswith("the simulation stopped: InjectedFault")
    assert any(e["kind"] == ev.JOB_STARTED for e in evs)  # what was simulated until then is kept


# ------------------------------------------------------------------------------------------------------
# A stopped coordinator, misbehaving workers


# 26 s, 10 of them the stop itself: the default run stays under about 12 minutes (the developers' guide);
# CI runs it with --extended.
@pytest.mark.extended
@soak
def test_sigstop_of_the_coordinator_for_10_s_then_sigcont_resumes_the_run(scenario_file, tmp_path, rep):
    doc = {
        **LONG,
        "workload": {
            "seed": 1,
            "jobs": [
                {"id": "a", "size": 4, "app": {"iterations": 150, "gcomp": 20}},
                {"id": "b", "size": 2, "app": {"iterations": 150, "gcomp": 20}},
            ],
        },
    }
    out = tmp_path / "out"
    p = start_cli(["run", str(scenario_file(doc)), "--out", str(out), "-q"])
    try:
        coord = wait_for_event(out, lambda e: e["kind"] == ev.RUN_INFO and e["src"] == "coordinator")
        wait_for_event(out, _running)
        os.kill(coord["pid"], signal.SIGSTOP)
        try:
            time.sleep(10)
        finally:
            os.kill(coord["pid"], signal.SIGCONT)
        t_cont = time.time()
        text, _ = p.communicate(timeout=240)
    finally:
        kill_tree(p)
    assert p.returncode == 0, text
    rows = _jobs(out)
    assert all(r["final_state"] == results.FinalState.COMPLETED for r in rows.values()), rows
    evs = list(ev.read_jsonl(out / "events.jsonl"))
    # The gang went on being planned after SIGCONT.
    assert any(e["kind"] == ev.SLOT_PLANNED and e["wall"] > t_cont for e in evs)
    assert wait_clean(out) == ([], [])


@soak
def test_a_worker_that_forks_children_leaves_none_behind(scenario_file, tmp_path, rep):
    """The forker's ranks each fork a child that computes forever; when the job ends, its children are
    killed with it (they would otherwise use their node's CPU for the rest of the run)."""
    doc = {
        **SMALL,
        "name": "forks",
        "scheduler": {"name": "local", "params": {"mpl": 2}},
        "workload": {
            "seed": 1,
            "jobs": [
                # Long enough to be seen running (10 iterations ended before the check, 1 run in 5).
                {"id": "forker", "size": 2, "app": {"iterations": 100, "gcomp": 10}},
                {"id": "other", "size": 4, "app": {"iterations": 400, "gcomp": 20}},
            ],
        },
    }
    out = tmp_path / "out"
    p = start_cli(
        ["run", str(scenario_file(doc)), "--out", str(out), "-q"],
        env=plugin_env(tmp_path, misbehave={"forker": "fork"}),
    )
    try:
        wait_for_event(out, lambda e: e["kind"] == ev.PROGRESS and e["job"] == "forker")
        ids = run_ids(out)
        ranks = {e["pid"] for e in _node_events(out) if e["kind"] == ev.PROC_STARTED and e["job"] == "forker"}
        # A rank's children: its environment (a worker started by exec) or its session (a forked one).
        forker_procs = {
            pid
            for pid in run_marked_pids(ids)
            if b"TB_JOB=forker\0" in _environ(pid) or pid in ranks or _session(pid) in ranks
        }
        assert len(forker_procs) >= 4, forker_procs  # 2 ranks + their children
        done = wait_for_event(out, lambda e: e["kind"] == ev.JOB_FINISHED and e["job"] == "forker")
        wait_for_event(out, lambda e: e["kind"] == ev.RUN_INFO and "leftovers_killed" in e, timeout=30)
        # The run still goes on ("other"), and nothing of the forker is left.
        deadline = time.monotonic() + 10
        while [q for q in forker_procs if _alive(q)] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [q for q in forker_procs if _alive(q)] == []
        assert p.poll() is None, "the run ended before the check"
        text, _ = p.communicate(timeout=240)
    finally:
        kill_tree(p)
    assert p.returncode == 0, text
    assert done["t"] > 0
    assert wait_clean(out) == ([], [])


def _environ(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read() + b"\0"
    except OSError:
        return b""


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[3])  # state, ppid, pgrp, session
    except (OSError, IndexError, ValueError):
        return None


def _node_events(out):
    for path in sorted((out / "events").glob("node*.jsonl")):
        yield from ev.read_jsonl(path)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@soak
def test_a_worker_that_ignores_sigterm_is_still_gone_after_sigterm_of_the_driver(
    scenario_file, tmp_path, rep
):
    out = tmp_path / "out"
    p = start_cli(
        ["run", str(scenario_file(LONG)), "--out", str(out), "-q"],
        env=plugin_env(tmp_path, misbehave={"long": "ignore-term", "long2": "ignore-term"}),
    )
    try:
        started = wait_for_event(out, lambda e: e["kind"] == ev.PROC_STARTED and e["job"] == "long")
        # Its own progress: its interpreter has started (and ignores SIGTERM); at PROC_STARTED it may not
        # have yet, and SIGTERM's default action killed it (1 run in 5).
        rank = started["rank"]
        wait_for_event(out, lambda e: e["kind"] == ev.PROGRESS and e["job"] == "long" and e["rank"] == rank)
        # The worker really ignores SIGTERM: it is still there after one.
        os.kill(started["pid"], signal.SIGTERM)
        time.sleep(0.5)
        assert _alive(started["pid"])
        p.send_signal(signal.SIGTERM)
        text, _ = p.communicate(timeout=60)
    finally:
        kill_tree(p)
    assert p.returncode == 130, text
    assert wait_clean(out, timeout=10) == ([], [])
    assert _summary(out)["ended"] == "interrupted (Ctrl-C)"


@pytest.mark.xfail(
    strict=True,
    reason="no per-node memory limit exists: a node's memory (cluster.memory_mb) only guides allocation, "
    "so a worker that allocates beyond it runs on (see the issue-12 report)",
)
def test_a_worker_that_allocates_beyond_its_node_memory_fails_its_job(scenario_file, tmp_path):
    doc = {
        **SMALL,
        "name": "hog",
        "cluster": {"nodes": 4, "memory_mb": 128},
        "workload": {
            "seed": 1,
            "jobs": [
                {"id": "hog", "size": 2, "app": {"iterations": 20, "gcomp": 10}},
                {"id": "other", "size": 2, "app": {"iterations": 20, "gcomp": 10}},
            ],
        },
    }
    out = tmp_path / "out"
    p = start_cli(
        ["run", str(scenario_file(doc)), "--out", str(out), "-q"],
        env=plugin_env(tmp_path, misbehave={"hog": "hog-memory"}, TB_TEST_HOG_MB="512"),
    )
    try:
        text, _ = p.communicate(timeout=240)
    finally:
        kill_tree(p)
    # Whatever happens, the host is not harmed and nothing is left behind.
    assert wait_clean(out) == ([], [])
    rows = _jobs(out)
    assert rows["other"]["final_state"] == results.FinalState.COMPLETED
    assert rows["hog"]["final_state"] == results.FinalState.FAILED and "memory" in rows["hog"]["reason"], text
