"""`testbed watch` without an argument (issue 24): it follows the newest *live* run under results/, a run
whose folder claim is held (testbed/results/folder.py), and says none is live when every run there has
finished, rather than showing a finished run's dashes forever."""

from __future__ import annotations

import os

from testbed.monitoring import prometheus as prom
from testbed.monitoring import watch
from typer.testing import CliRunner

from testbed.cli import app
from testbed.results import folder


def _run_folder(results, name: str, mtime: float) -> folder.Claim:
    """A run's folder as a run leaves it: claimed first, then its exporters' targets written."""
    run = results / name
    c = folder.claim(run)
    prom.write_targets(run, f"run-{name}", nodes=[(0, "127.0.0.1:9")])
    os.utime(run / "prometheus" / "targets.json", (mtime, mtime))
    return c


def test_watch_picks_the_live_run_over_a_newer_finished_one(tmp_path, monkeypatch):
    results = tmp_path / "results"
    live = _run_folder(results, "live", mtime=1_000.0)
    done = _run_folder(results, "done", mtime=2_000.0)  # written last, so the newest
    done.release()  # its run ended: the marker stays, its lock is gone
    try:
        assert watch.newest_run(results) == results / "done"
        assert watch.newest_live_run(results) == (live.path, 2)

        live.release()  # now both have finished
        assert watch.newest_live_run(results) == (None, 2)
        monkeypatch.chdir(tmp_path)
        r = CliRunner().invoke(app, ["watch"], catch_exceptions=False)
        assert r.exit_code == 1
        assert "no run is live under results/ (2 finished runs there with exporters)" in r.output
    finally:
        live.release()
