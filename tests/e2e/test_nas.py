"""The NAS kernels as jobs (the ``nas`` kind, apps/nas/kind.py; issue 21): a kernel runs on real
processes and verifies, one that does not verify fails its job with one ``error:`` line naming the
kernel and the value, a size NPB does not allow is refused before anything runs, and the simulator
replays the kernel's measured model without recording it again."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from testbed.apps.nas import kind

from .conftest import wait_clean

pytestmark = pytest.mark.slow


def _cli(args: list[str], timeout: float = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, timeout=timeout, **kw
    )


def _scenario(tmp_path: Path, jobs: list[dict], nodes: int = 2) -> Path:
    doc = {
        "name": "nas",
        "cluster": {"nodes": nodes},
        "clock": {"rate_probe_s": 0.3},
        "scheduler": {"name": "gang", "params": {"quantum_ms": 200}},
        "monitoring": {"enabled": False},
        "workload": {"jobs": jobs},
    }
    p = tmp_path / "nas.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _jobs(out: Path) -> dict[str, dict]:
    with open(out / "jobs.csv") as fh:
        return {r["job_id"]: r for r in csv.DictReader(fh)}


def _errors(p: subprocess.CompletedProcess) -> list[str]:
    return [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("error:")]


def test_a_kernel_verifies_on_real_processes_and_one_that_does_not_fails_its_job(tmp_path) -> None:
    # The wrong reference: EP's own file, its class S sum changed, as a user's mpi program. NPB's check
    # is the kernel's own, so a wrong result (here: a wrong reference) must fail the job, not pass it.
    wrong = tmp_path / "ep_wrong.py"
    wrong.write_text(
        "import runpy, sys\n"
        f"ns = runpy.run_path({kind.HERE.joinpath('ep.py').as_posix()!r})\n"
        "ns['CLASSES']['S']['sx'] = 1.0\n"
        "ns['main'](sys.argv)\n"
    )
    jobs = [
        {"id": "cg", "size": 2, "app": {"kind": "nas", "kernel": "cg", "class": "S"}},
        {"id": "epbad", "size": 2, "app": {"kind": "mpi", "program": str(wrong), "args": ["S"]}},
    ]
    out = tmp_path / "out"
    p = _cli(["run", str(_scenario(tmp_path, jobs)), "--out", str(out)])
    rows = _jobs(out)
    assert rows["cg"]["final_state"] == "COMPLETED_SUCCESSFULLY", rows["cg"]
    assert rows["cg"]["job_class"] == "CG.S"
    assert "verification SUCCESSFUL" in (out / "logs" / "cg.0.out").read_text()
    assert rows["epbad"]["final_state"] == "COMPLETED_FAILED", rows["epbad"]
    errors = [e for e in _errors(p) if "epbad" in e]
    assert len(errors) == 1, p.stdout + p.stderr
    assert "NAS EP class S: sx = " in errors[0] and "does not verify against NPB's 1.0" in errors[0], errors
    assert wait_clean(out) == ([], [])


def test_a_size_npb_does_not_allow_is_refused_before_anything_runs(tmp_path) -> None:
    scn = _scenario(tmp_path, [{"id": "mg", "size": 3, "app": {"kind": "nas", "kernel": "mg"}}], nodes=4)
    out = tmp_path / "out"
    for cmd in (["validate", str(scn)], ["run", str(scn), "--out", str(out)]):
        p = _cli(cmd)
        assert p.returncode == 2
        assert p.stderr.strip().splitlines() == [
            "error: invalid scenario: workload.jobs.0.size: 3: NAS MG runs on a power of two of processes "
            "(NPB's rule); use 1, 2, 4, 8, 16..."
        ], p.stderr
    assert not out.exists()


def test_the_simulator_replays_the_measured_model_without_recording(tmp_path) -> None:
    # The committed model of IS class S on 2 ranks (benchmarks/mpi_profiles.py): nothing to record, and
    # the job takes what the model says (its busiest rank's CPU at least).
    assert kind.measured("is", "S", 2) is not None, "no committed model of IS.S on 2 ranks"
    scn = _scenario(tmp_path, [{"id": "is", "size": 2, "app": {"kind": "nas", "kernel": "is"}}])
    out = tmp_path / "out"
    traces = tmp_path / "traces"
    env = {**os.environ, "TESTBED_MPI_TRACES": str(traces)}
    p = _cli(["run", str(scn), "--backend", "sim", "--out", str(out)], env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "recording" not in p.stderr and not traces.exists()
    row = _jobs(out)["is"]
    assert row["final_state"] == "COMPLETED_SUCCESSFULLY"
    busiest = kind.Nas.ideal_runtime(kind.NasConfig(kernel="is"), 1.0, 2)
    assert float(row["execution_time"]) >= busiest * 0.999
