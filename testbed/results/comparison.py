"""A sweep's comparison: one row per variant (``comparison.csv``), one plot per metric
(``plots/<metric>.png``) and the table printed at the end (the variants themselves are
testbed/scenario/sweep.py's)."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from testbed.core.jobs import StrEnum
from testbed.results import stats
from testbed.results import summary as results
from testbed.scenario.sweep import Variant

#: The headline metrics compared (summary.json keys); one plot each.
METRICS = (
    "mean_response_time_s",
    "mean_waiting_time_s",
    "mean_slowdown",
    "utilization",
    "makespan_s",
    "energy_j",
)
#: Compared when some variant's summary has them: the share of paired quanta (paired gang), the share of
#: jobs rejected and of deadlines missed (admission control, real-time classes), paper 000's RT jobs turned
#: away and BE mean response time, divisible loads' finish spread, local users' session slowdown and the
#: parallel jobs' slowdown against a dedicated cluster (paper 004: what each side costs the other), and
#: the per-class progress rates (``barriers_per_s.<class>``, paper 002).
OPTIONAL_METRICS = (
    "quanta_paired_fraction",
    "reject_ratio",
    "deadline_miss_ratio",
    "rt_rejected_ratio",
    "be_mean_response_time_s",
    "finish_spread_s",
    "local_slowdown_mean",
    "local_slowdown_max",
    results.PARALLEL_SLOWDOWN_MEAN,
    results.PARALLEL_SLOWDOWN_MAX,
)


#: comparison.csv: the suffix of a metric's 95 % confidence half-width over repetitions (mean ± it).
CI95 = "_ci95"
#: comparison.csv: the suffix of a metric's standard deviation over repetitions.
STDEV = "_stdev"
#: A metric's spread columns: read beside the metric, never drawn or tabled as metrics of their own.
SPREAD_SUFFIXES = (STDEV, CI95)


def is_metric(name: str) -> bool:
    # A rate's name is open-ended (``bytes_per_s.<class>``), so its spread columns
    # (``bytes_per_s.<class>_stdev``) would match is_rate too.
    if name.endswith(SPREAD_SUFFIXES):
        return False
    return name in METRICS or name in OPTIONAL_METRICS or results.is_rate(name)


def metric_label(name: str) -> str:
    if name in _LABELS:
        return _LABELS[name]
    if results.is_rate(name):
        return results.rate_label(name)
    return name.replace("_", " ")


#: comparison.csv column -> final state counted (summary.json jobs_by_state).
JOB_STATES = {
    "jobs_completed": results.FinalState.COMPLETED,
    "jobs_failed": results.FinalState.FAILED,
    "jobs_killed": results.FinalState.KILLED,
    "jobs_rejected": results.FinalState.REJECTED,
}
#: Up to this many variants the table has one column per variant; beyond, one row per variant.
TABLE_COLUMNS_MAX = 6


class VariantStatus(StrEnum):
    """How a sweep's variant ended (comparison.csv's ``status``)."""

    OK = "ok"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    NOT_RUN = "not run"


# --------------------------------------------------------------------------------------------------------
# Comparison


@dataclass
class VariantResult:
    variant: Variant
    summaries: list[dict] = field(default_factory=list)  # one per finished repetition
    status: VariantStatus = VariantStatus.NOT_RUN
    error: str = ""


def _get(doc: Any, key: str) -> Any:
    cur = doc
    for part in key.split("."):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


def override_keys(vs: list[Variant]) -> list[str]:
    keys: list[str] = []
    for v in vs:
        keys.extend(k for k in v.overrides if k not in keys)
    return keys


def _metric(s: dict, name: str) -> float | None:
    if name in JOB_STATES:
        return float((s.get("jobs_by_state") or {}).get(JOB_STATES[name], 0))
    v = s.get(name)
    return None if v is None else float(v)


def comparison_rows(res: list[VariantResult], keys: list[str] | None = None) -> list[dict]:
    """One row per variant: its name, the effective value of every overridden key, status, repetitions
    finished, each metric (the mean over repetitions, with ``<metric>_stdev`` and ``<metric>_ci95``, the
    95 % confidence half-width, when any variant ran more than one) and the error of a failed variant."""
    keys = keys if keys is not None else override_keys([r.variant for r in res])
    multi = any(r.variant.scenario.repetitions > 1 for r in res)
    found = {k for r in res for s in r.summaries for k, v in s.items() if v is not None and is_metric(k)}
    metrics = [*METRICS, *(m for m in OPTIONAL_METRICS if m in found)]
    metrics += sorted(k for k in found if results.is_rate(k))
    rows = []
    for r in res:
        eff = r.variant.scenario.model_dump(mode="json")
        row: dict[str, Any] = {"variant": r.variant.name}
        row.update({k: _get(eff, k) for k in keys})
        row["status"] = r.status
        row["repetitions"] = len(r.summaries)
        for m in (*metrics, *JOB_STATES):
            vals = [x for x in (_metric(s, m) for s in r.summaries) if x is not None]
            mean = sum(vals) / len(vals) if vals else None
            if m in JOB_STATES and mean is not None and not multi:
                mean = int(mean)
            row[m] = mean
            if multi:
                d = stats.describe(vals)
                row[f"{m}{STDEV}"] = d.stdev if d is not None else None
                row[f"{m}{CI95}"] = d.ci95_half if d is not None else None
        bad = [b for s in r.summaries for b in s.get("jobs_not_as_planned") or ()]
        row["jobs_not_as_planned"] = len(bad)
        row["not_as_planned"] = (
            results.unplanned_line(bad[0]) + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
            if bad
            else None
        )
        row["error"] = r.error
        rows.append(row)
    return rows


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, dict | list):
        return json.dumps(v, separators=(",", ":"))
    if isinstance(v, float):
        return round(v, 6)
    return v


def write_csv(path: Path, rows: list[dict]) -> None:
    if not rows:
        path.write_text("variant,status\n")
        return
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for row in rows:
            w.writerow({k: _cell(v) for k, v in row.items()})


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


_LABELS = {
    "mean_response_time_s": "mean response time (s)",
    "mean_waiting_time_s": "mean waiting time (s)",
    "mean_slowdown": "mean slowdown",
    "utilization": "utilisation",
    "makespan_s": "makespan (s)",
    "energy_j": "energy (J)",
    "local_slowdown_mean": "local users' slowdown, mean",
    "local_slowdown_max": "local users' slowdown, max",
    results.PARALLEL_SLOWDOWN_MEAN: "parallel slowdown vs dedicated, mean",
    results.PARALLEL_SLOWDOWN_MAX: "parallel slowdown vs dedicated, max",
}


def plot(out: Path, rows: list[dict], title: str = "") -> list[Path]:
    """One bar chart per metric, ``out/<metric>.png``, plus ``out/jobs.png`` (final states, stacked);
    error bars are the standard deviation over repetitions; a variant without a value is marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    names = [r["variant"] for r in rows]
    x = list(range(len(rows)))
    width = max(6.0, 0.9 * len(rows) + 2)
    paths = []

    def num(v):
        try:
            f = float(v)
        except (TypeError, ValueError):
            return None
        return None if math.isnan(f) else f

    extra = [k for k in (rows[0] if rows else {}) if is_metric(k) and k not in METRICS]
    for m in (*METRICS, *extra):
        fig, ax = plt.subplots(figsize=(width, 4.2), dpi=100)
        vals = [num(r.get(m)) for r in rows]
        errs = [num(r.get(f"{m}{STDEV}")) or 0.0 for r in rows]
        heights = [v if v is not None else 0.0 for v in vals]
        has_err = any(errs)
        bars = ax.bar(
            x, heights, yerr=errs if has_err else None, capsize=4 if has_err else 0, color="#4C72B0"
        )
        for b, v, r in zip(bars, vals, rows, strict=True):
            label = (
                f"{v:.3g}"
                if v is not None
                else ("failed" if r.get("status") == VariantStatus.FAILED else "n/a")
            )
            ax.annotate(
                label,
                (b.get_x() + b.get_width() / 2, b.get_height()),
                ha="center",
                va="bottom",
                fontsize=8,
                xytext=(0, 2),
                textcoords="offset points",
            )
        ax.set_xticks(x)
        ax.set_xticklabels(
            names, rotation=30 if len(rows) > 4 else 0, ha="right" if len(rows) > 4 else "center"
        )
        ax.margins(y=0.12)
        ax.set_ylabel(metric_label(m))
        ax.set_title(f"{title}: {metric_label(m)}" if title else metric_label(m))
        ax.grid(axis="y", alpha=0.3)
        fig.tight_layout()
        p = out / f"{m}.png"
        fig.savefig(p)
        plt.close(fig)
        paths.append(p)

    fig, ax = plt.subplots(figsize=(width, 4.2), dpi=100)
    bottom = [0.0] * len(rows)
    colors = {"jobs_completed": "#55A868", "jobs_failed": "#C44E52", "jobs_killed": "#DD8452"}
    colors["jobs_rejected"] = "#8172B3"
    for col in JOB_STATES:
        vals = [num(r.get(col)) or 0.0 for r in rows]
        ax.bar(x, vals, bottom=bottom, label=col.removeprefix("jobs_"), color=colors[col])
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=30 if len(rows) > 4 else 0, ha="right" if len(rows) > 4 else "center")
    ax.set_ylabel("jobs")
    ax.set_title(f"{title}: jobs by final state" if title else "jobs by final state")
    ax.set_ylim(0, max(max(bottom, default=0.0), 1.0) * 1.35)
    ax.legend(fontsize=8, ncols=4, loc="upper center")
    fig.tight_layout()
    p = out / "jobs.png"
    fig.savefig(p)
    plt.close(fig)
    paths.append(p)
    return paths


def write(out: Path, res: list[VariantResult], title: str = "") -> list[dict]:
    """``out/comparison.csv`` and ``out/plots/*.png`` for the variants in ``res``; returns the rows."""
    rows = comparison_rows(res)
    write_csv(out / "comparison.csv", rows)
    plot(out / "plots", rows, title)
    return rows


def table(rows: list[dict], title: str = "comparison"):
    """A rich table of comparison rows (dicts from :func:`comparison_rows` or read back from the CSV):
    one column per variant, like :func:`testbed.results.summary.table`, so that a handful of variants fits a
    terminal; the CSV has one row per variant."""

    # Bookkeeping columns, not keys a variant overrides (not_as_planned: the exit status says it).
    fixed = {"variant", "status", "repetitions", "error", "jobs_not_as_planned", "not_as_planned"}
    fixed |= set(JOB_STATES)
    cols = [k for k in (rows[0] if rows else {}) if not k.endswith(SPREAD_SUFFIXES)]
    keys = [k for k in cols if k not in fixed and not is_metric(k)]
    metrics = [k for k in cols if is_metric(k)]

    def num(v):
        if v is None or v == "":
            return None
        try:
            return float(v)
        except (TypeError, ValueError):
            return None

    def fmt(row, m, unit=""):
        v, sd = num(row.get(m)), num(row.get(f"{m}{STDEV}"))
        if v is None:
            return "-"
        text = f"{v:.3f}" if abs(v) < 1000 else f"{v:,.0f}"
        if sd:
            text += f" ± {sd:.3f}" if abs(sd) < 1000 else f" ± {sd:,.0f}"
        return text + unit

    def count(row, m):
        v = num(row.get(m))
        return "-" if v is None else f"{v:g}"

    def show(v):
        if isinstance(v, str) and v[:1] in "{[":
            try:
                v = json.loads(v)
            except ValueError:
                return v
        if isinstance(v, dict):
            return " ".join(f"{k}={json.dumps(x)}" for k, x in v.items()) or "{}"
        if isinstance(v, list):  # e.g. workload.jobs: the CSV has it whole
            return f"[{len(v)} items]"
        return "-" if v is None or v == "" else str(_cell(v))

    short = {
        "mean_response_time_s": "response time",
        "mean_waiting_time_s": "waiting time",
        "mean_slowdown": "slowdown",
    }
    lines = [(k, [show(r.get(k)) for r in rows]) for k in keys]
    for m in metrics:
        unit = {"s": " s", "j": " J"}.get(m.rsplit("_", 1)[-1], "") if m in METRICS else ""
        lines.append((short.get(m, metric_label(m).split(" (")[0]), [fmt(r, m, unit) for r in rows]))
    lines.append(("jobs ok/fail/kill/rej", ["/".join(count(r, m) for m in JOB_STATES) for r in rows]))
    if any(num(r.get("repetitions")) not in (None, 1.0) for r in rows):
        lines.append(("repetitions", [str(r.get("repetitions")) for r in rows]))
    lines.append(("status", [str(r.get("status") or "") for r in rows]))
    if any(r.get("error") for r in rows):
        lines.append(("error", [str(r.get("error") or "") for r in rows]))
    t = Table(title=title)
    if len(rows) <= TABLE_COLUMNS_MAX:  # one column per variant
        t.add_column("", no_wrap=True)
        for row in rows:
            t.add_column(str(row["variant"]), justify="right")
        for label, cells in lines:
            t.add_row(label, *cells)
        return t
    # Many variants: one row each, so that they stay readable in a terminal.
    t.add_column("variant", no_wrap=True)
    for label, _ in lines:
        t.add_column(label, justify="right")
    for i, row in enumerate(rows):
        t.add_row(str(row["variant"]), *[cells[i] for _, cells in lines])
    return t
