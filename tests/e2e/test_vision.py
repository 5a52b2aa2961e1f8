"""The vision kind end to end (issue 10): a 3-stage pipeline alone meets every deadline, and the same
pipeline misses under a stated overload, on real processes and in the simulator, through the CLI; the
kind's image work itself (deterministic frames, real OpenCV operations)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from testbed.apps.vision import OPERATIONS, apply, render

from ..conftest import measured
from .conftest import wait_clean

# 3 stages of 8 ms of CPU per 33.3 ms frame: 24 % of each node. Buffer b = 30 frames (1 s).
PIPELINE = {
    "kind": "vision",
    "stages": ["decode", "denoise", "edges"],
    "work_units": 8,
    "frames": 60,
    "buffer": 30,
}
# The overload: three such pipelines at 20 ms per frame on the same 3 nodes ask 3 x 60 % = 180 % of each
# node's CPU, so together they can keep at most 1/1.8 of the frame rate; with b = 3 (100 ms) a frame
# released k periods in is late once 0.8 k d > b d, i.e. from about the 4th frame on.
HEAVY = {**PIPELINE, "work_units": 20, "buffer": 3}


def _scenario(tmp_path: Path, jobs: list[dict], scheduler: str = "2dcs-ps") -> Path:
    doc = {
        "name": "vision",
        "cluster": {"nodes": 3},
        # TDF 4: each node gets a quarter of a host core per emulated CPU, so a loaded 2-core host still
        # delivers the emulated rate (an automatic TDF of 1.5 would leave no margin for other users).
        "clock": {"tdf": 4.0, "rate_probe_s": 0.3},
        "scheduler": {"name": scheduler},
        "monitoring": {"enabled": False},
        "workload": {"seed": 1, "jobs": jobs},
    }
    p = tmp_path / "vision.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _run(tmp_path: Path, jobs: list[dict], backend: str, name: str) -> dict:
    out = tmp_path / name
    args = [
        sys.executable,
        "-m",
        "testbed.cli",
        "run",
        str(_scenario(tmp_path, jobs)),
        "--out",
        str(out),
        "-q",
    ]
    if backend == "sim":
        args += ["--backend", "sim"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=420)
    assert p.returncode == 0, p.stdout + p.stderr
    if backend != "sim":
        assert wait_clean(out) == ([], [])
    return json.loads((out / "summary.json").read_text())


def test_frames_are_deterministic_and_every_operation_does_real_work():
    a, b = render(7, 160, 120, seed=3), render(7, 160, 120, seed=3)
    assert a.shape == (120, 160) and a.dtype == np.uint8 and np.array_equal(a, b)
    assert not np.array_equal(a, render(8, 160, 120, seed=3))  # the shapes move
    assert not np.array_equal(a, render(7, 160, 120, seed=4))
    for op in OPERATIONS:
        out = apply(op, a)
        assert out.shape == a.shape and out.dtype == np.uint8, op
        if op not in ("decode", "sink"):  # decode is a lossless PNG round trip; sink passes the frame on
            assert not np.array_equal(out, a), op
    assert np.array_equal(apply("decode", a), a)
    assert set(np.unique(apply("edges", a))) <= {0, 255}


@pytest.mark.parametrize("backend", ["sim", pytest.param("real", marks=pytest.mark.slow)])
def test_a_pipeline_alone_meets_every_deadline(tmp_path, backend):
    s = _run(tmp_path, [{"id": "rt", "size": 3, "app": PIPELINE}], backend, "alone")
    assert s["jobs_by_state"] == {"COMPLETED_SUCCESSFULLY": 1}
    assert s["deadline_miss_ratio"] == 0.0
    assert s["rt_rejected_ratio"] == 0.0
    # A frame crosses 3 stages of 8 ms each: in the simulator its latency is at least 24 ms. On real
    # processes the node's rate holds over a CFS period (here 100 ms real, 25 ms emulated), not within
    # one: a stage with quota left runs at the host's full speed, up to TDF = 4 times the node's rate
    # (measured: 20.8 ms mean). Alone it stays far below the buffer b*d = 1 s either way.
    low = 0.024 if backend == "sim" else 0.024 / 4
    assert low <= s["frame_latency_s_mean.rt"] < 0.5


# The real variant: 24 s, up to 3 tries (measured); the default run stays under about 12 minutes (the
# developers' guide) with the simulator's, and CI runs the real one with --extended.
@pytest.mark.parametrize(
    "backend", ["sim", pytest.param("real", marks=[pytest.mark.slow, pytest.mark.extended])]
)
def test_the_same_pipeline_misses_under_overload(tmp_path, backend):
    jobs = [{"id": f"rt{i}", "size": 3, "app": HEAVY} for i in range(3)]
    runs = iter(range(3))

    def miss_ratio() -> float:
        s = _run(tmp_path, jobs, backend, f"overload{next(runs)}")
        assert s["jobs_by_state"] == {"COMPLETED_SUCCESSFULLY": 3}
        return s["deadline_miss_ratio"]

    # At most 1/1.8 of the rate: frame k finishes near 1.8 k d, late from k ~ 4 on: most of 60 frames miss.
    # Measured 0.667 simulated; real 0.64, 0.67, 0.68 on a quiet host, and once 0.43 in a full test run
    # beside other tests' processes (not traced). The simulator runs once: it is deterministic.
    why = "a loaded host moved one real run's miss ratio to 0.43 (not traced)"
    measured(miss_ratio, lambda m: m > 0.5, why=why, attempts=1 if backend == "sim" else 3)


@pytest.mark.parametrize("stages, misses", [(5, False), (6, True)])
def test_1gs_admitted_pipelines_meet_deadlines_only_if_a_window_carries_the_stall_through(
    tmp_path, stages, misses
):
    """docs/policies.md, "When 1GS's guarantee holds": two admitted pipelines (phi = 10 ms, so r = 2 of
    the 4 RT rows each) and a full-width BE job fill the M = 6 rows of Q = 50 ms. Each pipeline stalls
    (M - r) Q = 200 ms a cycle, six frames queue at stage 0, and the next window of r Q = 100 ms must take
    them through all s stages: (6 + s - 1) x 10 ms <= 100 ms holds for s = 5, not for s = 6. Both meet
    M Q = 300 ms <= b d = 333 ms, which alone is not enough."""
    pipeline = {**PIPELINE, "stages": list(OPERATIONS[:stages]), "work_units": 10, "buffer": 10, "frames": 90}
    doc = {
        "name": "vision-1gs",
        "cluster": {"nodes": stages},
        "clock": {"tdf": 4.0},
        "scheduler": {
            "name": "1gs",
            "params": {"rows": 6, "quantum_ms": 50, "lead_ms": 10, "admission": True},
        },
        "monitoring": {"enabled": False},
        "workload": {
            "seed": 1,
            "jobs": [
                {"id": "a", "size": stages, "app": pipeline},
                {"id": "b", "size": stages, "app": pipeline},
                {"id": "be", "size": stages, "app": {"iterations": 400, "gcomp": 10}},
            ],
        },
    }
    path = tmp_path / "vision-1gs.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    args = [sys.executable, "-m", "testbed.cli", "run", str(path), "--out", str(out), "-q"]
    args += ["--backend", "sim"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["jobs_by_state"] == {"COMPLETED_SUCCESSFULLY": 3}
    assert s["rt_rejected_ratio"] == 0.0
    if misses:
        # The stall's last frames wait a further cycle, past b d.
        assert s["deadline_miss_ratio"] > 0.03
        assert s["frame_latency_s_max.rt"] > 10 / 30
    else:
        assert s["deadline_miss_ratio"] == 0.0
        assert s["frame_latency_s_max.rt"] <= 10 / 30
