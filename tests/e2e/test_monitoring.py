"""Live monitoring end to end: ``testbed run --prometheus`` on a short gang scenario starts a real Prometheus
that scrapes the run's real exporters every second; while the run goes on, EVERY PromQL expression of every
shipped dashboard panel is evaluated through Prometheus' HTTP API and must return data. ``promtool check
metrics`` must accept a scrape of an agent and of the coordinator, ``testbed watch --once`` must show the
run, and after Ctrl-C nothing (Prometheus included) may be left running."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from testbed.monitoring import dashboards
from testbed.monitoring.prometheus import read_targets

from ..conftest import require
from .conftest import kill_tree, start_cli, wait_clean

NODES = 8
SCENARIO = {
    "name": "monitored",
    "cluster": {"nodes": NODES, "power": {"idle_watts": 100.0, "busy_watts": 50.0}},
    "clock": {"rate_probe_s": 0.5},
    "scheduler": {"name": "gang", "params": {"mpl": 3, "quantum_ms": 100}},
    "monitoring": {"scrape_interval_s": 1.0},
    "duration_s": 6.0,
    "workload": {
        "seed": 1,
        # "too-big" is there to be rejected (the rejections metric): ask for that, not a refusal.
        "oversize": "reject",
        "jobs": [
            {"id": "a", "size": NODES, "app": {"iterations": 200, "gcomp": 50}},
            {"id": "b", "size": NODES // 2, "app": {"iterations": 200, "gcomp": 50}},
            {
                "id": "c",
                "size": NODES // 2,
                "submit_s": 0.2,
                "app": {"iterations": 400, "gcomp": 2, "gio": 2},
            },
            {"id": "too-big", "size": NODES + 1, "app": {"iterations": 1, "gcomp": 1}},
            # A real-time pipeline: its last stage's deadlines and frame latencies feed the node exporter.
            {
                "id": "rt",
                "size": 2,
                "submit_s": 0.1,
                "app": {"kind": "vision", "stages": ["decode", "edges"], "frames": 3000, "work_units": 3},
            },
        ],
    },
}
RATE_INTERVAL = "10s"  # $__rate_interval: Grafana's is 4 x the scrape interval at least; 10 s of 1 s scrapes


def _get(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _query(prom: str, expr: str) -> list:
    out = _get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    assert out["status"] == "success", (expr, out)
    return out["data"]["result"]


def _substitute(expr: str, node: str) -> str:
    return expr.replace("$__rate_interval", RATE_INTERVAL).replace("$node", node).replace("$run_id", ".*")


class _Output:
    """Collects the CLI's output in a thread (the pipe must not fill up)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self.t = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.t.start()

    def _read(self, proc) -> None:
        for line in proc.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, prefix: str, proc, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if line.startswith(prefix):
                    return line
            assert proc.poll() is None, self.text()
            time.sleep(0.1)
        raise AssertionError(f"no '{prefix}' line: {self.text()}")


def _prometheus_pids(path: Path) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes()
            except OSError:
                continue
            if (
                Path(cmd.split(b"\0")[0].decode(errors="replace")).name == "prometheus"
                and str(path).encode() in cmd
            ):
                found.append(int(d.name))
    return found


@pytest.mark.slow
def test_every_dashboard_query_returns_data_from_a_real_prometheus(tmp_path, scenario_file):
    require(
        shutil.which("prometheus") is not None and shutil.which("promtool") is not None,
        "needs the prometheus and promtool binaries (Debian: apt-get install prometheus; .ci/run does)",
    )
    out = tmp_path / "run"
    # Long enough that a loaded host's slower start still leaves every panel time to get data (the
    # scenario's own 6 emulated s were 28 s real, which a busy host could spend starting up); once they
    # all have it, Ctrl-C ends the run, which must stop Prometheus too.
    doc = {**SCENARIO, "duration_s": 60.0}
    proc = start_cli(["run", str(scenario_file(doc)), "--out", str(out), "--prometheus", "-q"])
    output = _Output(proc)
    try:
        line = output.wait_for("Prometheus: http://", proc, timeout=60)
        prom = line.split()[1]
        assert prom.startswith("http://127.0.0.1:")
        assert (out / "prometheus" / "prometheus.yml").exists()

        # Wait until Prometheus scrapes all NODES + 1 exporters and the run is well under way.
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, output.text()
            assert time.monotonic() < deadline, output.text()
            up = _query(prom, 'up{job="testbed"} == 1')
            if len(up) == NODES + 1 and _query(prom, "sum(testbed_gang_switch_skew_seconds_count) > 3"):
                break
            time.sleep(0.5)
        targets = read_targets(out)
        assert {t["role"] for t in targets} == {"node", "coordinator"} and len(targets) == NODES + 1
        assert len({t["run_id"] for t in targets}) == 1

        # promtool accepts a scrape of a node agent's exporter and of the coordinator's.
        for role in ("node", "coordinator"):
            addr = next(t["address"] for t in targets if t["role"] == role)
            with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
                text = r.read().decode()
            p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
            assert p.returncode == 0, (role, p.stdout, p.stderr)

        # testbed watch shows the same run, straight from the exporters.
        w = subprocess.run([sys.executable, "-m", "testbed.cli", "watch", str(out), "--once"],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert w.returncode == 0, w.stdout + w.stderr
        assert f"{NODES + 1}/{NODES + 1}" in w.stdout and "cluster power" in w.stdout

        # Every expression of every panel, until all return data (rate windows need a few scrapes).
        exprs = [(name, title, e) for name, d in dashboards.build_all().items()
                 for title, e in dashboards.expressions(d)]  # fmt: skip
        assert len(exprs) > 30
        empty: list = exprs
        while empty:
            assert proc.poll() is None, f"the run ended before every panel had data: {empty}"
            assert time.monotonic() < deadline, empty
            results = {(n, t, e): _query(prom, _substitute(e, "1")) for n, t, e in exprs}
            empty = [k for k, r in results.items() if not r]
            time.sleep(0.5 if empty else 0)
        # And the headline figures are sane.
        first = {e: float(r[0]["value"][1]) for (_, _, e), r in results.items() if len(r) == 1}
        ov = dict(dashboards.expressions(dashboards.overview()))
        util = first[ov["Cluster CPU utilisation"]]
        assert 0.0 <= util <= 1.0
        assert NODES * 100.0 <= first[ov["Cluster power"]] <= NODES * 150.0
        assert first[ov["Energy so far"]] > NODES * 100.0 * 0.5
        assert first[ov["Nodes up"]] == NODES and first[ov["Time dilation factor"]] >= 1.0
        assert not math.isnan(first[ov["Gang switch skew p99"]])
        rejected = _query(prom, 'sum(testbed_admissions_total{outcome="rejected"})')
        assert float(rejected[0]["value"][1]) == 1.0  # too-big
        # The pipeline's frames reach Prometheus live: deadlines counted, latencies observed.
        while not _query(
            prom, "sum(testbed_deadlines_total) > 0 and sum(testbed_frame_latency_seconds_count) > 0"
        ):
            assert proc.poll() is None and time.monotonic() < deadline, output.text()
            time.sleep(0.5)

        assert proc.poll() is None, "the run ended before the checks were done"
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=120)
        output.t.join(timeout=10)
        assert code == 130, output.text()
        with pytest.raises(OSError):  # Prometheus was stopped with the run
            _get(f"{prom}/-/ready", timeout=2)
        assert _prometheus_pids(out) == []
        assert json.loads((out / "summary.json").read_text())["ended"] == "interrupted (Ctrl-C)"
        assert wait_clean(out) == ([], [])
    finally:
        kill_tree(proc)
        for pid in _prometheus_pids(out):
            os.kill(pid, 9)


def test_prometheus_flag_without_the_binary_exits_2_with_how_to_install(tmp_path, scenario_file):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(bindir)}
    p = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(scenario_file(SCENARIO)), "--out",
                        str(tmp_path / "x"), "--prometheus"], capture_output=True, text=True, env=env,
                       timeout=60)  # fmt: skip
    assert p.returncode == 2, p.stdout + p.stderr
    assert "apt-get install prometheus" in p.stderr
    assert not (tmp_path / "x").exists()  # nothing started, nothing written


def test_prometheus_dies_with_a_killed_parent(tmp_path):
    """kill -9 of the process that started it (no teardown runs): PR_SET_PDEATHSIG ends Prometheus."""
    require(
        shutil.which("prometheus") is not None,
        "needs prometheus on PATH (Debian: apt-get install prometheus; .ci/run does)",
    )
    code = (
        "import sys, time\n"
        "from testbed.monitoring.prometheus import LocalPrometheus, write_targets\n"
        "write_targets(sys.argv[1], 'x')\n"
        "print(LocalPrometheus(sys.argv[1]).start(), flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        url = parent.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        assert _get(f"{url}/api/v1/status/config")["status"] == "success"
        assert _prometheus_pids(tmp_path)
        parent.kill()
        parent.wait(timeout=10)
        deadline = time.monotonic() + 20
        while _prometheus_pids(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _prometheus_pids(tmp_path) == []
    finally:
        kill_tree(parent)
        for pid in _prometheus_pids(tmp_path):
            os.kill(pid, 9)
