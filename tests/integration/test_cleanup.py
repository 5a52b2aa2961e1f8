"""`testbed cleanup` (issue 24): it cleans what runs whose driver is gone left, never a live run (one whose
janitor watches a live driver); --dry-run removes nothing; the output is a sentence, or JSON. Real
processes: a "driver" and marked processes, as a run leaves them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest

from testbed.janitor import RUN_ID_ENV, start_janitor


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", "cleanup", *args], capture_output=True, text=True, timeout=60
    )


@pytest.fixture
def runs():
    """A live run (a driver process with its janitor, and a marked process) and a run whose driver is gone
    (only a marked process left); everything killed and reaped at teardown."""
    live, dead = f"t-live-{uuid.uuid4().hex[:8]}", f"t-dead-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if k != RUN_ID_ENV}
    driver = subprocess.Popen(["sleep", "120"], env=env)
    janitor = start_janitor(live, [driver.pid])
    marked = {r: subprocess.Popen(["sleep", "120"], env={**env, RUN_ID_ENV: r}) for r in (live, dead)}
    time.sleep(0.3)  # the janitor is up
    yield live, dead, driver, marked
    driver.kill()
    driver.wait()
    janitor.wait(timeout=30)  # its driver gone, it cleans the live run's process and exits
    for p in marked.values():
        if p.poll() is None:
            p.kill()
        p.wait()


def test_cleanup_spares_a_live_run_and_cleans_one_whose_driver_is_gone(runs):
    live, dead, driver, marked = runs
    r = _cli("--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["dry_run"] is True
    assert doc["live_runs"][live] == [driver.pid]
    found = {x["run_id"]: x for x in doc["runs"]}
    assert live not in found and marked[dead].pid in found[dead]["processes"]
    assert _alive(marked[dead].pid)  # a dry run removes nothing

    r = _cli("--run", live)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        f"error: --run {live}: that run is live (driver pid {driver.pid}); stop it (Ctrl-C, or kill the "
        "driver) and its janitor cleans it up"
    )

    r = _cli("--run", dead)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        f"Removed 1 process(es), 0 cgroup(s) left by 1 run(s) whose driver is gone ({dead})."
    )
    marked[dead].wait(timeout=10)
    assert _alive(marked[live].pid) and _alive(driver.pid)  # the live run untouched
