"""``testbed watch``: the overview dashboard's headline figures live in a terminal, for a person without
Grafana. It scrapes the exporters listed in a run's file_sd targets directly (no Prometheus needed)."""

from __future__ import annotations

import concurrent.futures as cf
import json
import math
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from testbed.monitoring import prometheus as prom

from testbed.core import events as ev


def newest_run(results: str | Path = "results") -> Path | None:
    """The most recently written results folder that has exporters' targets."""
    found = sorted(Path(results).glob("**/prometheus/targets.json"), key=lambda p: p.stat().st_mtime)
    return found[-1].parent.parent if found else None


def newest_live_run(results: str | Path = "results") -> tuple[Path | None, int]:
    """The most recently started results folder with exporters' targets whose run is still going (its
    folder's claim is held: testbed/results/folder.py), and how many folders with targets there are."""
    from testbed.results import folder

    found = sorted(Path(results).glob("**/prometheus/targets.json"), key=lambda p: p.stat().st_mtime)
    live = [p.parent.parent for p in found if folder.is_live(p.parent.parent)]
    return (live[-1] if live else None), len(found)


def is_simulated(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a simulator run (its summary says so, or, still running, it writes one
    events.jsonl and no per-component logs as a real run does)."""
    try:
        return json.loads((Path(run_dir) / "summary.json").read_text()).get("backend") == "sim"
    except (OSError, ValueError):
        return ev.find_log(run_dir) is not None and not (Path(run_dir) / "events").is_dir()


def scrape(address: str, timeout: float = 0.8) -> dict[str, list[tuple[dict, float]]] | None:
    """sample name -> [(labels, value)], or None when the exporter does not answer."""
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout) as r:
            text = r.read().decode()
    except OSError:
        return None
    out: dict[str, list[tuple[dict, float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile on cumulative (le, count) buckets."""
    buckets = sorted(buckets)
    if not buckets or buckets[-1][1] <= 0:
        return math.nan
    rank = q * buckets[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 0.0)
        prev_le, prev_c = le, c
    return math.nan  # pragma: no cover


@dataclass
class Snapshot:
    targets: int = 0
    up: int = 0
    nodes_up: int = 0
    utilization: float = math.nan
    power_w: float = math.nan
    energy_j: float = math.nan
    tdf: float = math.nan
    jobs: dict[str, float] = field(default_factory=dict)
    skew_p50_s: float = math.nan
    skew_p99_s: float = math.nan
    skew_slots: float = 0.0
    dispatches: float = 0.0


def snapshot(targets: list[dict], pool: cf.ThreadPoolExecutor | None = None) -> Snapshot:
    """The overview's headline figures from one scrape of every exporter. Skew quantiles are over the
    whole run so far (the dashboard's are over a recent window)."""
    own = pool is None
    pool = pool or cf.ThreadPoolExecutor(8)
    try:
        scraped = list(pool.map(lambda t: (t, scrape(t["address"])), targets))
    finally:
        if own:
            pool.shutdown()
    snap = Snapshot(targets=len(targets))
    utils, power, energy, tdfs, skew = [], 0.0, 0.0, [], {}
    for t, m in scraped:
        if m is None:
            continue
        snap.up += 1
        if t.get("role") == "node":
            snap.nodes_up += 1
        utils += [v for _, v in m.get("testbed_node_cpu_utilization_ratio", [])]
        power += sum(v for _, v in m.get("testbed_node_power_watts", []))
        energy += sum(v for _, v in m.get("testbed_node_energy_joules_total", []))
        snap.dispatches += sum(v for _, v in m.get("testbed_node_dispatches_total", []))
        tdfs += [v for _, v in m.get("testbed_time_dilation_factor", [])]
        for labels, v in m.get("testbed_jobs", []):
            snap.jobs[labels["state"]] = snap.jobs.get(labels["state"], 0.0) + v
        for labels, v in m.get("testbed_gang_switch_skew_seconds_bucket", []):
            le = float(labels["le"])
            skew[le] = skew.get(le, 0.0) + v
        snap.skew_slots += sum(v for _, v in m.get("testbed_gang_switch_skew_seconds_count", []))
    if snap.nodes_up:
        snap.utilization = sum(utils) / len(utils) if utils else math.nan
        snap.power_w, snap.energy_j = power, energy
    if tdfs:
        snap.tdf = max(tdfs)
    if skew:
        b = list(skew.items())
        snap.skew_p50_s, snap.skew_p99_s = _quantile(0.5, b), _quantile(0.99, b)
    return snap


def _fmt(v: float, spec: str, unit: str = "") -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:{spec}}{unit}"


def render(run_dir: Path, snap: Snapshot):
    from rich.table import Table

    t = Table(title=f"testbed watch: {run_dir}", show_header=False, title_justify="left")
    t.add_column(style="bold")
    t.add_column(justify="right")
    t.add_row("exporters up", f"{snap.up}/{snap.targets} ({snap.nodes_up} nodes)")
    t.add_row("cluster CPU utilisation", _fmt(snap.utilization * 100, ".1f", " %"))
    t.add_row("cluster power", _fmt(snap.power_w, ",.1f", " W"))
    t.add_row("energy so far", _fmt(snap.energy_j, ",.0f", " J"))
    t.add_row("time dilation factor", _fmt(snap.tdf, ".2f"))
    jobs = " ".join(f"{k}={int(v)}" for k, v in sorted(snap.jobs.items()) if v) or "-"
    t.add_row("jobs", jobs)
    t.add_row(
        "gang switch skew p50 / p99",
        f"{_fmt(snap.skew_p50_s * 1e3, '.2f', ' ms')} / {_fmt(snap.skew_p99_s * 1e3, '.2f', ' ms')}"
        f"  ({int(snap.skew_slots)} slots)",
    )
    t.add_row("dispatches", f"{int(snap.dispatches)}")
    return t


def watch(
    run_dir: Path, console, once: bool = False, interval: float = 1.0, startup_wait: float = 30.0
) -> int:
    """Refreshes every ``interval`` s until every exporter is gone (after at least one answered) or Ctrl-C.
    Returns an exit code: 0, or 1 when no exporter ever answered."""
    from rich.live import Live

    targets = prom.read_targets(run_dir)
    seen, t0 = False, time.monotonic()
    with cf.ThreadPoolExecutor(8) as pool:
        snap = snapshot(targets, pool)
        if once:
            console.print(render(run_dir, snap))
            return 0 if snap.up else 1
        try:
            with Live(render(run_dir, snap), console=console, refresh_per_second=4) as live:
                while True:
                    seen = seen or snap.up > 0
                    # Before any exporter answered, the run may still be starting: wait a while.
                    if snap.up == 0 and (seen or time.monotonic() - t0 > startup_wait):
                        break
                    time.sleep(interval)
                    targets = prom.read_targets(run_dir)  # the coordinator joins after the nodes
                    snap = snapshot(targets, pool)
                    live.update(render(run_dir, snap))
        except KeyboardInterrupt:
            return 0
    if not seen:
        console.print(f"no exporter of {run_dir} answers: is the run still going?")
        return 1
    console.print("the run's exporters are gone: it ended")
    return 0
