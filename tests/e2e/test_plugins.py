"""A program kind from outside the tree, installed the way a third party's would be (an entry point in the
``testbed.apps`` group of an installed distribution), written once and run by both backends through the
CLI; and the registry's refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from .conftest import wait_clean

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


@pytest.fixture
def plugin_env(tmp_path) -> dict:
    """An installed distribution 'pingpong-kind' (a .dist-info on the path) whose entry point names
    tests/plugins/pingpong_kind.py: what `pip install` of a plug-in package leaves behind."""
    site = tmp_path / "site"
    dist = site / "pingpong_kind-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pingpong-kind\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[testbed.apps]\npingpong = pingpong_kind:PingPong\n")
    path = os.pathsep.join([str(site), str(PLUGINS), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path}


def _cli(args: list[str], env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


def _scenario(tmp_path: Path, **extra) -> Path:
    doc = {
        "name": "pingpong",
        "cluster": {"nodes": 4},
        "clock": {"rate_probe_s": 0.3},
        "scheduler": {"name": "batch"},
        "workload": {
            "jobs": [
                {"id": "pp", "size": 4, "app": {"kind": "pingpong", "rounds": 20, "work": 5}},
                {"id": "syn", "size": 2, "app": {"iterations": 5, "gcomp": 10}},
            ]
        },
        **extra,
    }
    p = tmp_path / "pingpong.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def test_a_kind_not_installed_is_refused_naming_the_known_ones(tmp_path):
    p = _cli(["validate", str(_scenario(tmp_path))])
    assert p.returncode == 2
    assert "workload.jobs.0.app.kind: unknown program kind 'pingpong'; known kinds: " in p.stderr
    assert "synthetic" in p.stderr.split("known kinds: ")[1]


def test_an_installed_kind_is_listed_validated_and_simulated(tmp_path, plugin_env):
    p = _cli(["apps"], env=plugin_env)
    assert p.returncode == 0 and "pingpong" in p.stdout and "rounds" in p.stdout, p.stdout + p.stderr
    bad = tmp_path / "bad.yaml"
    doc = yaml.safe_load(_scenario(tmp_path).read_text())
    doc["workload"]["jobs"][0]["app"]["rounds"] = 0
    bad.write_text(yaml.safe_dump(doc))
    p = _cli(["validate", str(bad)], env=plugin_env)
    assert p.returncode == 2 and "workload.jobs.0.app.rounds" in p.stderr, p.stderr

    out = tmp_path / "sim"
    p = _cli(["run", str(_scenario(tmp_path)), "--backend", "sim", "--out", str(out), "-q"], env=plugin_env)
    assert p.returncode == 0, p.stdout + p.stderr
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    rounds = [e["value"] for e in events if e["kind"] == "progress" and e.get("unit") == "rounds"]
    assert rounds.count(20) == 4  # every rank reported its last round
    summary = json.loads((out / "summary.json").read_text())
    assert summary["jobs_by_state"] == {"COMPLETED_SUCCESSFULLY": 2}
    # Each round costs the pair 2 x 5 ms of CPU plus two message latencies: 20 rounds, about 0.2 s.
    finish = {e["job"]: e["t"] for e in events if e["kind"] == "job_finished"}
    assert 0.2 <= finish["pp"] < 0.21


@pytest.mark.slow
def test_an_installed_kind_runs_on_real_processes(tmp_path, plugin_env):
    out = tmp_path / "real"
    p = _cli(["run", str(_scenario(tmp_path)), "--out", str(out), "-q"], env=plugin_env, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert wait_clean(out) == ([], [])
    events = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    last = {}
    for e in events:
        if e["kind"] == "progress" and e.get("job") == "pp":
            last[e["rank"]] = max(last.get(e["rank"], 0), e["value"])
    assert last == {0: 20, 1: 20, 2: 20, 3: 20}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["jobs_by_state"] == {"COMPLETED_SUCCESSFULLY": 2}
