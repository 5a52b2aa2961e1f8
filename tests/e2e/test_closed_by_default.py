"""A local run is closed to strangers (issue 19, "closed by default"): every socket its processes listen
on is on loopback, but Ray's own servers, which Ray 2.60 binds to every interface whatever address it
is given, and those take no RPC without the run's token. Real run, real sockets, a real Ray client
without the token."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import psutil
import pytest

from .conftest import LONG, kill_tree, run_ids, run_marked_pids, start_cli, wait_clean, wait_for_event

#: Ray's processes: the only ones allowed to listen beyond loopback (closed by the token instead).
RAY_PROCESSES = ("gcs_server", "raylet", "ray::")


def _listeners(pids: list[int]) -> list[tuple[str, str, int, bool]]:
    """(process, address, port, whether the process runs Ray's core: a Ray daemon, or a Python process
    with Ray's core library loaded, whose gRPC server every Ray worker and driver has)."""
    out = []
    for pid in pids:
        try:
            p = psutil.Process(pid)
            name = " ".join(p.cmdline()[:1]) or p.name()
            ray = any(r in name for r in RAY_PROCESSES) or "_raylet" in open(f"/proc/{pid}/maps").read()
            for c in p.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    out.append((name, c.laddr.ip, c.laddr.port, ray))
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue
    return out


def _loopback(ip: str) -> bool:
    return ip.startswith("127.") or ip == "::1"


# 31 s: the default run stays under about 12 minutes (the developers' guide); CI runs it with --extended.
@pytest.mark.slow
@pytest.mark.extended
def test_a_local_run_listens_on_loopback_and_its_ray_refuses_clients_without_the_token(
    scenario_file, tmp_path
):
    out = tmp_path / "run"
    p = start_cli(["run", str(scenario_file(LONG)), "--out", str(out), "-q"])
    try:
        wait_for_event(out, lambda e: e["kind"] == "job_started", 120)
        ids = run_ids(out)
        assert ids
        pids = run_marked_pids(ids) + [p.pid]
        listeners = _listeners(pids)
        assert listeners
        beyond = [x for x in listeners if not _loopback(x[1])]
        # Ours (the NICs, the exporters) name loopback; beyond it only Ray's servers, which the token
        # closes (checked below).
        strangers = [x for x in beyond if not x[3]]
        assert strangers == [], strangers
        assert any(ip == "127.0.0.1" and "AgentHost" in name for name, ip, _, _ in listeners)  # the NICs
        # Ray's servers are open by address: a client without the run's token is refused all the same.
        gcs = next(port for name, _, port, _ in listeners if "gcs_server" in name)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        probe = subprocess.run(
            [sys.executable, "-c", f"import ray; ray.init(address='127.0.0.1:{gcs}')"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert probe.returncode != 0
        assert "Authentication" in probe.stderr or "InvalidAuthToken" in probe.stderr, probe.stderr[-2000:]
        # Ray's HTTP servers beyond loopback (the runtime-env agent) answer a request without it with 401.
        for name, ip, port, _ in beyond:
            if "RuntimeEnvAgent" in name:
                host = f"[{ip}]" if ":" in ip else ip
                with pytest.raises(urllib.error.HTTPError) as refused:
                    urllib.request.urlopen(f"http://{host}:{port}/get_or_create_runtime_env", timeout=10)
                assert refused.value.code in (401, 403)
    finally:
        p.send_signal(2)
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            kill_tree(p)
    time.sleep(0.5)
    assert wait_clean(out) == ([], [])
