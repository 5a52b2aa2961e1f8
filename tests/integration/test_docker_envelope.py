"""The docker envelope on a real dockerd: one container per node, its limits, workers in its cgroups under
the agent's control, and removal on every path (issue 13).

Needs a running dockerd (cgroup v1, cgroupfs driver): skipped here without one, failed in CI, where .ci/run
starts it. The test of a missing daemon needs none: it points the SDK at a socket that does not exist."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from testbed.emulator.mechanism import docker_envelope as de
from testbed.emulator.mechanism import envelope as envmod
from testbed.emulator.mechanism.envelope import EnvelopeUnavailable
from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.process import spawn
from testbed.janitor import cleanup_run

from ..conftest import measured, requires

BUSY = [sys.executable, "-c", "while True: pass"]
_WHY = de.probe()
needs_docker = requires(_WHY is None, f"docker envelope not usable here: {_WHY}")
pytestmark = pytest.mark.docker


@pytest.fixture
def envelopes(run_id):
    made = []

    def make(node=0, cpu_rate=1.0, tdf=1.0, **kw):
        e = make_envelope("docker", run_id, node, cpu_rate, tdf, **kw)
        e.create()
        made.append(e)
        return e

    yield make
    for e in made:
        e.destroy()


def _spawn(argv, env, **kw):
    return spawn(
        argv, env=None, cwd=None, stdout=kw.pop("stdout", subprocess.DEVNULL), stderr=None, envelope=env, **kw
    )


def _containers(run_id: str) -> list:
    c = de.client()
    try:
        return c.containers.list(all=True, filters={"label": f"{de.LABEL_RUN}={run_id}"})
    finally:
        c.close()


def _docker_cgroups(run_id: str) -> list[str]:
    root = "/sys/fs/cgroup"
    return [
        os.path.join(root, h, de.DOCKER_TOP, run_id)
        for h in os.listdir(root)
        if os.path.isdir(os.path.join(root, h, de.DOCKER_TOP, run_id))
    ]


def test_absent_daemon_is_one_line_saying_how_to_start_it(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    e = make_envelope("docker", "r1", 0, 1.0, 1.0)
    with pytest.raises(EnvelopeUnavailable) as ei:
        e.create()
    msg = str(ei.value)
    assert "\n" not in msg and "dockerd is not reachable at unix:///nonexistent/docker.sock" in msg
    assert "dockerd --iptables=false --ip6tables=false --bridge=none" in msg and "envelope: cgroup" in msg
    assert de.probe() == msg


def test_absent_daemon_is_refused_at_preflight(monkeypatch):
    from testbed import runner
    from testbed.scenario import Scenario

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    scn = Scenario.model_validate(
        {
            "name": "d",
            "cluster": {"nodes": 2, "envelope": "docker"},
            "workload": {"jobs": [{"id": "a", "size": 1, "app": {"gcomp": 1}}]},
        }
    )
    with pytest.raises(runner.PreflightError) as ei:
        runner.preflight(scn, "ray")
    assert str(ei.value).startswith("cluster.envelope: envelope docker: dockerd is not reachable")
    assert "\n" not in str(ei.value)


@needs_docker
def test_container_carries_the_limits_labels_and_modes(envelopes, run_id):
    e = envelopes(node=3, cpu_rate=0.5, tdf=2.0, period_us=20_000, memory_mb=300)
    (ct,) = _containers(run_id)
    assert ct.name == f"testbed-{run_id}-node3" and ct.status == "running"
    assert ct.labels[de.LABEL_RUN] == run_id and ct.labels[de.LABEL_NODE] == "3"
    hc = ct.attrs["HostConfig"]
    assert hc["NetworkMode"] == "host" and hc["PidMode"] == "host"
    assert hc["CgroupParent"] == f"/testbed-docker/{run_id}"
    assert (hc["CpuPeriod"], hc["CpuQuota"], hc["NanoCpus"]) == (20_000, 5_000, 0)
    assert hc["PidsLimit"] == de.PIDS_LIMIT and hc["Memory"] == 300 * 2**20

    def cg(ctrl, name):
        with open(os.path.join(e._dir(ctrl), name)) as fh:
            return fh.read().strip()

    # What the kernel enforces, not only what Docker recorded.
    assert (cg("cpu", "cpu.cfs_period_us"), cg("cpu", "cpu.cfs_quota_us")) == ("20000", "5000")
    assert cg("pids", "pids.max") == str(de.PIDS_LIMIT)
    # The cgroup envelope's CPU weight on the run's parents, so that busy neighbours do not starve nodes.
    run_dir = os.path.dirname(e._dir("cpu"))
    for d in (run_dir, os.path.dirname(run_dir)):
        with open(os.path.join(d, "cpu.shares")) as fh:
            assert int(fh.read()) == envmod.SHARES_V1
    assert cg("memory", "memory.limit_in_bytes") == str(300 * 2**20)
    assert e.configured_rate() == 0.25 and e.pids() == []  # the resident is not one of the node's


@needs_docker
def test_workers_join_the_container_before_their_first_instruction(envelopes, tmp_path):
    e = envelopes(node=1)
    out = tmp_path / "cg.txt"
    w = _spawn(["cat", "/proc/self/cgroup"], e, stdout=str(out))
    assert w.reap() == 0
    want = e.container.id
    lines = out.read_text().splitlines()
    for ctrl in ("cpu", "cpuacct", "freezer", "pids", "memory"):
        assert any(ctrl in ln.split(":")[1].split(",") and ln.endswith("/" + want) for ln in lines), lines


@needs_docker
def test_quota_fixes_the_rate_and_docker_update_changes_it(envelopes):
    e = envelopes(tdf=4.0)
    w = _spawn(BUSY, e)
    try:
        time.sleep(0.3)

        def rate():
            u0, t0 = e.cpu_usage_s(), time.monotonic()
            time.sleep(1.5)
            r = (e.cpu_usage_s() - u0) / (time.monotonic() - t0)
            # A cap: never above it, loaded host or not, but for the window's edges: a 1.5 s window can hold
            # one quota burst more than its share, up to period/window = 6.7 % at the default 100 ms period
            # (measured +5.7 % at 0.5 core on a quiet host, in .ci/run).
            assert r / e.configured_rate() - 1 < 0.08, r
            return r

        why = "the quota is a cap: a host whose 2 cores are busy with other tests can deliver less than it"
        got = measured(rate, lambda r: r / 0.25 - 1 > -0.05, why=why)
        e.set_rate(2.0)  # cpu_rate 2.0 at TDF 4: 0.5 core, through docker update
        with open(os.path.join(e._dir("cpu"), "cpu.cfs_quota_us")) as fh:
            assert int(fh.read()) == 50_000
        got2 = measured(rate, lambda r: r / 0.5 - 1 > -0.05, why=why)
        print(f"\ndocker quota 0.25 core: {got:.4f} CPU-s/s; after docker update to 0.5: {got2:.4f}")
        with pytest.raises(ValueError, match="kernel's minimum"):
            e.set_rate(0.01)
        assert e.configured_rate() == 0.5
    finally:
        w.kill()


@needs_docker
def test_stop_continue_nice_and_per_process_cpu_work_inside(envelopes):
    e = envelopes(tdf=2.0)
    w = _spawn(BUSY, e)
    try:
        time.sleep(0.3)
        assert e.pids() == [w.pid]
        c0 = w.cpu_time_s()
        w.stop()
        time.sleep(0.05)
        assert w.state() == "T"
        c1 = w.cpu_time_s()
        time.sleep(0.2)
        assert w.cpu_time_s() == c1 > c0
        w.cont()
        w.set_nice(7)
        with open(f"/proc/{w.pid}/stat") as fh:
            assert int(fh.read().rsplit(")", 1)[1].split()[16]) == 7
        time.sleep(0.2)
        assert w.cpu_time_s() > c1 and w.state() in ("R", "S")
    finally:
        w.kill()


@needs_docker
def test_destroy_kills_workers_and_removes_the_container(envelopes, run_id):
    e = envelopes(tdf=2.0)
    w = _spawn(BUSY, e)
    stopped = _spawn(BUSY, e)
    stopped.stop()
    e.destroy()
    assert w.reap(5) == -9 and stopped.reap(5) == -9
    assert _containers(run_id) == [] and _docker_cgroups(run_id) == []
    e.destroy()  # twice is fine


@needs_docker
def test_janitor_removes_a_runs_containers_and_workers(run_id):
    """As after kill -9 of everything that held the envelope: only the janitor's sweep is left."""
    envs = [make_envelope("docker", run_id, k, 1.0, 4.0) for k in range(2)]
    for e in envs:
        e.create()
    workers = [_spawn(BUSY, e) for e in envs]
    envs[1].container.pause()  # the testbed pauses nothing; the janitor removes a paused container too
    report = cleanup_run(run_id)
    assert not report["errors"], report
    assert sorted(report["containers_removed"]) == [f"testbed-{run_id}-node0", f"testbed-{run_id}-node1"]
    assert all(w.reap(5) == -9 for w in workers)
    assert _containers(run_id) == [] and _docker_cgroups(run_id) == []


@needs_docker
def test_fork_server_workers_start_inside_the_container(envelopes, tmp_path, run_id):
    """The agent's fork server (issue 9) stays in the agent's cgroup, as with the cgroup envelope; each
    forked worker joins the container's cgroups before its first instruction, and stops, continues and
    dies under the agent's hand."""
    from testbed.emulator.mechanism.forkserver import ForkServer

    (tmp_path / "cg_report.py").write_text("print(open('/proc/self/cgroup').read(), flush=True)\n")
    e = envelopes(tdf=2.0)
    fs = ForkServer(e, env=dict(os.environ), cwd=str(tmp_path), log=str(tmp_path / "fs.log"), run_id=run_id)
    try:
        w = fs.spawn([sys.executable, "-m", "cg_report"], env=None, cwd=str(tmp_path),
                     stdout=str(tmp_path / "w.out"), stderr=str(tmp_path / "w.err"))  # fmt: skip
        assert w.reap(30) == 0, (tmp_path / "w.err").read_text()
        lines = (tmp_path / "w.out").read_text().splitlines()
        cid = e.container.id
        for ctrl in ("cpu", "freezer", "pids", "memory"):
            assert any(ctrl in ln.split(":")[1].split(",") and ln.endswith("/" + cid) for ln in lines), lines
        with open(f"/proc/{fs.proc.pid}/cgroup") as f:
            assert e.container.id not in f.read()  # the server itself is not charged to the node
        busy = fs.spawn([sys.executable, "-m", "testbed.apps.probe", "--seconds", "30"], env=None,
                        cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=None)  # fmt: skip
        deadline = time.monotonic() + 5
        while busy.pid not in e.pids():
            assert time.monotonic() < deadline, e.pids()
            time.sleep(0.01)
        busy.stop()
        time.sleep(0.05)
        assert busy.state() == "T"
        busy.cont()
        busy.kill()
    finally:
        fs.close()
