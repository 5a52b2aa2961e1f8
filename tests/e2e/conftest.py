"""Helpers for end-to-end tests: small scenarios, and checks that nothing of a run is left on the host."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

CGROUP_ROOT = Path("/sys/fs/cgroup")


def run_ids(out: Path) -> set[str]:
    """The run ids a results folder's agents reported (one per repetition)."""
    ids = set()
    for f in out.rglob("events/node*.jsonl"):
        for line in f.read_text().splitlines():
            if '"run_id"' in line:
                try:
                    ids.add(json.loads(line)["run_id"])
                except (json.JSONDecodeError, KeyError):
                    continue
    return ids


def run_marked_pids(ids: set[str]) -> list[int]:
    """Processes carrying one of these TESTBED_RUN_IDs in their environment: those runs' workers.

    Scoped to the test's own runs: another run on the same machine (a benchmark, another test session)
    is none of this test's business."""
    me = os.getpid()
    marks = [f"TESTBED_RUN_ID={i}\0".encode() for i in ids]
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            env = (d / "environ").read_bytes() + b"\0"
        except OSError:
            continue
        if any(m in env for m in marks):
            found.append(int(d.name))
    return found


def testbed_cgroups(ids: set[str]) -> list[str]:
    found = []
    if CGROUP_ROOT.exists():
        for hier in CGROUP_ROOT.iterdir():
            for i in ids:
                for top in ("testbed", "testbed-docker"):  # the docker envelope's containers' parent
                    if (hier / top / i).exists():
                        found.append(str(hier / top / i))
    return found


def wait_clean(out: Path, timeout: float = 20.0) -> tuple[list[int], list[str]]:
    """Waits until no worker and no cgroup of the runs behind ``out`` remains; returns what is left."""
    ids = run_ids(out)
    assert ids, f"no run id found under {out}: the agents never started?"
    deadline = time.monotonic() + timeout
    while True:
        pids, cgs = run_marked_pids(ids), testbed_cgroups(ids)
        if (not pids and not cgs) or time.monotonic() > deadline:
            return pids, cgs
        time.sleep(0.2)


def wait_for_event(path: Path, pred, timeout: float = 60.0) -> dict:
    """Waits until some events/*.jsonl line satisfies ``pred``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for f in sorted(path.glob("events/*.jsonl")):
            try:
                lines = f.read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if pred(e):
                    return e
        time.sleep(0.1)
    raise AssertionError(f"no matching event in {path} within {timeout} s")


SMALL = {
    "name": "small",
    "cluster": {"nodes": 4},
    "clock": {"rate_probe_s": 0.5},
    "scheduler": {"name": "gang", "params": {"mpl": 2, "quantum_ms": 50}},
    "workload": {
        "seed": 1,
        "jobs": [
            {"id": "a", "size": 4, "app": {"iterations": 10, "gcomp": 30}},
            {"id": "b", "size": 2, "submit_s": 0.1, "app": {"iterations": 10, "gcomp": 2, "gio": 2}},
            {"id": "c", "size": 2, "submit_s": 0.2, "app": {"iterations": 10, "gcomp": 30}},
        ],
    },
}

LONG = {
    **SMALL,
    "name": "long",
    "workload": {
        "seed": 1,
        "jobs": [
            {"id": "long", "size": 4, "app": {"iterations": 1000, "gcomp": 50}},
            {"id": "long2", "size": 2, "app": {"iterations": 1000, "gcomp": 50}},
        ],
    },
}


@pytest.fixture
def scenario_file(tmp_path):
    def make(doc: dict) -> Path:
        p = tmp_path / f"{doc['name']}.yaml"
        p.write_text(yaml.safe_dump(doc))
        return p

    return make


PLUGINS = Path(__file__).parent / "plugins"


def plugin_env(tmp_path: Path, misbehave: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a CLI run that sees the test-only plug-ins (plugins/): the ``faulty`` scheduler,
    registered through the entry-point group as a third party would, and workers that misbehave as
    ``misbehave`` asks (job id -> fork | ignore-term | hog-memory; plugins/sitecustomize.py)."""
    dist = tmp_path / "plugin-dist"
    info = dist / "tb_faulty-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tb-faulty\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[testbed.schedulers]\nfaulty = tb_faulty:FaultyGang\n")
    path = os.pathsep.join(p for p in (str(PLUGINS), str(dist), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, **extra}
    if misbehave:
        env["TB_TEST_MISBEHAVE"] = ",".join(f"{job}={what}" for job, what in misbehave.items())
    return env


def start_cli(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.fixture(autouse=True)
def clean_after_failure(tmp_path):
    """A failed test may leave its own run behind; sweep exactly those runs so one failure does not
    cascade (the tests themselves assert that nothing was left before this runs)."""
    yield
    from testbed.janitor import cleanup_run

    for i in run_ids(tmp_path):
        cleanup_run(i)


def kill_tree(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
