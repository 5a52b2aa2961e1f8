"""The runner-level interface (testbed/core/backend.py): both backends implement it, a run's outcome is
typed, and the runner takes one path for either: results written from the event log first, then Ctrl-C
goes on up or RunFailed is raised with the outcome's exit status. Nothing here starts Ray."""

from __future__ import annotations

import inspect
import json

import pytest

from testbed import runner
from testbed.core import events as ev
from testbed.core.backend import INTERRUPTED, Backend, Hooks, Outcome, RealOutcome
from testbed.emulator.backend import RayBackend, RayStartError
from testbed.results import comparison
from testbed.scenario import load, sweep
from testbed.sim import Simulation

DOC = {
    "name": "tiny",
    "cluster": {"nodes": 2},
    "scheduler": {"name": "batch"},
    "workload": {"seed": 1, "jobs": [{"id": "a", "size": 2, "app": {"iterations": 2}}]},
}


def _summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_both_backends_implement_the_same_interface():
    want = list(inspect.signature(Backend.run_scenario).parameters)[1:]  # without self
    for backend in (Simulation, RayBackend(prometheus=False)):
        assert list(inspect.signature(backend.run_scenario).parameters) == want
    assert (Simulation.name, RayBackend.name) == ("sim", "ray")
    scn = load(doc=DOC)
    assert runner._backend("sim", False, scn) is Simulation
    ray_backend = runner._backend("ray", True, scn)
    assert isinstance(ray_backend, RayBackend) and ray_backend.prometheus


def test_the_outcomes_summary_fields_are_the_summarys_keys_in_its_order():
    assert list(Outcome(tdf=1.0).summary_fields()) == ["ended", "error"]
    real = RealOutcome(tdf=2.0)
    assert list(real.summary_fields()) == [
        "ended", "error", "run_id", "startup_s", "phases_s", "agent_priority", "session_priority",
        "control_group", "control_cpu_s", "envelope_note", "host_memory_note", "host_speed_s",
        "host_speeds_s", "nodes_down", "host_cores",
    ]  # fmt: skip
    joined = RealOutcome(tdf=2.0, agent_hosts=[{"node": "x"}], logs_lost=[])
    assert list(joined.summary_fields())[-2:] == ["agent_hosts", "logs_lost"]


def test_hooks_left_out_do_nothing():
    h = Hooks(on_status=None)
    assert h.on_status({}) is None and h.on_phase("x") is None and h.notice("x") is None


def test_a_single_run_does_not_go_through_the_sweep(tmp_path, monkeypatch):
    def nope(*a, **k):
        raise AssertionError("a single run went through the sweep")

    monkeypatch.setattr(sweep, "variants", nope)
    monkeypatch.setattr(comparison, "write", nope)
    monkeypatch.setattr(comparison, "comparison_rows", nope)
    scn = load(doc=DOC)
    (s,) = runner.run(scn, "sim", tmp_path / "r")
    assert s["ended"] == "all jobs ended" and s["jobs_by_state"] == {"COMPLETED_SUCCESSFULLY": 1}


def test_a_simulation_that_raises_writes_its_results_then_run_failed_exit_1(tmp_path, monkeypatch):
    def boom(self, on_status=None, every_s=0.25):
        raise RuntimeError("policy bug")

    monkeypatch.setattr(Simulation, "run", boom)
    with pytest.raises(runner.RunFailed, match="the simulation stopped: RuntimeError: policy bug") as ei:
        runner.run_once(load(doc=DOC), "sim", tmp_path / "r")
    assert ei.value.exit_code == 1 and isinstance(ei.value.__cause__, RuntimeError)
    s = _summary(tmp_path / "r")
    assert s["error"].startswith("the simulation stopped: RuntimeError: policy bug")
    assert s["ended"] == f"error: {s['error']}" and s["backend"] == "sim" and s["jobs_never_submitted"] == 1


def test_ctrl_c_in_a_simulation_writes_its_results_then_goes_on_up(tmp_path, monkeypatch):
    def interrupted(self, on_status=None, every_s=0.25):
        raise KeyboardInterrupt

    monkeypatch.setattr(Simulation, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner.run_once(load(doc=DOC), "sim", tmp_path / "r")
    s = _summary(tmp_path / "r")
    assert (s["ended"], s["error"]) == (INTERRUPTED, None)


class _Fake:
    """A backend that ends as told, having logged nothing."""

    name = "ray"

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def run_scenario(self, scn, jobs, run_dir, hooks):
        ev.write_all([], run_dir / "events.jsonl")
        return self.outcome


def test_a_real_run_that_could_not_start_ray_exits_2_with_every_summary_key(tmp_path, monkeypatch):
    out = RealOutcome(tdf=3.0, envelope="unknown", run_id="r1", phases_s={"begin": 0.1})
    _with_outcome(out)._ended_by(RayStartError("Ray failed to start: OSError: no"))
    monkeypatch.setattr(runner, "_backend", lambda name, prometheus, scn: _Fake(out))
    with pytest.raises(runner.RunFailed) as ei:
        runner.run_once(load(doc=DOC), "ray", tmp_path / "r")
    assert ei.value.exit_code == 2 and str(ei.value) == "Ray failed to start: OSError: no"
    s = _summary(tmp_path / "r")
    assert s["ended"] == "error: Ray failed to start: OSError: no" and s["run_id"] == "r1"
    assert s["tdf"] == 3.0 and s["envelope"] == "unknown" and "agent_hosts" not in s


def _with_outcome(outcome: RealOutcome) -> RayBackend:
    b = RayBackend()
    b.outcome = outcome
    return b


def test_how_the_ray_backend_says_what_ended_a_run():
    b = _with_outcome(RealOutcome(tdf=1.0))
    b._ended_by(ValueError("bad"))
    assert b.outcome.error.startswith("ValueError: bad") and b.outcome.exit_code == 1
    b._ended_by(RuntimeError("later"))  # the first error said is kept
    assert b.outcome.error.startswith("ValueError: bad") and b.outcome.ended == f"error: {b.outcome.error}"
    b._ended_by(KeyboardInterrupt())  # Ctrl-C during the teardown: interrupted, the error kept
    assert b.outcome.ended == INTERRUPTED and b.outcome.error.startswith("ValueError: bad")
    assert isinstance(b.outcome.cause, KeyboardInterrupt)
