"""The papers' experiments as shipped in scenarios/, end to end through the CLI in the simulator (the
real-process runs take minutes; their figures are in the issue notes). Checks the scenarios stay valid
and that the metrics the papers compare come out, with the direction the policy rules imply."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, scenario: str, *extra: str) -> list[dict]:
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(ROOT / "scenarios" / scenario), "--backend", "sim"]
        + ["--out", str(out), "-q", *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    with open(out / "comparison.csv") as fh:
        rows = {r["variant"]: r for r in csv.DictReader(fh)}
    assert all(r["status"] == "ok" for r in rows.values()), rows
    return rows


def test_paper002_mix_in_the_simulator(tmp_path):
    rows = _run(tmp_path, "paper002-mix.yaml")
    assert len(rows) == 10

    def f(variant, col):
        return float(rows[variant][col])

    for i in range(5):
        assert f(f"mix{i}-gang", "quanta_paired_fraction") == 0.0  # strict gang never shares a quantum
    # Compute-bound jobs cannot be paired with each other (paper 002: "no meaningful difference").
    assert f("mix0-paired", "quanta_paired_fraction") == 0.0
    c = "barriers_per_s.compute"
    assert abs(f("mix0-paired", c) / f("mix0-gang", c) - 1) < 0.05
    # With I/O-bound jobs there is something to pair, and the I/O-bound jobs advance faster.
    for i in (1, 2, 3, 4):
        assert f(f"mix{i}-paired", "quanta_paired_fraction") > 0.3
        assert f(f"mix{i}-paired", "barriers_per_s.io") > 1.5 * f(f"mix{i}-gang", "barriers_per_s.io")
    # ...without slowing the compute-bound ones down.
    for i in (1, 2, 3):
        assert f(f"mix{i}-paired", c) > 0.95 * f(f"mix{i}-gang", c)


def _paper003_grid(rows: dict) -> None:
    for r in rows.values():
        assert int(r["jobs_completed"]) == 12, r
        # E = (B + X*U)*N*T, B = 219.10 W, X = 18.968 W, N = 8.
        e = (219.10 + 18.968 * float(r["utilization"])) * 8 * float(r["makespan_s"])
        assert abs(float(r["energy_j"]) / e - 1) < 1e-6


def test_paper003_compare_in_the_simulator(tmp_path):
    """Its NAS kernels' jobs (replayed from their measured models) under batch and HYBRID at heavy load,
    energy from the paper's model: time sharing completes them sooner (measured: -31 %; the bound is half
    of it)."""
    two = "sweep={scheduler.name: [batch, hybrid], workload.generator.mean_interarrival_s: [0.25]}"
    rows = _run(tmp_path, "paper003-compare.yaml", "--set", two)
    _paper003_grid(rows)
    batch, hybrid = (next(r for n, r in rows.items() if n.startswith(s)) for s in ("batch", "hybrid"))
    assert float(hybrid["mean_response_time_s"]) < 0.85 * float(batch["mean_response_time_s"])


@pytest.mark.extended
def test_paper003_compare_whole_grid_in_the_simulator(tmp_path):
    """The whole grid: 8 schedulers x packing x 2 loads (about 4 minutes of CPU)."""
    rows = _run(tmp_path, "paper003-compare.yaml")
    assert len(rows) == 32
    _paper003_grid(rows)
    heavy = {n.split("-")[0]: r for n, r in rows.items() if n.endswith("packingtrue-mean_interarrival_s0.25")}
    assert set(heavy) == {"batch", "local", "gang", "dcs", "sb", "pb", "cc", "hybrid"}


@pytest.mark.extended
def test_paper003_at_the_papers_size_in_the_simulator(tmp_path):
    """paper003-compare-100: 100 NAS kernel jobs build the queue the paper's headline needs. Two of its
    variants (~40 s of CPU): under heavy load HYBRID completes jobs faster than batch and, ending the
    stream sooner, uses less energy (measured: -61 % and -36 %; the paper: -68 % and -38 %); the bounds
    below are the directions with half the measured margins."""
    two = "sweep={scheduler.name: [batch, hybrid], workload.generator.mean_interarrival_s: [0.51]}"
    rows = _run(tmp_path, "paper003-compare-100.yaml", "--set", two)
    batch, hybrid = (next(r for n, r in rows.items() if n.startswith(s)) for s in ("batch", "hybrid"))
    assert int(batch["jobs_completed"]) == int(hybrid["jobs_completed"]) == 100
    assert float(hybrid["mean_response_time_s"]) < 0.7 * float(batch["mean_response_time_s"])
    assert float(hybrid["energy_j"]) < 0.82 * float(batch["energy_j"])


# 38 s of simulation: with --extended, as this file's other whole-grid runs.
@pytest.mark.extended
def test_paper000_admission_at_9_to_1_in_the_simulator(tmp_path):
    """paper000-multiclass at the 9:1 mix, 20 of its 40 jobs, the three schemes with and without admission
    control. The paper's headline: admission takes the miss rate from about 70 % to about 0.1 % and turns
    more than half of the RT jobs away. Bounds are the directions with margin below what the full scenario
    measured (docs: the issue-10 closing note)."""
    grid = (
        "sweep={scheduler: [{name: 1gs, params: {rows: 6, quantum_ms: 50, lead_ms: 10}}, "
        "{name: 2dcs-tdm, params: {gamma_ms: 300, interval_ms: 10}}, "
        "{name: 2dcs-ps, params: {quantum_ms: 100, interval_ms: 10}}], "
        "scheduler.params.admission: [false, true]}"
    )
    rows = _run(tmp_path, "paper000-multiclass.yaml", "--set", grid, "--set", "workload.generator.count=20")
    assert len(rows) == 6

    def f(scheme: int, admission: bool, col: str) -> float:
        return float(rows[f"scheduler{scheme}-admission{str(admission).lower()}"][col])

    for scheme in (1, 2, 3):  # 1gs, 2dcs-tdm, 2dcs-ps
        assert f(scheme, False, "deadline_miss_ratio") > 0.3
        assert f(scheme, True, "rt_rejected_ratio") > 0.3
        assert f(scheme, True, "deadline_miss_ratio") < 0.5 * f(scheme, False, "deadline_miss_ratio")
    for scheme in (2, 3):  # 2DCS admission: nearly every deadline met
        assert f(scheme, True, "deadline_miss_ratio") < 0.02
        assert f(scheme, False, "rt_rejected_ratio") == 0.0  # without admission every job is admitted


def test_paper004_ccs_in_the_simulator(tmp_path):
    """paper004-ccs cut to 100 emulated s and three of its Wrk1 variants (~9 s of CPU): CCS at L = 20 %
    protects the local CPU users against plain Linux and DYNAMIC, and Xwin users stay near 1 under it. The
    whole file (400 s, 19 variants, with memory and paging) measured CPU users' mean slowdown 1.27 (CCS, L
    0.2), 1.77 (Linux), 4.93 (DYNAMIC); the bounds are the directions (docs/measurements.md, "Paper 004
    with memory")."""
    three = (
        "sweep=[{name: linux, set: {scheduler: {name: local, params: {mpl: 1}}}}, "
        "{name: dynamic, set: {scheduler: {name: dynamic, params: {mpl: 1}}}}, "
        "{name: ccs, set: {scheduler: {name: ccs, params: {mpl: 1, share_l: 0.2}}}}]"
    )
    rows = _run(tmp_path, "paper004-ccs.yaml", "--set", three, "--set", "duration_s=100")
    assert set(rows) == {"linux", "dynamic", "ccs"}
    local = {v: float(r["local_slowdown_mean"]) for v, r in rows.items()}
    assert local["ccs"] < local["linux"] < local["dynamic"], local
    for v, r in rows.items():
        assert int(r["jobs_completed"]) > 0, (v, r)
    cpu, xwin = (
        json.loads((tmp_path / "out" / "ccs" / "summary.json").read_text())[f"local_slowdown_mean.{c}"]
        for c in ("cpu-user", "xwin-user")
    )
    print(f"local slowdown: {local}; under CCS: cpu {cpu:.3f}, xwin {xwin:.3f}")
    assert xwin < 1.1 and cpu < 1.4, (cpu, xwin)
