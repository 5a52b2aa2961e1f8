"""Every Grafana dashboard of the testbed, generated from this one source (docs/architecture.md, "Real
parts").

``python -m testbed.monitoring.dashboards`` (or ``testbed dashboards generate``) writes them to
``monitoring/dashboards/*.json``; the committed files must equal what this produces (a test checks it).
Dashboards use a ``datasource`` variable of type prometheus, so they work with any Prometheus data source,
and a ``run_id`` variable (the file_sd label of a run; "All" also matches targets without it).
"""

from __future__ import annotations

import json
from pathlib import Path

SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
RUN = 'run_id=~"$run_id"'
RATE = "$__rate_interval"
SKEW = "testbed_gang_switch_skew_seconds"
DECISION = "testbed_policy_decision_seconds"
OUT_DIR = Path(__file__).resolve().parent / "dashboards"


def _hq(q: float, metric: str, sel: str, by: str = "le") -> str:
    """A quantile of a histogram over the recent window."""
    return f"histogram_quantile({q}, sum by ({by}) (rate({metric}_bucket{sel}[{RATE}])))"


def _share(metric: str, outcome: str) -> str:
    """One outcome's share of a counter family (0, not NaN, while the family is all zeros)."""
    return f'sum({metric}{{outcome="{outcome}",{RUN}}}) / clamp_min(sum({metric}{{{RUN}}}), 1)'


def _target(expr: str, legend: str = "", ref: str = "A") -> dict:
    return {"datasource": DS, "expr": expr, "legendFormat": legend or "__auto", "refId": ref, "range": True}


class _Board:
    """Lays panels out left to right on Grafana's 24-column grid."""

    def __init__(self) -> None:
        self.panels: list[dict] = []
        self.x = self.y = self.row_h = 0

    def add(self, kind: str, title: str, targets: list[tuple[str, str]], w: int = 8, h: int = 8,
            unit: str = "short", description: str = "", **options) -> None:  # fmt: skip
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        refs = "ABCDEFGH"
        panel = {
            "id": len(self.panels) + 1,
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": {"x": self.x, "y": self.y, "w": w, "h": h},
            "fieldConfig": {"defaults": {"unit": unit, **options.pop("defaults", {})}, "overrides": []},
            "options": options
            or ({"legend": {"displayMode": "list", "placement": "bottom"}} if kind == "timeseries" else {}),
            "targets": [_target(e, leg, refs[i]) for i, (e, leg) in enumerate(targets)],
        }
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)


def _variables(node: bool = False) -> list[dict]:
    vs = [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
        },
        {
            "name": "run_id",
            "label": "Run",
            "type": "query",
            "datasource": DS,
            "query": {"query": "label_values(testbed_time_dilation_factor, run_id)", "refId": "run_id"},
            "definition": "label_values(testbed_time_dilation_factor, run_id)",
            "refresh": 2,
            "includeAll": True,
            "allValue": ".*",
            "multi": False,
            "current": {},
            "sort": 2,
        },
    ]
    if node:
        q = f"label_values(testbed_node_cpu_utilization_ratio{{{RUN}}}, node)"
        vs.append(
            {
                "name": "node",
                "label": "Node",
                "type": "query",
                "datasource": DS,
                "query": {"query": q, "refId": "node"},
                "definition": q,
                "refresh": 2,
                "includeAll": False,
                "multi": False,
                "current": {},
                "sort": 3,
            }
        )
    return vs


def _dashboard(uid: str, title: str, board: _Board, description: str, node: bool = False) -> dict:
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["testbed"],
        "editable": True,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "5s",
        "time": {"from": "now-15m", "to": "now"},
        "timezone": "",
        "graphTooltip": 1,
        "templating": {"list": _variables(node)},
        "annotations": {"list": []},
        "links": [{"type": "dashboards", "tags": ["testbed"], "title": "testbed", "asDropdown": True}],
        "panels": board.panels,
    }


def overview() -> dict:
    b = _Board()
    sel = f"{{{RUN}}}"
    b.add("stat", "Cluster CPU utilisation", [(f"avg(testbed_node_cpu_utilization_ratio{sel})", "")],
          w=4, h=5, unit="percentunit", defaults={"min": 0, "max": 1})  # fmt: skip
    b.add("stat", "Cluster power", [(f"sum(testbed_node_power_watts{sel})", "")], w=4, h=5, unit="watt")
    b.add("stat", "Energy so far", [(f"sum(testbed_node_energy_joules_total{sel})", "")], w=4, h=5,
          unit="joule", description="Power integrated over emulated time since the run began")  # fmt: skip
    b.add("stat", "Time dilation factor", [(f"max(testbed_time_dilation_factor{sel})", "")], w=4, h=5,
          unit="none", description="Real seconds per emulated second")  # fmt: skip
    b.add("stat", "Nodes up", [(f'count(up{{job="testbed",role="node",{RUN}}} == 1)', "")], w=4, h=5)
    b.add("stat", "Gang switch skew p99", [(_hq(0.99, SKEW, sel), "")], w=4, h=5, unit="s")
    b.add("timeseries", "CPU utilisation", [
        (f"avg(testbed_node_cpu_utilization_ratio{sel})", "cluster"),
        (f"min(testbed_node_cpu_utilization_ratio{sel})", "least busy node"),
    ], w=12, unit="percentunit", defaults={"min": 0, "max": 1})  # fmt: skip
    b.add("timeseries", "Power and energy", [
        (f"sum(testbed_node_power_watts{sel})", "power (W)"),
        (f"sum(rate(testbed_node_energy_joules_total{sel}[{RATE}]))", "energy rate (J per real s)"),
    ], w=12, unit="watt")  # fmt: skip
    b.add("timeseries", "Jobs by state", [(f"sum by (state) (testbed_jobs{sel})", "{{state}}")], w=12)
    b.add("timeseries", "Gang switch skew", [
        (_hq(0.5, SKEW, sel), "p50"),
        (_hq(0.99, SKEW, sel), "p99"),
    ], w=12, unit="s", description="Per slot: latest minus earliest node's switch (emulated s)")  # fmt: skip
    b.add("timeseries", "Dispatches per second", [
        (f"sum(rate(testbed_node_dispatches_total{sel}[{RATE}]))", "cluster"),
    ], w=12, unit="ops")  # fmt: skip
    b.add("timeseries", "Policy decision time p99", [
        (_hq(0.99, DECISION, sel, by="le, role"), "{{role}}"),
    ], w=12, unit="s")  # fmt: skip
    return _dashboard(
        "testbed-overview",
        "testbed: overview",
        b,
        "Cluster utilisation, power and energy, jobs by state, gang switch skew",
    )


def node() -> dict:
    b = _Board()
    sel = f'{{node="$node",{RUN}}}'
    local = f'{{role="local",node="$node",{RUN}}}'
    b.add("stat", "CPU utilisation", [(f"testbed_node_cpu_utilization_ratio{sel}", "")], w=6, h=5,
          unit="percentunit", defaults={"min": 0, "max": 1})  # fmt: skip
    b.add("stat", "Power", [(f"testbed_node_power_watts{sel}", "")], w=6, h=5, unit="watt")
    b.add("stat", "Energy so far", [(f"testbed_node_energy_joules_total{sel}", "")], w=6, h=5, unit="joule")
    b.add("stat", "CPU-rate error (probe)", [(f"testbed_node_cpu_rate_error_ratio{sel}", "")], w=6, h=5,
          unit="percentunit")  # fmt: skip
    b.add("timeseries", "Utilisation and power", [
        (f"testbed_node_cpu_utilization_ratio{sel}", "utilisation"),
        (f"testbed_node_power_watts{sel}", "power (W)"),
    ], w=12, unit="short")  # fmt: skip
    b.add("timeseries", "Processes by state", [
        (f"sum by (state) (testbed_node_processes{sel})", "{{state}}"),
    ], w=12, defaults={"custom": {"stacking": {"mode": "normal"}}})  # fmt: skip
    b.add("timeseries", "Dispatches per second", [
        (f"rate(testbed_node_dispatches_total{sel}[{RATE}])", "dispatches"),
    ], w=12, unit="ops")  # fmt: skip
    b.add("timeseries", "Job progress per second", [
        (f"sum by (job_class, unit) (rate(testbed_job_progress_total{sel}[{RATE}]))",
         "{{job_class}} {{unit}}"),
    ], w=12)  # fmt: skip
    b.add("timeseries", "Local policy decision time", [
        (_hq(0.5, DECISION, local), "p50"),
        (_hq(0.99, DECISION, local), "p99"),
    ], w=12, unit="s")  # fmt: skip
    b.add("timeseries", "Time dilation factor", [(f"testbed_time_dilation_factor{sel}", "TDF")], w=12,
          unit="none")  # fmt: skip
    b.add("timeseries", "CPU-rate error per window (rate watch; > 0: below its rate)", [
        (f"testbed_node_cpu_rate_window_error_ratio{sel}", "1 - delivered / entitled"),
    ], w=12, unit="percentunit")  # fmt: skip
    return _dashboard("testbed-node", "testbed: node", b, "One emulated node (choose it above)", node=True)


def deadlines_admissions() -> dict:
    b = _Board()
    sel = f"{{{RUN}}}"
    b.add("stat", "Admitted", [(f'sum(testbed_admissions_total{{outcome="admitted",{RUN}}})', "")], w=6, h=5)
    b.add("stat", "Rejected", [(f'sum(testbed_admissions_total{{outcome="rejected",{RUN}}})', "")], w=6, h=5)
    b.add("stat", "Deadlines met", [(f'sum(testbed_deadlines_total{{outcome="met",{RUN}}})', "")], w=6, h=5)
    b.add("stat", "Deadlines missed", [(f'sum(testbed_deadlines_total{{outcome="missed",{RUN}}})', "")],
          w=6, h=5)  # fmt: skip
    b.add("timeseries", "Admissions by outcome", [
        (f"sum by (outcome) (testbed_admissions_total{sel})", "{{outcome}}"),
    ], w=12)  # fmt: skip
    b.add("timeseries", "Deadlines by outcome", [
        (f"sum by (outcome) (testbed_deadlines_total{sel})", "{{outcome}}"),
    ], w=12)  # fmt: skip
    b.add("timeseries", "Rejected share of decisions", [
        (_share("testbed_admissions_total", "rejected"), "rejected / all"),
    ], w=12, unit="percentunit")  # fmt: skip
    b.add("timeseries", "Missed share of deadlines", [
        (_share("testbed_deadlines_total", "missed"), "missed / all"),
    ], w=12, unit="percentunit")  # fmt: skip
    b.add("timeseries", "Admissions by job class", [
        (f"sum by (job_class, outcome) (testbed_admissions_total{sel})", "{{job_class}} {{outcome}}"),
    ], w=12)  # fmt: skip
    b.add("timeseries", "Frame latency (release to last stage)", [
        (_hq(0.5, "testbed_frame_latency_seconds", sel), "p50"),
        (_hq(0.99, "testbed_frame_latency_seconds", sel), "p99"),
    ], w=12, unit="s")  # fmt: skip
    return _dashboard(
        "testbed-deadlines",
        "testbed: deadlines and admissions",
        b,
        "Admission control and deadlines (real-time and divisible-load schedulers; zero until they run)",
    )


def build_all() -> dict[str, dict]:
    """File name -> dashboard."""
    return {
        "overview.json": overview(),
        "node.json": node(),
        "deadlines.json": deadlines_admissions(),
    }


def render(dashboard: dict) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def write_all(out: str | Path = OUT_DIR) -> list[Path]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, d in build_all().items():
        (out / name).write_text(render(d))
        paths.append(out / name)
    return paths


def expressions(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel."""
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]


if __name__ == "__main__":  # pragma: no cover
    for p in write_all():
        print(p)
