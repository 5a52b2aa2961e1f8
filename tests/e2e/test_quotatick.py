"""``cluster.quota_tick_us`` end to end: a run on real processes starts the quota tick, says so in its
summary, and leaves no tick behind (testbed/emulator/mechanism/quotatick.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.emulator.mechanism import envelope as envmod

from ..conftest import require

SCENARIO = {
    "name": "quota-tick",
    "cluster": {"nodes": 2, "envelope": "cgroup", "cfs_period_ms": 10, "quota_tick_us": 500},
    "clock": {"tdf": 4, "rate_probe_s": 0.5},
    "scheduler": {"name": "batch"},
    "workload": {
        "jobs": [{"id": "a", "size": 2, "app": {"kind": "synthetic", "iterations": 2, "gcomp": 100}}]
    },
}


def _ticks() -> list[int]:
    """Processes of this host whose command line is the quota tick's."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"testbed.emulator.mechanism.quotatick" in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


@pytest.mark.cgroup
def test_a_run_with_a_quota_tick_records_it_and_leaves_none(tmp_path: Path):
    require(envmod.probe_v1() is None, f"cgroup v1 envelope not usable here: {envmod.probe_v1()}")
    require(os.geteuid() == 0, "SCHED_FIFO needs root (CAP_SYS_NICE)")
    before = _ticks()
    scenario = tmp_path / "tick.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(scenario), "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["quota_tick"].startswith("every 500 us on CPUs "), summary["quota_tick"]
    assert summary["ended"] == "all jobs ended"
    assert [t for t in _ticks() if t not in before] == []
