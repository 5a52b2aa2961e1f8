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

from testbed.core import events as ev
from testbed.results import folder as outfolder
from testbed.results import summary as results

from .conftest import SMALL, start_cli, wait_clean

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
NASA = ROOT / "scenarios" / "trace-nasa.yaml"


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

    # --force removes only what a run wrote: a file of the user's in it makes it refuse, removing nothing.
    p = cli("run", str(QUICKSTART), "--backend", "sim", "--out", str(out), "--force", "-q")
    assert p.returncode == 2 and "mine.txt" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert (out / "events.jsonl").read_text() == first and (out / "mine.txt").exists()

    (out / "mine.txt").unlink()
    p = cli("run", str(QUICKSTART), "--backend", "sim", "--out", str(out), "--force", "-q")
    assert p.returncode == 0, p.stderr
    assert outfolder.foreign_entries(out) == []
    # One run's jobs, not two runs' (appending doubled them before).
    assert len(_jobs(out)) == 8
    assert sum(1 for e in ev.read_jsonl(out / "events.jsonl") if e["kind"] == ev.JOB_SUBMITTED) == 8


def test_force_never_deletes_a_users_project_folder(tmp_path):
    # The user keeps their scenario beside their own files; a folder without a run's marker is not a
    # results folder, whatever it holds (a file named scenario.yaml was all --force looked for before).
    proj = tmp_path / "myproj"
    (proj / "data").mkdir(parents=True)
    (proj / "scenario.yaml").write_text(QUICKSTART.read_text())
    (proj / "notes.txt").write_text("my notes")
    (proj / "data" / "measurements.csv").write_text("a,b\n1,2\n")
    before = {p: p.read_bytes() for p in proj.rglob("*") if p.is_file()}
    for cmd in ("validate", "run"):
        p = cli(cmd, str(proj / "scenario.yaml"), "--backend", "sim", "--out", str(proj), "--force")
        assert p.returncode == 2, (cmd, p.stdout, p.stderr)
        line = p.stderr.strip()
        assert len(line.splitlines()) == 1 and "marker" in line and "remove it yourself" in line, line
    assert {p: p.read_bytes() for p in proj.rglob("*") if p.is_file()} == before


def test_force_never_replaces_a_live_runs_folder(tmp_path):
    out = tmp_path / "out"
    assert cli("run", str(QUICKSTART), "--backend", "sim", "--out", str(out), "-q").returncode == 0
    first = (out / "events.jsonl").read_bytes()
    # Another process holds the folder as a live run does (the marker's flock): --force must wait its turn.
    code = (
        "import sys, time; from testbed.results import folder as outfolder; "
        f"outfolder.claim({str(out)!r}, force=True); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for cmd in ("validate", "run"):
            p = cli(cmd, str(QUICKSTART), "--backend", "sim", "--out", str(out), "--force")
            assert p.returncode == 2 and "a run is writing it now" in p.stderr, (cmd, p.stderr)
        assert outfolder.is_live(out)
    finally:
        holder.kill()
        holder.wait()
    assert not outfolder.is_live(out)
    assert cli("run", str(QUICKSTART), "--backend", "sim", "--out", str(out), "--force", "-q").returncode == 0
    assert (out / "events.jsonl").read_bytes() == first  # same scenario, same seed: the same run again


def test_runs_started_together_on_one_new_out_never_share_it(tmp_path):
    # Check and claim were separate steps: two runs could both pass the check and write one folder (3 of 8
    # trials here). Each run has its own seed and quantum, so a mixed folder shows.
    out = tmp_path / "shared"
    variants = [(q, k) for k, q in enumerate((40, 50, 60, 70, 80, 90, 100, 110), 1)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "testbed.cli", "run", str(QUICKSTART), "--backend", "sim", "-q",
             "--out", str(out), "--set", f"scheduler.params.quantum_ms={q}",
             "--set", f"workload.seed={seed}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for q, seed in variants
    ]  # fmt: skip
    codes = []
    for p in procs:
        _, err = p.communicate(timeout=180)
        codes.append(p.returncode)
        if p.returncode != 0:
            assert p.returncode == 2 and len(err.strip().splitlines()) == 1 and "--out" in err, err
    assert codes.count(0) == 1, codes
    q, seed = variants[codes.index(0)]
    import yaml

    scn = yaml.safe_load((out / "scenario.yaml").read_text())
    assert (scn["scheduler"]["params"]["quantum_ms"], scn["workload"]["seed"]) == (q, seed)
    # The events are that run's: the same scenario run again alone gives the same log, byte for byte.
    again = tmp_path / "again"
    p = cli("run", str(QUICKSTART), "--backend", "sim", "-q", "--out", str(again),
            "--set", f"scheduler.params.quantum_ms={q}", "--set", f"workload.seed={seed}")  # fmt: skip
    assert p.returncode == 0, p.stderr
    strip = lambda path: [{k: v for k, v in e.items() if k != "wall"} for e in ev.read_jsonl(path)]  # noqa: E731
    assert strip(out / "events.jsonl") == strip(again / "events.jsonl")
    assert outfolder.foreign_entries(out) == []
    # The log is one run's: every line an event, and rebuilding it gives the same jobs.
    jobs = (out / "jobs.csv").read_text()
    assert cli("results", str(out)).returncode == 0
    assert (out / "jobs.csv").read_text() == jobs


def test_results_fails_on_a_damaged_event_line_and_passes_a_torn_last_one(tmp_path):
    out = tmp_path / "sim"
    assert cli("run", str(QUICKSTART), "--backend", "sim", "--out", str(out), "-q").returncode == 0
    lines = (out / "events.jsonl").read_bytes().splitlines(keepends=True)
    # A torn last line (a crash mid-write) is what a killed run leaves: passed over.
    (out / "events.jsonl").write_bytes(b"".join(lines) + lines[-1][:17])
    assert cli("results", str(out)).returncode == 0
    # An interleaved line anywhere else is damage: one line naming the file and line, exit 2.
    damaged = [*lines[:5], b'{"t": 1.0, "kind": "job_sta{"t": 2\n', *lines[5:]]
    (out / "events.jsonl").write_bytes(b"".join(damaged))
    p = cli("results", str(out))
    assert p.returncode == 2 and "line 6 is not an event" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def _interrupted_nasa(tmp_path: Path, after_events: int, ctrl_c: int) -> tuple[Path, dict]:
    """The NASA replay in the simulator, sent ``ctrl_c`` Ctrl-Cs 50 ms apart once its log holds
    ``after_events`` events; the run folder and its summary (the CLI exited 130)."""
    out = tmp_path / "nasa"
    p = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "run", str(NASA), "--backend", "sim", "-q", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum(1 for _ in _lines(out / "events.jsonl")) < after_events:
        time.sleep(0.2)
    for k in range(ctrl_c):
        if k:
            time.sleep(0.05)
        p.send_signal(2)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    return out, json.loads((out / "summary.json").read_text())


def test_an_interrupted_run_counts_the_jobs_it_never_reached(tmp_path):
    from testbed.scenario import load
    from testbed.scenario.workload import build

    _, summary = _interrupted_nasa(tmp_path, after_events=2000, ctrl_c=1)
    planned = len(build(load(NASA)))
    assert summary["ended"].startswith("interrupted")
    assert summary["jobs_never_submitted"] > 0
    assert summary["jobs"] + summary["jobs_never_submitted"] == planned


def test_a_second_ctrl_c_still_leaves_the_results(tmp_path):
    # The second Ctrl-C lands while the first one's results are written: it waits for them. Before, it
    # left a run with no jobs.csv and no summary.json, though the CLI said "partial results in".
    out, summary = _interrupted_nasa(tmp_path, after_events=20000, ctrl_c=2)
    assert summary["ended"].startswith("interrupted") and (out / "jobs.csv").exists()


def _lines(path: Path):
    try:
        with open(path, "rb") as fh:
            yield from fh
    except FileNotFoundError:
        return


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
    assert outfolder.foreign_entries(out) == []  # a real run writes only what --force may remove
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
