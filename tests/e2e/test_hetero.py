"""Heterogeneous nodes end to end (issue 22): a scenario with ``cluster.groups`` run through the CLI on real
processes and in the simulator. Each node's envelope is made at its own group's rate (the start-up probe
compares each node against its own rate), the same work takes 1/0.43 as long on the 0.43 node, and the
results show each node's rate."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.emulator.mechanism import envelope as envmod

from ..conftest import require

SLOW = 0.43
#: One process per job, 0.5 s of CPU at rate 1.0 (2 x 250 ms, no barrier); batch puts job a on node 0.
SCENARIO = {
    "name": "hetero",
    "cluster": {
        "groups": [
            {"count": 1, "cpu_rate": SLOW, "memory_mb": 128},
            {"count": 1, "cpu_rate": 1.0, "memory_mb": 256},
        ],
        "envelope": "cgroup",
    },
    # TDF 4: the two nodes take 0.36 of a real core, which a host busy with other work still gives.
    "clock": {"tdf": 4, "rate_probe_s": 0.5},
    "scheduler": {"name": "batch"},
    "workload": {
        "jobs": [
            {
                "id": job,
                "size": 1,
                "app": {"kind": "synthetic", "iterations": 2, "gcomp": 250, "barrier": False},
            }
            for job in ("a", "b")
        ]
    },
}
#: How far a real job's time on the slow node may be from 1/0.43 of its time on the fast one: each carries
#: its start and end (tens of ms of emulated time at TDF 4), which do not scale with the rate.
TOLERANCE = 0.15


def _run(scenario: Path, out: Path, *extra: str) -> dict:
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(scenario), "--out", str(out), "-q", *extra],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out / "jobs.csv") as fh:
        return {r["job_id"]: r for r in csv.DictReader(fh)}


@pytest.mark.extended
@pytest.mark.cgroup
def test_each_node_runs_at_its_own_rate_on_real_processes_and_in_the_simulator(tmp_path):
    why = envmod.probe_v1()
    require(why is None, f"cgroup v1 envelope not usable here: {why}")
    scenario = tmp_path / "hetero.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))

    sim = _run(scenario, tmp_path / "sim", "--backend", "sim")
    assert {j: (r["allocated_resources"], r["allocated_rates"]) for j, r in sim.items()} == {
        "a": ("0", f"{SLOW:g}:0"),
        "b": ("1", "1:1"),
    }
    assert float(sim["a"]["execution_time"]) == pytest.approx(0.5 / SLOW, rel=1e-6)
    assert float(sim["b"]["execution_time"]) == pytest.approx(0.5, rel=1e-6)

    real = _run(scenario, tmp_path / "real")
    assert [real[j]["allocated_rates"] for j in "ab"] == [f"{SLOW:g}:0", "1:1"]
    ratio = float(real["a"]["execution_time"]) / float(real["b"]["execution_time"])
    print(f"\nreal: job a (rate {SLOW}) {real['a']['execution_time']} s, job b (rate 1) "
          f"{real['b']['execution_time']} s, ratio {ratio:.3f} (1/{SLOW} = {1 / SLOW:.3f})")  # fmt: skip
    assert ratio == pytest.approx(1 / SLOW, rel=TOLERANCE)
    # The probe measured each node against its own rate: configured = rate / TDF real cores.
    events = [json.loads(ln) for ln in (tmp_path / "real" / "events.jsonl").read_text().splitlines()]
    probes = {e["node"]: e for e in events if e["kind"] == "rate_probe"}
    assert {n: (p["cpu_rate"], p["configured"]) for n, p in probes.items()} == {
        0: (SLOW, SLOW / 4),
        1: (1.0, 0.25),
    }
    summary = json.loads((tmp_path / "real" / "summary.json").read_text())
    assert summary["node_rates"] == f"{SLOW:g}:0 1:1"
    assert summary["cpu_rate_error_max"] == max(abs(p["error"]) for p in probes.values())
