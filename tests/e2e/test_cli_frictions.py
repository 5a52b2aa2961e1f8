"""The command line's small frictions (issue 24): --version, --json for machines, watch that picks a live
run or says none is, validate's closing line, dashboards written where the user is, and a job wider
than the cluster refused by validate with one line."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml
from typer.testing import CliRunner

from testbed.cli import app


def _cli(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_version_is_printed_by_the_installed_command():
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("testbed 0.") and r.stdout.count("\n") == 1


def test_schedulers_apps_and_results_speak_json(tmp_path):
    scheds = json.loads(_cli("schedulers", "--json").stdout)
    gang = next(s for s in scheds if s["name"] == "gang")
    assert "quantum_ms" in gang["params"] and gang["params"]["quantum_ms"]["meaning"]
    assert json.loads(_cli("schedulers", "gang", "--json").stdout)["name"] == "gang"
    kinds = {k["name"]: k for k in json.loads(_cli("apps", "--json").stdout)}
    assert "gcomp" in kinds["synthetic"]["fields"]
    doc = {"cluster": {"nodes": 2}, "workload": {"jobs": [{"size": 2, "app": {"iterations": 2}}]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    assert (
        _cli(
            "run", str(tmp_path / "s.yaml"), "--backend", "sim", "--out", str(tmp_path / "r"), "-q"
        ).exit_code
        == 0
    )
    r = _cli("results", str(tmp_path / "r"), "--json")
    assert r.exit_code == 0
    summaries = json.loads(r.stdout)  # nothing but the JSON on stdout
    assert summaries[str(tmp_path / "r")]["jobs"] == 1


def test_watch_says_no_run_is_live_and_that_the_simulator_has_no_exporters(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _cli("watch")
    assert r.exit_code == 1 and "no run is live under results/" in r.output
    doc = {"cluster": {"nodes": 2}, "workload": {"jobs": [{"size": 1}]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    _cli("run", "s.yaml", "--backend", "sim", "--out", "results/sim", "-q")
    r = _cli("watch", "results/sim")
    assert r.exit_code == 2
    assert "results/sim is a simulator run: the simulator has no live exporters" in r.output


def test_validate_ends_with_one_line_saying_ok_and_what_it_would_use(tmp_path):
    doc = {"cluster": {"nodes": 4}, "workload": {"jobs": [{"size": 2}, {"size": 4}]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    r = _cli("validate", str(tmp_path / "s.yaml"))
    assert yaml.safe_load(r.stdout)["cluster"]["nodes"] == 4  # stdout: the scenario, still YAML
    last = r.output.strip().splitlines()[-1]
    assert last.startswith(f"ok: {tmp_path / 's.yaml'} is valid: 2 jobs on 4 nodes, scheduler gang; ")
    assert " envelope " in last and " TDF " in last
    last = _cli("validate", str(tmp_path / "s.yaml"), "--backend", "sim").output.strip().splitlines()[-1]
    assert last.endswith("in the simulator (envelope modelled, no dilation)")


def test_a_job_wider_than_the_cluster_fails_validate_with_one_line(tmp_path):
    doc = {"cluster": {"nodes": 16}, "workload": {"jobs": [{"size": 17}]}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc))
    r = _cli("validate", str(tmp_path / "s.yaml"))
    assert r.exit_code == 2
    assert r.output.strip() == (
        "error: invalid scenario: workload.jobs.0.size: 17 is above cluster.nodes (16), so the job can never "
        "run; lower it, add nodes, or set workload.oversize: reject to have the scheduler reject it"
    )


def test_a_duplicate_key_fails_validate_with_one_line_naming_both_lines(tmp_path):
    # The second top-level scheduler: would silently win, dropping the first one's parameters.
    f = tmp_path / "dup.yaml"
    f.write_text(
        "name: dup\n"
        "cluster: {nodes: 4}\n"
        "scheduler: {name: gang, params: {mpl: 2}}\n"
        "workload: {jobs: [{size: 2}]}\n"
        "scheduler: {name: batch}\n"
    )
    r = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "validate", str(f)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout == ""
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: {f}: ") and "duplicate key 'scheduler' at lines 3 and 5" in r.stderr


def test_dashboards_are_generated_in_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _cli("dashboards", "generate")
    assert r.exit_code == 0
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["deadlines.json", "node.json", "overview.json"]
    assert (
        _cli("dashboards", "generate", "--out", "d").exit_code == 0
        and (tmp_path / "d" / "node.json").exists()
    )
