"""`testbed report` and `testbed compare` end to end, read in a real browser: headless Chromium (Debian's
`chromium` and `chromium-driver`, driven by Selenium) opens each page, which must raise no script error
and show its figures; every figure of summary.json on a run's page is read back from the page and
checked against the file; a screenshot of each page is kept in the test's folder.

The runs are small simulations (a gang run: the quickstart; paper 001's sweep, cut down), so the default
run pays a few seconds; the real-process quickstart is an extended test.
"""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from testbed.cli import app
from testbed.results import comparison
from testbed.results import summary as results
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _cli_here(*args: str) -> Result:
    """The CLI in this process: no interpreter start-up and imports to pay again (`run` sets SIGTERM's
    handler for its teardown: put back afterwards)."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return CliRunner().invoke(app, list(args))
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


@pytest.fixture(scope="module")
def browser():
    require(
        CHROMIUM is not None and CHROMEDRIVER is not None, "chromium and chromium-driver are not installed"
    )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        require(False, "selenium is not installed (pip install -e '.[dev]')")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1200,900",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A gang run (the quickstart) and a sweep of paper 001 (2 schedulers x 2 loads, 2 repetitions), in
    the simulator."""
    base = tmp_path_factory.mktemp("report")
    gang = base / "quickstart-gang"
    p = _cli_here(
        "run", str(ROOT / "scenarios/quickstart.yaml"), "--backend", "sim", "--out", str(gang), "-q"
    )
    assert p.exit_code == 0, p.output
    sweep = base / "paper001"
    p = _cli_here(
        "run", str(ROOT / "scenarios/paper001-reject.yaml"), "--backend", "sim", "--out", str(sweep), "-q",
        "--set", "workload.divisible.arrivals=3", "--set", "repetitions=2",
        "--set", "sweep={scheduler.name: [mcdf, fifo-an], workload.divisible.load: [0.25, 1.0]}",
    )  # fmt: skip
    assert p.exit_code == 0, p.output
    return {"gang": gang, "sweep": sweep, "base": base}


def _open(driver, page: Path, shot: Path) -> None:
    """Loads the page, fails on any script error or failed load the browser logged, and keeps a
    full-page screenshot that is not blank."""
    driver.get_log("browser")  # drop what an earlier page left
    driver.get(page.resolve().as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    height = driver.execute_script("return document.documentElement.scrollHeight")
    width = driver.execute_script("return document.documentElement.scrollWidth")
    png = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )["data"]
    shot.write_bytes(base64.b64decode(png))
    from PIL import Image

    im = Image.open(io.BytesIO(shot.read_bytes())).convert("RGB")
    assert im.size[1] >= 1000, im.size
    colours = im.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50, "the screenshot is (nearly) blank"


def _page_values(driver) -> dict[str, tuple[float | None, str]]:
    return {
        k: (None if v is None else float(v), text)
        for k, v, text in driver.execute_script(
            "return Array.from(document.querySelectorAll('[data-key]')).map(e => "
            "[e.dataset.key, e.dataset.value === undefined ? null : e.dataset.value, e.textContent])"
        )
    }


def _svg_text(driver, selector: str) -> str:
    return driver.execute_script(f"return document.querySelector({selector!r}).textContent")


def test_run_report_in_chromium(browser, runs):
    run = runs["gang"]
    p = _cli_here("report", str(run))
    assert p.exit_code == 0, p.output
    assert p.stdout.strip() == f"report: {run / 'report.html'}"
    _open(browser, run / "report.html", run / "report.png")

    summary = json.loads((run / "summary.json").read_text())
    shown = _page_values(browser)
    checked = 0
    for key, value in summary.items():
        if key in shown and isinstance(value, int | float) and not isinstance(value, bool):
            page_value, text = shown[key]
            assert page_value is not None and math.isclose(page_value, value, rel_tol=1e-12), (
                key,
                shown[key],
            )
            assert text.strip() not in ("", "-"), key
            checked += 1
    for key in ("mean_response_time_s", "utilization", "energy_j", "makespan_s", "tdf", "jobs"):
        assert key in shown, key
    assert checked >= 8
    # Units as a person reads them: energy in kJ, utilisation in %.
    assert shown["energy_j"][1].endswith(" kJ") and shown["utilization"][1].endswith(" %")
    assert float(shown["utilization"][1].split()[0]) == pytest.approx(summary["utilization"] * 100, abs=0.05)
    # The per-class table has the summary's per-class figures.
    assert shown["reject_ratio.compute"][0] == summary["reject_ratio.compute"]

    # A gang run: the Gantt chart and the matrix are drawn, each job in the legend.
    jobs = [r["job_id"] for r in csv.DictReader(open(run / "jobs.csv"))]
    gantt = _svg_text(browser, "#gantt svg")
    assert all(j in gantt for j in jobs) and "pale: stopped" in gantt
    assert "row 0" in _svg_text(browser, "#matrix svg")
    assert "energy" in _svg_text(browser, "#over-time svg")
    # The simulator's settings raise no warning.
    assert browser.execute_script("return document.querySelectorAll('[data-warning]').length") == 0


def test_sweep_report_in_chromium(browser, runs):
    sweep = runs["sweep"]
    p = _cli_here("report", str(sweep), "--out", str(sweep.parent / "sweep.html"))
    assert p.exit_code == 0, p.output
    _open(browser, sweep.parent / "sweep.html", sweep.parent / "sweep.png")
    # Paper 001's figure: reject ratio against load, one line per scheduler, labelled.
    fig = _svg_text(browser, "[id='fig-reject_ratio-workload.divisible.load'] svg")
    assert "mcdf" in fig and "fifo-an" in fig and "load" in fig and "reject ratio (%)" in fig
    # Energy carries its unit; no axis reads like 7.49e+05.
    energy = _svg_text(browser, "[id='fig-energy_j-workload.divisible.load'] svg")
    assert "(MJ)" in energy or "(kJ)" in energy
    everything = browser.execute_script(
        "return Array.from(document.querySelectorAll('svg')).map(s => s.textContent).join(' ')"
    )
    assert "e+0" not in everything
    # Two repetitions of each variant, each on its own workload: error bars, named.
    assert "error bars: 95 % confidence interval over repetitions" in everything
    # The table's figures are comparison.csv's.
    rows = list(csv.DictReader(open(sweep / "comparison.csv")))
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll(\"td[data-key='mean_response_time_s']\"))"
        ".map(e => parseFloat(e.dataset.value))"
    )
    assert cells == pytest.approx([float(r["mean_response_time_s"]) for r in rows])
    # A per-class rate's spread columns (bytes_per_s.divisible_stdev, _ci95) are its error bars, not
    # metrics with figures and table columns of their own.
    assert any(results.is_rate(k) for k in rows[0]) and any(k.endswith(comparison.CI95) for k in rows[0])
    ids = browser.execute_script("return Array.from(document.querySelectorAll('figure')).map(f => f.id)")
    heads = browser.execute_script(
        "return Array.from(document.querySelectorAll('th')).map(e => e.textContent)"
    )
    assert ids and heads
    spread = [t for t in (*ids, *heads) if "stdev" in t or "ci95" in t]
    assert not spread, spread


def test_compare_two_folders(browser, runs, tmp_path):
    out = tmp_path / "cmp"
    p = _cli_here("compare", str(runs["gang"]), str(runs["sweep"]), "--out", str(out))
    assert p.exit_code == 0, p.output
    rows = list(csv.DictReader(open(out / "comparison.csv")))
    # The gang run, and the sweep's 4 variants each with its 2 repetitions as one row.
    assert [r["variant"] for r in rows][0] == "quickstart-gang" and len(rows) == 5
    assert {r["sweep_variant"] for r in rows[1:]} == {
        "mcdf-load0.25",
        "mcdf-load1.0",
        "fifo-an-load0.25",
        "fifo-an-load1.0",
    }
    assert all(r["repetitions"] == "2" for r in rows[1:])
    assert "quickstart-gang" in p.stdout
    _open(browser, out / "report.html", out / "report.png")
    assert "quickstart-gang" in _svg_text(browser, "[id='fig-mean_response_time_s'] svg")

    # A variant's repetitions: a bar each and their mean, the mean's numbers those of comparison.csv.
    variant = runs["sweep"] / "mcdf-load1.0"
    assert _cli_here("report", str(variant)).exit_code == 0
    _open(browser, variant / "report.html", variant / "report.png")
    assert browser.find_element("tag name", "h1").text == "mcdf-load1.0: 2 repetitions and their mean"
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll(\"td[data-key='makespan_s']\"))"
        ".map(e => parseFloat(e.dataset.value))"
    )
    each = [json.loads((variant / f"rep-{k}" / "summary.json").read_text())["makespan_s"] for k in (1, 2)]
    assert cells == pytest.approx([*each, sum(each) / 2])
    sweep_row = next(
        r for r in csv.DictReader(open(runs["sweep"] / "comparison.csv")) if r["variant"] == variant.name
    )
    assert cells[-1] == pytest.approx(float(sweep_row["makespan_s"]), abs=1e-6)


def test_the_script_error_check_catches_one(browser, tmp_path):
    """The check every page passes fails on a page whose script throws."""
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><p>x</p><script>noSuchFunction();</script></body></html>")
    with pytest.raises(AssertionError, match="noSuchFunction"):
        _open(browser, page, tmp_path / "broken.png")


def test_report_refuses_what_is_not_a_results_folder(tmp_path):
    p = _cli("report", str(tmp_path / "nothing"))  # one process: the exit status and stderr as a user sees
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "no such folder" in p.stderr
    (tmp_path / "empty").mkdir()
    p = _cli_here("report", str(tmp_path / "empty"))
    assert p.exit_code == 2 and "holds no run" in p.output
    assert not any((tmp_path / "empty").iterdir())
    p = _cli_here("compare", str(tmp_path / "empty"), "--out", str(tmp_path / "c"))
    assert p.exit_code == 2 and "holds no run" in p.output and not (tmp_path / "c").exists()


@pytest.mark.extended
def test_real_quickstart_report_in_chromium(browser, tmp_path):
    """The quickstart on real processes (about a minute): its page shows the Gantt chart of real slot
    switches and the run's measured settings."""
    run = tmp_path / "real"
    p = _cli("run", "scenarios/quickstart.yaml", "--out", str(run), "-q", timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _cli("report", str(run)).returncode == 0
    _open(browser, run / "report.html", run / "report.png")
    summary = json.loads((run / "summary.json").read_text())
    shown = _page_values(browser)
    assert shown["tdf"][0] == pytest.approx(summary["tdf"])
    assert shown["envelope"][1] == summary["envelope"]
    if summary["cpu_rate_error_max"] is not None and summary["cpu_rate_error_max"] > 0.05:
        assert browser.execute_script("return document.querySelectorAll('[data-warning]').length") >= 1
    assert "pale: stopped" in _svg_text(browser, "#gantt svg")
