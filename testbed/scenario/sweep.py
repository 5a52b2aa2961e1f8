"""Sweeps: one scenario, several variants (schedulers or parameter values), each run on the same generated
workload (same seed), compared in one table (``comparison.csv``) and one plot per metric
(``plots/<metric>.png``).

A scenario's ``sweep`` is either a list of named variants::

    sweep:
      - {name: batch, set: {scheduler.name: batch, scheduler.params: {}}}
      - {name: gang-q100, set: {scheduler.name: gang, scheduler.params.quantum_ms: 100}}

or a grid, the cartesian product of one or more keys' values, named from the values::

    sweep: {scheduler.name: [batch, gang, hybrid]}

A variant is the base scenario (``sweep`` removed) with its ``set`` applied through the same machinery as
``--set`` (:func:`testbed.scenario.model.apply_override`), then validated like a file. The workload section is
the base's unless a variant overrides a workload key, and then the notes say so.
"""

from __future__ import annotations

import copy
import csv
import itertools
import json
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.results import summary as results
from testbed.scenario.model import Scenario, ScenarioError, SweepVariant, apply_override, load

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
#: away and BE mean response time, divisible loads' finish spread, and the per-class progress rates
#: (``barriers_per_s.<class>``, paper 002).
OPTIONAL_METRICS = (
    "quanta_paired_fraction",
    "reject_ratio",
    "deadline_miss_ratio",
    "rt_rejected_ratio",
    "be_mean_response_time_s",
    "finish_spread_s",
)


def is_metric(name: str) -> bool:
    return name in METRICS or name in OPTIONAL_METRICS or results.is_rate(name)


def metric_label(name: str) -> str:
    if name in _LABELS:
        return _LABELS[name]
    if results.is_rate(name):
        return results.rate_label(name)
    return name.replace("_", " ")


#: comparison.csv column -> final state counted (summary.json jobs_by_state).
JOB_STATES = {
    "jobs_completed": results.COMPLETED,
    "jobs_failed": results.FAILED,
    "jobs_killed": results.KILLED,
    "jobs_rejected": results.REJECTED,
}
#: Up to this many variants the table has one column per variant; beyond, one row per variant.
TABLE_COLUMNS_MAX = 6
#: Names a variant cannot take: they are the sweep's own outputs in the results folder.
RESERVED = {"plots", "comparison.csv", "scenario.yaml"}

OK, FAILED, INTERRUPTED, NOT_RUN = "ok", "failed", "interrupted", "not run"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")
_KEY_RE = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")


# --------------------------------------------------------------------------------------------------------
# The sweep section: shape checks (called from the Scenario model's validators)


def check_name(name: str) -> str:
    if not _NAME_RE.match(name) or len(name) > 80:
        raise ValueError(
            f"variant name {name!r} is not usable as a folder name; use letters, digits and . _ + = - "
            "(up to 80 characters, starting with a letter or digit)"
        )
    if name in RESERVED:
        raise ValueError(f"variant name {name!r} is taken by the sweep's own output; pick another")
    return name


def check_keys(sets: dict[str, Any]) -> dict[str, Any]:
    if not sets:
        raise ValueError("empty: give the keys this variant changes, e.g. {scheduler.name: batch}")
    for key in sets:
        if not _KEY_RE.match(key):
            raise ValueError(f"key {key!r} is not a dotted field path such as scheduler.params.quantum_ms")
        if key.split(".")[0] == "sweep":
            raise ValueError(f"key {key!r}: a variant cannot change the sweep itself")
    return sets


def check_variants(vs: list[SweepVariant] | None) -> list[SweepVariant] | None:
    if vs is None:
        return None
    if not vs:
        raise ValueError("no variants; list some or remove 'sweep'")
    names = [v.name for v in vs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"duplicate variant name(s) {', '.join(dup)}; give every variant its own name")
    return vs


def _slug(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return re.sub(r"[^A-Za-z0-9._+=-]+", "_", text).strip("_") or "x"


def grid(spec: dict[str, Any]) -> list[dict]:
    """``{key: [values], ...}`` -> named variants, the cartesian product in key order. A string value names
    itself (``batch``); any other value is named with its key's last part (``quantum_ms100``); the parts
    of one variant's name are joined with ``-``."""
    if not spec:
        raise ValueError("empty grid; give {dotted.key: [values]} or a list of named variants")
    keys, lists = [], []
    for key, values in spec.items():
        if not isinstance(values, list):
            raise ValueError(
                f"grid key {key!r}: give a list of values, e.g. {{{key}: [a, b]}} "
                f"(got {type(values).__name__})"
            )
        if not values:
            raise ValueError(f"grid key {key!r}: the list of values is empty")
        keys.append(str(key))
        lists.append(values)
    check_keys(dict.fromkeys(keys))
    out = []
    for combo in itertools.product(*lists):
        parts = []
        for key, value in zip(keys, combo, strict=True):
            last = key.rsplit(".", 1)[-1]
            if isinstance(value, str):
                parts.append(_slug(value))
            elif isinstance(value, dict | list):
                parts.append(f"{last}{lists[keys.index(key)].index(value) + 1}")
            else:
                parts.append(f"{last}{_slug(value)}")
        out.append({"name": "-".join(parts), "set": dict(zip(keys, combo, strict=True))})
    names = [v["name"] for v in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(
            f"the grid gives two variants the name(s) {', '.join(dup)}; list named variants instead"
        )
    return out


def normalize(raw: Any) -> Any:
    """The ``sweep`` section as given -> a list of ``{name, set}`` (a grid is expanded); other shapes pass
    through for the model to reject."""
    if isinstance(raw, dict):
        return grid(raw)
    return raw


# --------------------------------------------------------------------------------------------------------
# Variants: the base scenario with each variant's overrides, all validated before anything runs


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: dict[str, Any]  # dotted key -> value, as the sweep gives them
    scenario: Scenario  # the base with the overrides applied; no sweep
    notes: tuple[str, ...] = ()  # what the user should know (workload overridden, parameters dropped)


def base_doc(scn: Scenario) -> dict:
    """The scenario as its author wrote it (fields left at their defaults stay out: a job's wait mode,
    for instance, depends on whether it was set), without the sweep."""
    doc = scn.model_dump(mode="json", exclude_unset=True)
    doc.pop("sweep", None)
    return doc


def _drop_foreign_params(doc: dict, sets: dict[str, Any]) -> list[str]:
    """A variant that changes scheduler.name without replacing scheduler.params keeps the base's params
    the new scheduler accepts and drops the rest (the base's gang quantum means nothing to batch); its
    own scheduler.params.X keys apply after that, and are checked."""
    from testbed.schedulers import registry

    if "scheduler.name" not in sets or any(k in ("scheduler", "scheduler.params") for k in sets):
        return []
    params = (doc.get("scheduler") or {}).get("params") or {}
    try:
        accepted = registry.get(sets["scheduler.name"]).all_defaults()
    except Exception:  # noqa: BLE001 - unknown scheduler: validation reports it, naming the variant
        return []
    dropped = sorted(set(params) - set(accepted))
    if dropped:
        doc["scheduler"]["params"] = {k: v for k, v in params.items() if k in accepted}
    return dropped


def _job_fingerprint(scn: Scenario) -> list[tuple]:
    """The generated jobs as data, less the receive and send wait modes and spin time (coscheduling schemes
    impose their own on every job: that is the policy under test, not a different workload)."""
    from testbed.scenario.workload import build

    out = []
    for j in build(scn):
        app = j.app.model_dump()
        app.pop("wait_mode", None)
        app.pop("spin_time_us", None)
        out.append((j.spec, tuple(sorted(app.items()))))
    return out


def variants(scn: Scenario) -> list[Variant]:
    """Every variant of ``scn``'s sweep, validated; a :class:`ScenarioError` lists every bad variant with
    the field and the fix."""
    if not scn.sweep:
        return []
    base = base_doc(scn)
    built: list[Variant] = []
    errors: list[str] = []
    for sv in scn.sweep:
        doc = copy.deepcopy(base)
        notes = []
        try:
            dropped = _drop_foreign_params(doc, sv.set)
            if dropped:
                notes.append(
                    f"variant '{sv.name}': base scheduler.params {', '.join(dropped)} dropped "
                    f"(not parameters of '{sv.set['scheduler.name']}')"
                )
            for key, value in sv.set.items():
                apply_override(doc, key.split("."), copy.deepcopy(value))
            vs = load(doc=doc)
        except ScenarioError as exc:
            errors.extend(f"variant '{sv.name}': {p.replace('--set ', 'set ')}" for p in exc.problems)
            continue
        wl = [k for k in sv.set if k.split(".")[0] == "workload"]
        if wl:
            notes.append(
                f"variant '{sv.name}' overrides {', '.join(wl)}: its jobs are not the other variants' jobs"
            )
        built.append(Variant(sv.name, dict(sv.set), vs, tuple(notes)))
    if errors:
        raise ScenarioError.listing("invalid sweep", errors)
    # Same seed, same jobs: say so when a variant's keys change the jobs without naming the workload
    # (cluster.cpu_rate, for instance, changes how many iterations a drawn duration is). A scheduler key
    # changes only the wait mode, which the fingerprint leaves out, so those variants are not rebuilt.
    ref = None
    for i, v in enumerate(built):
        if all(k.split(".")[0] == "scheduler" for k in v.overrides) or any(
            k.split(".")[0] == "workload" for k in v.overrides
        ):
            continue
        ref = _job_fingerprint(scn) if ref is None else ref
        if _job_fingerprint(v.scenario) != ref:
            keys = ", ".join(v.overrides)
            note = f"variant '{v.name}': its jobs differ from the base scenario's (it sets {keys})"
            built[i] = Variant(v.name, v.overrides, v.scenario, (*v.notes, note))
    return built


# --------------------------------------------------------------------------------------------------------
# Comparison


@dataclass
class VariantResult:
    variant: Variant
    summaries: list[dict] = field(default_factory=list)  # one per finished repetition
    status: str = NOT_RUN
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
    finished, each metric (the mean over repetitions, with ``<metric>_stdev`` when any variant ran more
    than one) and the error of a failed variant."""
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
                row[f"{m}_stdev"] = statistics.stdev(vals) if len(vals) > 1 else None
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
        errs = [num(r.get(f"{m}_stdev")) or 0.0 for r in rows]
        heights = [v if v is not None else 0.0 for v in vals]
        has_err = any(errs)
        bars = ax.bar(
            x, heights, yerr=errs if has_err else None, capsize=4 if has_err else 0, color="#4C72B0"
        )
        for b, v, r in zip(bars, vals, rows, strict=True):
            label = f"{v:.3g}" if v is not None else ("failed" if r.get("status") == FAILED else "n/a")
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
    from rich.table import Table

    fixed = {"variant", "status", "repetitions", "error", *JOB_STATES}
    cols = [k for k in (rows[0] if rows else {}) if not k.endswith("_stdev")]
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
        v, sd = num(row.get(m)), num(row.get(f"{m}_stdev"))
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
