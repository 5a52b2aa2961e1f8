"""benchmarks/epoch_share.py: the model of paper 004's node scheduler (epochs, a counter per task, half of
an unused slice kept) that docs/measurements.md's "Paper 004: the 0-user point, and the node's epoch
scheduler modelled" rests on. Each check is a property the paper's description implies, on short runs
(20 emulated s)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "epoch_share.py"
_spec = importlib.util.spec_from_file_location("epoch_share", PATH)
epoch = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = epoch  # its dataclass looks its module up there
_spec.loader.exec_module(epoch)

MS = 20_000


def test_the_cpu_is_never_idle_beside_a_cpu_bound_process():
    r = epoch.run(49, [49], run_ms=MS)
    assert r["user_cpu"] + r["parallel_cpu"] == pytest.approx(1.0, abs=1e-9)


def test_a_user_whose_slice_covers_its_demand_is_not_slowed():
    # CCS at L 0.2 on a slow node: the user's 39 ticks an epoch against the rank's 10 cover its 65 %.
    r = epoch.run(39, [10], run_ms=MS)
    assert r["user_slowdown"] == pytest.approx(1.0, abs=1e-3)
    assert r["user_cpu"] == pytest.approx(0.65, abs=0.01)


def test_a_sleeping_user_gets_more_than_processor_sharing_gives_it():
    # Equal slices beside one CPU-bound rank: processor sharing gives the user 0.65 / 1.65 = 0.394 of the
    # CPU; the epochs let it keep its slice through its sleeps (measured: 0.48 over 600 s).
    r = epoch.run(49, [49], run_ms=MS)
    assert r["user_cpu"] > 0.44
    assert r["user_slowdown"] < epoch.ps_slowdown(1024.0, 1) - 0.2
