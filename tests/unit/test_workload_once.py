"""The run takes the workload its checks built (issue 23): `testbed run` built every job twice, once in the
pre-flight checks and once for the run, a quarter of a second of the NASA replay's 3.7 s of CPU. The
checks' jobs serve the one run of the same (frozen) scenario object that follows; anything else builds
anew."""

from __future__ import annotations

from testbed import runner
from testbed.scenario import load
from testbed.scenario import workload as wl

DOC = {
    "name": "once",
    "cluster": {"nodes": 4},
    "scheduler": {"name": "batch", "params": {"backfill": True}},
    "workload": {"seed": 5, "generator": {"count": 8, "mean_interarrival_s": 1, "duration": {"mean_s": 2}}},
}


def _counting_builds(monkeypatch) -> list[str]:
    """The real build, each call's scenario name noted."""
    calls: list[str] = []
    real = wl.build

    def build(scn):
        calls.append(scn.name)
        return real(scn)

    monkeypatch.setattr(runner, "build", build)
    return calls


def test_the_run_after_its_checks_builds_no_job_again(tmp_path, monkeypatch):
    calls = _counting_builds(monkeypatch)
    scn = load(doc=DOC)
    runner.preflight(scn, "sim", tmp_path / "a")
    summary = runner.run_once(scn, "sim", tmp_path / "a")
    assert calls == ["once"]  # the checks' build only
    # The same jobs as a run that built its own.
    fresh = runner.run_once(load(doc=DOC), "sim", tmp_path / "b")
    assert calls == ["once", "once"]
    assert (tmp_path / "a" / "jobs.csv").read_text() == (tmp_path / "b" / "jobs.csv").read_text()
    assert summary["jobs"] == fresh["jobs"] == 8
    # Taken once: the next run of that scenario builds its own.
    runner.run_once(scn, "sim", tmp_path / "c")
    assert calls == ["once", "once", "once"]


def test_another_scenario_object_is_built_anew(tmp_path, monkeypatch):
    calls = _counting_builds(monkeypatch)
    runner.preflight(load(doc=DOC), "sim", tmp_path / "a")
    runner.run_once(load(doc=DOC), "sim", tmp_path / "a")  # equal content, another object: not the checks'
    assert calls == ["once", "once"]
