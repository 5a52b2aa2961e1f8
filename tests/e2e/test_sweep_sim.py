"""A sweep end to end through the CLI, in the simulator: three variants on one generated workload, a
comparison.csv with one row each and one PNG per metric that matplotlib really drew."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import yaml

from testbed.results import comparison

PNG = b"\x89PNG\r\n\x1a\n"

SCENARIO = {
    "name": "sweep-e2e",
    "cluster": {"nodes": 8},
    "scheduler": {"name": "gang", "params": {"mpl": 2, "quantum_ms": 100}},
    "workload": {
        "seed": 3,
        "generator": {
            "count": 8,
            "mean_interarrival_s": 0.5,
            "duration": {"dist": "fixed", "mean_s": 1.0},
            "size": {"min": 2, "max": 8},
            "classes": [
                {"name": "cpu", "app": {"gcomp": 200}},
                {"name": "io", "app": {"gcomp": 20, "gio": 1}},
            ],
        },
    },
    "sweep": [
        {"name": "batch", "set": {"scheduler.name": "batch", "scheduler.params": {}}},
        {"name": "gang-q50", "set": {"scheduler.params.quantum_ms": 50}},
        {"name": "hybrid", "set": {"scheduler.name": "hybrid"}},
    ],
}


def test_three_variant_sweep_in_the_simulator(tmp_path):
    scn = tmp_path / "sweep.yaml"
    scn.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    out = tmp_path / "out"
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "run", str(scn), "--backend", "sim", "--out", str(out), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    # The comparison printed, and the base gang quantum dropped for hybrid said so.
    assert "sweep of 3 variants" in p.stdout and "gang-q50" in p.stdout and "response time" in p.stdout
    assert "quantum_ms dropped" in p.stderr
    # The closing line names the page with the paper-style figures, whole, as a command to copy.
    assert f"comparison: {out / 'comparison.csv'}; figures: testbed report {out}" in p.stdout.splitlines()

    with open(out / "comparison.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["variant"] for r in rows] == ["batch", "gang-q50", "hybrid"]
    assert all(r["status"] == "ok" and r["error"] == "" for r in rows), rows
    assert [r["scheduler.name"] for r in rows] == ["batch", "gang", "hybrid"]
    assert [r["scheduler.params.quantum_ms"] for r in rows] == ["", "50", ""]
    for r in rows:
        assert int(r["jobs_completed"]) == 8 and float(r["mean_response_time_s"]) > 0
        assert 0 < float(r["utilization"]) <= 1
        # The row is the variant's own summary.json.
        s = json.loads((out / r["variant"] / "summary.json").read_text())
        assert float(r["makespan_s"]) == round(s["makespan_s"], 6)
        assert s["scheduler"] == r["scheduler.name"]

    # Same jobs in every variant: ids, submit times and sizes.
    def jobs(v):
        with open(out / v / "jobs.csv") as fh:
            return sorted(
                (j["job_id"], j["submission_time"], j["requested_number_of_resources"])
                for j in csv.DictReader(fh)
            )

    assert jobs("batch") == jobs("gang-q50") == jobs("hybrid") and len(jobs("batch")) == 8

    pngs = sorted((out / "plots").glob("*.png"))
    assert {f"{m}.png" for m in comparison.METRICS} <= {p.name for p in pngs} and len(pngs) >= 6
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg

    for png in pngs:
        data = png.read_bytes()
        assert data[:8] == PNG and len(data) > 5000, png
        img = mpimg.imread(png)
        assert img.shape[0] >= 300 and img.shape[1] >= 500, (png, img.shape)
        assert img[..., :3].std() > 0.05, png  # bars, axes and labels, not a blank canvas


def test_a_many_variant_table_is_printed_whole_when_stdout_is_a_file(tmp_path):
    # Past comparison.TABLE_COLUMNS_MAX variants the table has a row per variant and a column per metric:
    # about
    # 190 characters wide, which rich squeezed into 80 and cut with '…' in a log or a redirected file.
    doc = {**SCENARIO, "sweep": {"scheduler.params.quantum_ms": [40, 60, 80, 100, 120, 140, 160]}}
    doc["workload"] = {**SCENARIO["workload"], "generator": {**SCENARIO["workload"]["generator"], "count": 3}}
    scn = tmp_path / "sweep.yaml"
    scn.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(scn), "--backend", "sim", "--out", str(out), "-q"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "…" not in p.stdout, p.stdout
    header = next(ln for ln in p.stdout.splitlines() if "variant" in ln and "response time" in ln)
    assert len(header) > 80 and "utilisation" in header, header
    with open(out / "comparison.csv") as fh:
        names = [r["variant"] for r in csv.DictReader(fh)]
    assert len(names) == 7 and all(n in p.stdout for n in names)
