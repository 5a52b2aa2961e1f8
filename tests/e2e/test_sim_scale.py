"""The simulator on a long run, through the CLI: its log is written as it goes (an interrupted run keeps
what it simulated, with a summary that says so), and the progress display shows jobs and emulated time."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "scenarios" / "trace-nasa.yaml"

pytestmark = pytest.mark.slow


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


# "ignored": started as a background job of a script is (the shell ignores SIGINT for it, and the ignore
# survives exec); the run still stops on SIGINT, where Python alone would have run it to its end.
@pytest.mark.parametrize("start", ["default", "ignored"])
def test_ctrl_c_keeps_what_the_simulator_had_logged(tmp_path, start):
    out = tmp_path / "sim"
    p = subprocess.Popen(
        [sys.executable, "-m", "testbed.cli", "run", str(TRACE), "--backend", "sim", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint if start == "ignored" else None,
    )
    log = out / "events.jsonl"
    deadline = time.monotonic() + 60
    while (not log.exists() or log.stat().st_size < 1_000_000) and time.monotonic() < deadline:
        time.sleep(0.1)  # a megabyte of log: well into the run (the whole run takes about a minute)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    # The progress display counted jobs and emulated time while it ran (stderr, unless -q).
    assert "jobs  t=" in err and "s emulated" in err, err[-500:]
    lines = log.read_text().splitlines()
    assert len(lines) > 1000
    times = [json.loads(line)["t"] for line in lines[:-1]]  # the last line may be torn by the interrupt
    assert times == sorted(times)  # written in time order, as it happened
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ended"] == "interrupted (Ctrl-C)"
    assert 0 < summary["jobs_by_state"].get("COMPLETED_SUCCESSFULLY", 0) < 10000
