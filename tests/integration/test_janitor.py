"""The janitor: a killed driver leaves no marked process and no cgroup behind; unmarked ones are spared."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from testbed import janitor
from testbed.emulator.mechanism import envelope as envmod
from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.process import spawn
from testbed.janitor import cleanup_run, marked_processes, start_janitor

from ..conftest import requires, wait_for

_V1_WHY = envmod.probe_v1()
# Skipped where cgroups cannot be written, saying why; with CI=true that fails instead (CI asserts them).
needs_v1 = requires(_V1_WHY is None, f"cgroup v1 envelope not usable here: {_V1_WHY}")


def _env_without_mark() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TESTBED_RUN_ID"}


def _run_dirs(run_id: str) -> list[str]:
    return [top for _, top in janitor._run_dirs(run_id)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def procs():
    """Processes the test starts itself: killed and reaped at teardown whatever happened."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait()


def freeze(run_id: str, node: int, pid: int) -> None:
    """Freezes ``pid`` in a v1 freezer cgroup of the run's own. The testbed freezes nothing, but a node's
    process may still sit in a frozen cgroup (one an earlier version left, a container paused with
    ``docker pause``), and the janitor must kill it all the same. Self-contained: PARENT runs its source."""
    import os

    from testbed.emulator.mechanism import envelope as envmod

    d = os.path.join(envmod._v1_mount("freezer")[0], "testbed", run_id, f"node{node}")
    os.makedirs(d)
    for name, value in (("cgroup.procs", pid), ("freezer.state", "FROZEN")):
        with open(os.path.join(d, name), "w") as f:
            f.write(str(value))


PARENT = inspect.getsource(freeze) + textwrap.dedent("""
    import json, os, subprocess, sys, time
    from testbed.emulator.mechanism.envelopes import make_envelope
    from testbed.emulator.mechanism.process import spawn
    rid = sys.argv[1]
    busy = [sys.executable, "-c", "while True: pass"]
    nodes = [make_envelope("cgroup-v1", rid, k, 1.0, 4.0) for k in range(2)]
    for e in nodes:
        e.create()
    stopped = spawn(busy, env=None, cwd=None, stdout=None, stderr=None, envelope=nodes[0])
    stopped.stop()
    frozen = spawn(busy, env=None, cwd=None, stdout=None, stderr=None, envelope=nodes[1])
    freeze(rid, 1, frozen.pid)
    # Outside any envelope and without PDEATHSIG: only the TESTBED_RUN_ID mark can find it.
    marked = {**os.environ, "TESTBED_RUN_ID": rid}
    stray = subprocess.Popen(["sleep", "60"], env=marked, start_new_session=True)
    # Not marked: the janitor must leave it alone.
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    print(json.dumps({"stopped": stopped.pid, "frozen": frozen.pid, "stray": stray.pid,
                      "bystander": bystander.pid}), flush=True)
    time.sleep(60)
""")


@pytest.mark.cgroup
@needs_v1
def test_janitor_cleans_up_after_killed_parent(run_id, procs, tmp_path):
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, run_id], stdout=subprocess.PIPE, text=True, env=_env_without_mark()
    )
    procs.append(parent)
    info = json.loads(parent.stdout.readline())
    parent.stdout.close()
    try:
        assert set(marked_processes(run_id)) >= {info["stopped"], info["frozen"], info["stray"]}
        assert len(_run_dirs(run_id)) == 3  # cpu, cpuacct (the envelope's), freezer (the frozen one's)
        log = tmp_path / "janitor.log"
        jan = start_janitor(run_id, [parent.pid], log_path=str(log))
        procs.append(jan)
        with open(f"/proc/{jan.pid}/environ", "rb") as f:
            assert b"TESTBED_RUN_ID=" not in f.read()
        assert os.getsid(jan.pid) == jan.pid  # detached: its own session
        time.sleep(0.3)
        assert jan.poll() is None, "janitor quit while its watched parent was alive"
        t0 = time.monotonic()
        parent.kill()
        parent.wait()
        assert wait_for(lambda: not marked_processes(run_id) and not _run_dirs(run_id))
        took = time.monotonic() - t0
        for key in ("stopped", "frozen", "stray"):
            assert not _alive(info[key]), key
        assert _alive(info["bystander"]), "janitor killed an unmarked process"
        assert jan.wait(timeout=5) == 0, log.read_text()
        report = json.loads(log.read_text().splitlines()[-1])
        assert report["why"] == "all watched processes exited" and not report["errors"]
        assert info["stray"] in report["killed"]
        print(f"\njanitor: parent killed -> run {run_id} clean after {took:.2f} s")
    finally:
        os.kill(info["bystander"], signal.SIGKILL)


def _catches(pid: int, sig: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
    return bool(caught >> (sig - 1) & 1)


def test_janitor_exits_and_cleans_on_sigterm(run_id, procs, monkeypatch):
    # Our own environment carries a mark here: the janitor must not inherit it.
    monkeypatch.setenv("TESTBED_RUN_ID", run_id)
    stray = subprocess.Popen(["sleep", "60"])  # marked through our environment
    procs.append(stray)
    jan = start_janitor(run_id, [os.getpid()])
    procs.append(jan)
    with open(f"/proc/{jan.pid}/environ", "rb") as f:
        assert b"TESTBED_RUN_ID=" not in f.read()
    # Once it handles SIGTERM (its start-up takes a while on a loaded host: a fixed sleep was too short).
    deadline = time.monotonic() + 30
    while not _catches(jan.pid, signal.SIGTERM) and time.monotonic() < deadline:
        assert jan.poll() is None
        time.sleep(0.05)
    jan.send_signal(signal.SIGTERM)
    assert jan.wait(timeout=5) == 0
    assert stray.wait(timeout=2) == -signal.SIGKILL
    assert _alive(os.getpid())


@pytest.mark.cgroup
@needs_v1
def test_cleanup_run_synchronously(run_id, procs):
    e = make_envelope("cgroup-v1", run_id, 0, 1.0, 1.0)
    e.create()
    w = spawn(["sleep", "30"], env=None, cwd=None, stdout=None, stderr=None, envelope=e)
    freeze(run_id, 0, w.pid)
    stray = subprocess.Popen(["sleep", "30"], env={**os.environ, "TESTBED_RUN_ID": run_id})
    procs.append(stray)
    report = cleanup_run(run_id)
    assert not report["errors"], report
    assert {w.pid, stray.pid} <= set(report["killed"])
    assert w.reap(timeout=2) == -signal.SIGKILL and stray.wait(timeout=2) == -signal.SIGKILL
    assert not _run_dirs(run_id)
    assert any(d.endswith(f"testbed/{run_id}/node0") for d in report["cgroups_removed"])
    e.destroy()  # the envelope's own teardown after the janitor's is a no-op
