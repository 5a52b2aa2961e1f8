"""Results are never overwritten or mixed, and any run's results can be rebuilt from its events (issue 12,
Deliver 2). Through the CLI, as a user runs it; the simulator where the backend does not matter (the
folder handling is the same code), real processes for the rebuild of a real run."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import events as ev
from testbed import results

from .conftest import SMALL, start_cli, wait_clean

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def _jobs(path: Path) -> list[dict]:
    with open(path / "jobs.csv") as fh:
        return list(csv.DictReader(fh))


def test_an_existing_out_is_refused_and_force_replaces_it(tmp_path):
    out = tmp_path / "out"
    assert cli("run", str(QUICKSTART), "--backend", "sim", "--out", str(out), "-q").returncode == 0
    first = (out / "events.jsonl").read_text()
    (out / "mine.txt").write_text("a file of the user's, inside the results folder")

    p = cli("run", str(QUICKSTART), "--backend", "sim", "--out", str(out), "--set", "workload.seed=2", "-q")
    assert p.returncode == 2 and "already holds" in p.stderr and "--force" in p.stderr, p.stderr
    assert (out / "events.jsonl").read_text() == first  # untouched

    p = cli("run", str(QUICKSTART), "--backend", "sim", "--out", str(out), "--force", "-q")
    assert p.returncode == 0, p.stderr
    assert not (out / "mine.txt").exists()  # replaced, not merged
    # One run's jobs, not two runs' (appending doubled them before).
    assert len(_jobs(out)) == 8
    assert sum(1 for e in ev.read_jsonl(out / "events.jsonl") if e["kind"] == ev.JOB_SUBMITTED) == 8


def test_runs_started_in_the_same_second_get_their_own_default_folders(tmp_path):
    # Every name a run could take in the next minute is already taken (by an earlier run, say), so the
    # three runs collide there, with it and with each other: each must still get a folder of its own.
    taken = set()
    for k in range(60):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() + k))
        d = tmp_path / "results" / f"quickstart-sim-{stamp}"
        d.mkdir(parents=True, exist_ok=True)
        taken.add(d)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "testbed.cli", "run", str(QUICKSTART), "--backend", "sim", "-q"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    new = sorted(set((tmp_path / "results").iterdir()) - taken)
    assert len(new) == 3, new
    for f in new:
        assert f.name.rsplit("-", 1)[1] in {"2", "3", "4"}, f.name
        assert len(_jobs(f)) == 8, f
    assert all(not any(d.iterdir()) for d in taken)  # nobody wrote into a taken folder


def test_event_files_are_opened_fresh(tmp_path):
    path = tmp_path / "events" / "node0.jsonl"
    path.parent.mkdir()
    path.write_text('{"t": 1, "kind": "job_submitted", "job": "ghost"}\n')
    w = ev.EventWriter(path, "node0")
    w.emit(ev.RUN_INFO, t=0.0, node=0)
    w.close()
    assert [e["kind"] for e in ev.read_jsonl(path)] == [ev.RUN_INFO]


def test_results_rebuilds_a_simulated_run(tmp_path):
    out = tmp_path / "sim"
    assert cli("run", str(QUICKSTART), "--backend", "sim", "--out", str(out), "-q").returncode == 0
    jobs, summary = (out / "jobs.csv").read_text(), json.loads((out / "summary.json").read_text())
    assert (summary["ended"], summary["error"]) == ("all jobs ended", None)
    (out / "jobs.csv").unlink()
    (out / "summary.json").unlink()
    p = cli("results", str(out))
    assert p.returncode == 0, p.stderr
    assert (out / "jobs.csv").read_text() == jobs
    rebuilt = json.loads((out / "summary.json").read_text())
    # Everything computed from the events is the same; what only the driver knew is said to be unknown.
    for key in ("jobs", "jobs_by_state", "mean_response_time_s", "makespan_s", "energy_j", "backend"):
        assert rebuilt[key] == summary[key], key
    assert rebuilt["ended"].startswith("not recorded") and rebuilt["error"] is None


def test_results_refuses_a_folder_without_a_run(tmp_path):
    p = cli("results", str(tmp_path))
    assert p.returncode == 2 and "holds no run" in p.stderr
    p = cli("results", str(tmp_path / "nope"))
    assert p.returncode == 2 and "no such folder" in p.stderr


@pytest.mark.slow
def test_results_rebuilds_a_real_run_from_its_per_node_logs(scenario_file, tmp_path):
    out = tmp_path / "real"
    p = start_cli(["run", str(scenario_file(SMALL)), "--out", str(out), "-q"])
    text, _ = p.communicate(timeout=240)
    assert p.returncode == 0, text
    assert wait_clean(out) == ([], [])
    before = json.loads((out / "summary.json").read_text())
    jobs = (out / "jobs.csv").read_text()
    for name in ("events.jsonl", "jobs.csv", "summary.json"):
        (out / name).unlink()
    # Put the driver's summary back to see it kept: what the events cannot tell (start-up time).
    (out / "summary.json").write_text(
        json.dumps({"ended": before["ended"], "startup_s": before["startup_s"]})
    )
    t = time.monotonic()
    r = cli("results", str(out))
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t < 60
    assert (out / "jobs.csv").read_text() == jobs
    after = json.loads((out / "summary.json").read_text())
    for key in ("jobs_by_state", "makespan_s", "tdf", "envelope", "cpu_rate_error_max", "gang_skew_ms_p99"):
        assert after[key] == before[key], key
    assert after["ended"] == "all jobs ended" and after["startup_s"] == before["startup_s"]
    assert after["backend"] == "ray" and results.unplanned(_jobs(out)) == []


def test_a_run_folder_that_holds_events_is_never_reused_by_the_runner(tmp_path):
    from testbed import runner
    from testbed.scenario import load

    scn = load(QUICKSTART)
    runner.run_once(scn, "sim", tmp_path / "r")
    with pytest.raises(runner.PreflightError, match="already holds a run's events"):
        runner.run_once(scn, "sim", tmp_path / "r")
    assert os.listdir(tmp_path / "r")
