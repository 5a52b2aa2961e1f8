"""A run on a Ray cluster it joins (cluster.ray_address), as a RayJob's entrypoint runs on KubeRay: a real
multi-node Ray cluster (`ray start`: a head and two worker nodes, each its own raylet), on this one host.

What it shows: the agents run on the worker nodes that offer `testbed_node` (not beside the driver), their
events and logs come back to the run folder through Ray (they write on their own host), every job completes,
and nothing is left: no worker, no cgroup, no scratch folder. What one host cannot show: clocks that differ
(every node here shares this kernel's CLOCK_MONOTONIC; tests/unit/test_scenario.py tests the conversion).
"""

from __future__ import annotations

import csv
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from testbed.monitoring.prometheus import read_targets

from testbed.core import events as ev
from testbed.results import summary as results

from .conftest import run_marked_pids, wait_clean, wait_for_event
from .conftest import testbed_cgroups as cgroups_of

pytestmark = pytest.mark.slow

RAY = [sys.executable, "-m", "ray.scripts.scripts"]
MARK = "TESTBED_TEST_RAY_CLUSTER"
WORKER_IPS = ("127.0.0.2", "127.0.0.3")
WORKERS = len(WORKER_IPS)

SCENARIO = {
    "name": "ray-join",
    "cluster": {"nodes": 4, "nodes_per_process": 2, "envelope": "auto"},
    "clock": {"tdf": 2},
    "scheduler": {"name": "gang", "params": {"mpl": 2, "quantum_ms": 100}},
    "monitoring": {"enabled": True},
    "workload": {
        "seed": 1,
        "jobs": [
            {"id": "a", "submit_s": 0.0, "size": 4, "app": {"iterations": 10, "gcomp": 20}},
            {"id": "b", "submit_s": 0.2, "size": 2, "app": {"iterations": 10, "gcomp": 20}},
            {"id": "c", "submit_s": 0.4, "size": 4, "app": {"iterations": 10, "gcomp": 2, "gio": 2,
                                                           "io_time_ms": 2}},
        ],
    },
}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _marked(mark: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in env:
            pids.append(int(d.name))
    return pids


@pytest.fixture(scope="module")
def ray_cluster():
    """(address, env, ids of the worker nodes): the env a client of this cluster needs (its token)."""
    mark = secrets.token_hex(6)
    # Token authentication, the same on every node and client (Ray's own advice): a head started without
    # a mode now enables it for itself only, and then refuses the nodes that join.
    env = {**os.environ, MARK: mark, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "RAY_USAGE_STATS_ENABLED": "0"}  # fmt: skip
    env.pop("RAY_ADDRESS", None)
    address = f"127.0.0.1:{_free_port()}"
    try:
        subprocess.run([*RAY, "start", "--head", f"--port={address.rsplit(':', 1)[1]}", "--num-cpus=0",
                        "--include-dashboard=false", "--node-ip-address=127.0.0.1", "--disable-usage-stats"],
                       env=env, check=True, capture_output=True, timeout=120)  # fmt: skip
        # Each worker node at an address of its own (loopback, as everything here must be): what listens
        # for other hosts (NICs, exporters) must take its node's address, not 127.0.0.1.
        for ip in WORKER_IPS:
            subprocess.run([*RAY, "start", f"--address={address}", "--num-cpus=1",
                            '--resources={"testbed_node": 1}', f"--node-ip-address={ip}",
                            "--disable-usage-stats"],
                           env=env, check=True, capture_output=True, timeout=120)  # fmt: skip
        probe = (
            f"import json, ray; ray.init(address='{address}', logging_level='ERROR', log_to_driver=False); "
            "print(json.dumps([n['NodeID'] for n in ray.nodes() if n['Alive'] "
            "and n['Resources'].get('testbed_node')]))"
        )
        out = subprocess.run([sys.executable, "-c", probe], env=env, check=True, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        workers = json.loads(out.stdout.strip().splitlines()[-1])
        assert len(workers) == WORKERS, out
        yield address, env, workers
    finally:
        # Not `ray stop`: it stops every Ray on the host, other runs' included. Every process of this
        # cluster (ray start daemonises them) carries the mark.
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in _marked(mark):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while _marked(mark) and time.monotonic() < deadline:
                time.sleep(0.2)


def _run(tmp_path: Path, env: dict, address: str, *sets: str) -> tuple[subprocess.CompletedProcess, Path]:
    scn = tmp_path / "scenario.yaml"
    scn.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(scn), "--set", f"cluster.ray_address={address}",
           *[a for s in sets for a in ("--set", s)], "--out", str(out), "-q"]  # fmt: skip
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600), out


def test_agents_run_on_the_joined_clusters_worker_nodes_and_their_files_come_back(tmp_path, ray_cluster):
    address, env, workers = ray_cluster
    p, out = _run(tmp_path, env, address)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out / "jobs.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 and all(r["final_state"] == results.FinalState.COMPLETED for r in rows), rows
    summary = json.loads((out / "summary.json").read_text())
    hosts = summary["agent_hosts"]
    # One agent process per worker node (each offers one testbed_node), none on the head.
    assert sorted(h["ray_node"] for h in hosts) == sorted(workers), hosts
    assert sorted(n for h in hosts for n in h["nodes"]) == [0, 1, 2, 3]
    assert sorted(h["ip"] for h in hosts) == list(WORKER_IPS)
    assert summary["logs_lost"] == []
    # Each node's NIC and exporter listened on its host's address: another host's ranks and Prometheus
    # reach them there.
    ip_of = {n: h["ip"] for h in hosts for n in h["nodes"]}
    for n in range(4):
        info = next(json.loads(ln) for ln in (out / "events" / f"node{n}.jsonl").read_text().splitlines()
                    if json.loads(ln)["kind"] == "run_info")  # fmt: skip
        assert info["nic"].rsplit(":", 1)[0] == ip_of[n], info
    targets = {t["node"]: t["address"] for t in read_targets(out) if t["role"] == "node"}
    assert {int(n): a.rsplit(":", 1)[0] for n, a in targets.items()} == ip_of
    # The agents wrote on their own host's scratch folder; the driver brought the files into the run folder.
    for n in range(4):
        lines = (out / "events" / f"node{n}.jsonl").read_text().splitlines()
        assert any(json.loads(ln)["kind"] == "run_info" for ln in lines), n
        assert (out / "logs" / f"forkserver.node{n}.log").exists()
    scratch = Path(tempfile.gettempdir()) / f"testbed-{summary['run_id']}"
    assert not scratch.exists(), sorted(scratch.rglob("*"))
    pids, cgroups = wait_clean(out)
    assert not pids and not cgroups, (pids, cgroups)


def test_a_cluster_without_enough_testbed_nodes_is_refused_with_the_count_and_the_fix(tmp_path, ray_cluster):
    address, env, _ = ray_cluster
    t = time.monotonic()
    p, out = _run(tmp_path, env, address, "cluster.nodes_per_process=1")
    assert p.returncode != 0
    text = p.stdout + p.stderr
    assert "cluster.ray_address" in text and f"offers {WORKERS} 'testbed_node'" in text, text
    assert "this run needs 4" in text and "ray start --address" in text, text
    assert time.monotonic() - t < 120  # refused, not left waiting for a Ray node that never comes
    summary = json.loads((out / "summary.json").read_text())
    assert "testbed_node" in summary["error"]


def _cluster_actor_pids(mark: str) -> list[int]:
    """The cluster's actor processes of a testbed run (Ray names them ray::CLASS); idle workers stay."""
    pids = []
    for pid in _marked(mark):
        try:
            comm = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        if comm in (b"ray::AgentHost", b"ray::CoordinatorActor"):
            pids.append(pid)
    return pids


def test_kill_9_of_the_driver_leaves_nothing_on_the_joined_cluster(tmp_path, ray_cluster):
    address, env, _ = ray_cluster
    doc = {**SCENARIO, "workload": {"seed": 1, "jobs": [
        {"id": "long", "submit_s": 0.0, "size": 4, "app": {"iterations": 2000, "gcomp": 20}}]}}  # fmt: skip
    scn = tmp_path / "scenario.yaml"
    scn.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    before = set(Path(tempfile.gettempdir()).glob("testbed-2*"))
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(scn), "--set", f"cluster.ray_address={address}",
           "--out", str(out), "-q"]  # fmt: skip
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_event(out, lambda e: e["kind"] == ev.JOB_STARTED and e["job"] == "long", timeout=120)
        (scratch,) = set(Path(tempfile.gettempdir()).glob("testbed-2*")) - before
        run_id = scratch.name[len("testbed-") :]
        assert run_marked_pids({run_id}) and _cluster_actor_pids(env[MARK])
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    # The janitor sweeps this host (workers, cgroups, the scratch folder); Ray ends the dead driver's
    # actors on every host, and their fork servers' deaths take the workers on other hosts.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        left = (run_marked_pids({run_id}), cgroups_of({run_id}), scratch.exists(),
                _cluster_actor_pids(env[MARK]))  # fmt: skip
        if not any(left):
            break
        time.sleep(0.5)
    assert not any(left), left
