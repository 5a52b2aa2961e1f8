"""``testbed report DIR``: one self-contained HTML page of a results folder (docs/architecture.md,
"Reports"), readable offline: inline CSS, inline SVG figures (testbed/results/plots.py), a few lines of
script to sort the tables, nothing fetched.

- A run: its settings, with a warning for each figure not to be trusted; the headline figures; a table
  per job class; the Gantt chart per node (time-sharing: gang slots, stops and continues); the gang matrix
  over time; utilisation, power and jobs waiting over time; every job.
- A sweep (a folder with ``comparison.csv``): each metric against each numeric swept key, a line per
  combination of the other keys, error bars from repetitions; then the comparison table.
- Anything else holding runs (repetitions, a parent of runs) and ``testbed compare``: a bar per run.

Every figure of summary.json on the page carries ``data-key`` and ``data-value`` (the exact value), so a
test reads the page's numbers back (tests/e2e/test_report.py).
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from testbed.core import events as ev
from testbed.results import compare, comparison, plots, timeline, units
from testbed.results import summary as results
from testbed.scenario import ScenarioError, load

#: The file a report is written to in the folder it describes (testbed/results/folder.py lists it).
REPORT_FILE = "report.html"
#: A measured CPU-rate error above this makes the run's times untrustworthy (docs/measurements.md).
RATE_ERROR_WARN = 0.05
#: Headline figures of a run, in the order shown.
HEADLINE = (
    "mean_response_time_s",
    "mean_waiting_time_s",
    "mean_slowdown",
    "utilization",
    "makespan_s",
    "energy_j",
    "reject_ratio",
    "deadline_miss_ratio",
    "rt_rejected_ratio",
    "be_mean_response_time_s",
    "quanta_paired_fraction",
    "finish_spread_s",
    "local_slowdown_mean",
    "local_slowdown_max",
    results.PARALLEL_SLOWDOWN_MEAN,
    results.PARALLEL_SLOWDOWN_MAX,
)
#: Bins of the over-time panels.
BINS = 200


class ReportError(ValueError):
    """A folder a report cannot be made of; one line naming it and the fix."""


# --------------------------------------------------------------------------------------------------------
# The page


_CSS = """
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;color:#222;max-width:1100px;margin:2em auto;
padding:0 1.2em}
h1{font-size:1.5em;margin-bottom:.1em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
.sub{color:#555;margin-top:0}
table{border-collapse:collapse;margin:.6em 0;font-variant-numeric:tabular-nums}
th,td{padding:.25em .7em;border-bottom:1px solid #e4e4e4;text-align:right;vertical-align:top}
th{background:#f6f6f6;cursor:pointer;user-select:none}th:first-child,td:first-child{text-align:left}
table.kv td:first-child{color:#555}table.kv td{text-align:left}
.warn{background:#fff4e5;border-left:4px solid #e8a33d;padding:.5em 1em;margin:.4em 0}
.bad{background:#fdecea;border-left-color:#d9534f}
figure{margin:1em 0}figcaption{color:#555;font-size:.9em;margin-top:.3em}
figure svg{max-width:100%;height:auto}figure.wide svg{width:100%}
.grid{display:flex;flex-wrap:wrap;gap:1em}.grid figure{margin:0}
details summary{cursor:pointer;color:#335}
code{background:#f3f3f3;padding:0 .25em}
"""

# Sorts a table by the clicked column: by each cell's data-value where it has one, else its text.
_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var body = table.tBodies[0], rows = Array.from(body.rows);
      var up = th.dataset.dir !== 'up'; th.dataset.dir = up ? 'up' : 'down';
      function key(row) {
        var cell = row.cells[col], v = cell.dataset.value;
        var n = parseFloat(v !== undefined ? v : cell.textContent.replace(/,/g, ''));
        return isNaN(n) ? cell.textContent : n;
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        var c = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
        return up ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def _page(title: str, body: list[str]) -> str:
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width,initial-scale=1'><title>{_e(title)}</title>"
        f"<style>{_CSS}</style></head><body>\n"
        + "\n".join(body)
        + f"\n<script>{_SCRIPT}</script></body></html>\n"
    )


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _cell(key: str, value, scale: units.Scale | None = None) -> str:
    """A table cell showing ``value`` with its unit, carrying the exact value for tests and sorting."""
    attrs = f" data-key='{_e(key)}'"
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        attrs += f" data-value='{value!r}'"
    return f"<td{attrs}>{_e(units.show(key, value, scale))}</td>"


def _table(head: list[str], rows: list[list[str]], cls: str = "sortable") -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f"<table class='{cls}'><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _kv(rows: list[tuple[str, str]]) -> str:
    """A two-column table of (label, cell html)."""
    return (
        "<table class='kv'><tbody>"
        + "".join(f"<tr><td>{_e(k)}</td>{v}</tr>" for k, v in rows)
        + "</tbody></table>"
    )


def _td(text) -> str:
    return f"<td>{_e(text)}</td>"


def _rates(c, s: dict) -> str:
    """The cluster's rate: one number, or each rate with its nodes when they differ (cluster.groups)."""
    return f"{c.cpu_rate:g}" if c.groups is None else s.get("node_rates") or f"{c.min_rate():g} and up"


def _figure(svg: str, caption: str, fig_id: str, wide: bool = False) -> str:
    cls = " class='wide'" if wide else ""
    return f"<figure id='{fig_id}'{cls}>{svg}<figcaption>{_e(caption)}</figcaption></figure>"


def _warnings(items: list[tuple[str, bool]]) -> list[str]:
    return [f"<div class='warn{' bad' if bad else ''}' data-warning>{_e(text)}</div>" for text, bad in items]


# --------------------------------------------------------------------------------------------------------
# A run


def _read_summary(run: Path) -> dict:
    try:
        return json.loads((run / "summary.json").read_text())
    except OSError:
        raise ReportError(
            f"{run}: no summary.json; rebuild it with `testbed results {run}`, then report"
        ) from None
    except ValueError as exc:
        raise ReportError(
            f"{run}/summary.json: not JSON ({exc}); rebuild it with `testbed results {run}`"
        ) from None


def _events(run: Path) -> Iterator[dict]:
    """The run's events, through the event log's own reader."""
    log = ev.find_log(run)
    if log is None:
        raise ReportError(
            f"{run}: no events.jsonl (a killed run keeps only events/*.jsonl); merge them with "
            f"`testbed results {run}`, then report"
        )
    return ev.read_jsonl(log)


def run_warnings(s: dict) -> list[tuple[str, bool]]:
    """(text, serious) for each figure of the run not to be trusted as it stands."""
    out = []
    err = s.get("cpu_rate_error_max")
    if err is not None and err > RATE_ERROR_WARN:
        out.append(
            (
                f"The measured CPU rate missed the configured one by up to {err:.1%} (above "
                f"{RATE_ERROR_WARN:.0%}): times and utilisation are off by as much. Run on a quieter host "
                "or with a larger clock.tdf.",
                True,
            )
        )
    rate = results.rate_warning(s)
    if rate:
        out.append((rate[0].upper() + rate[1:] + ".", True))
    paged = results.paging_warning(s)
    if paged:
        out.append((paged[0].upper() + paged[1:] + ".", True))
    if not s.get("cpu_rate_fixed", True) or s.get("envelope") == "none":
        out.append(
            (
                f"Envelope '{s.get('envelope')}': the nodes' CPU rate was not fixed, so every time here "
                "depends on what else the host ran. Use cluster.envelope: cgroup (as root) or docker.",
                True,
            )
        )
    if s.get("error"):
        out.append((f"The run ended with an error: {s['error']}", True))
    bad = s.get("jobs_not_as_planned") or []
    lines = [results.unplanned_line(b) for b in bad[:3]]
    if len(bad) > 3:
        lines.append(f"... and {len(bad) - 3} more jobs that did not end as planned (see the jobs table)")
    out += [(line, True) for line in lines]
    if s.get("jobs_never_submitted"):
        out.append(
            (f"{s['jobs_never_submitted']} jobs of the workload were never submitted (interrupted).", False)
        )
    return out


def _settings(s: dict, scn) -> list[tuple[str, str]]:
    c, sch = scn.cluster, scn.scheduler
    params = ", ".join(f"{k}={v}" for k, v in (sch.model_dump(mode="json").get("params") or {}).items())
    tdf = s.get("tdf")
    rows = [
        ("scheduler", _td(f"{sch.name}" + (f" ({params})" if params else ""))),
        (
            "backend",
            _td("simulator" if s.get("backend") == "sim" else f"real processes ({s.get('backend')})"),
        ),
        ("cluster", _td(f"{c.nodes} nodes x {c.cores_per_node} core(s) at rate {_rates(c, s)}")),
        ("TDF", f"<td data-key='tdf' data-value='{tdf!r}'>{_e(units.number(tdf) if tdf else '-')}</td>"),
        ("envelope", f"<td data-key='envelope'>{_e(s.get('envelope'))}</td>"),
        ("CPU-rate error (max)", _cell("cpu_rate_error_max", s.get("cpu_rate_error_max"))),
        ("CPU-rate error, worst window", _cell("rate_window_error_max", s.get("rate_window_error_max"))),
        (
            "gang switch skew p50 / p99",
            _td(
                " / ".join(
                    units.show("gang_skew_ms", s.get(k)) for k in ("gang_skew_ms_p50", "gang_skew_ms_p99")
                )
            ),
        ),
        ("workload seed", _td(s.get("workload_seed", scn.workload.seed))),  # a repetition's own
        (
            "power model",
            _td(
                f"P = (B + X u) N: B = {c.power.idle_watts:g} W per idle node, "
                f"X = {c.power.busy_watts:g} W more per node at full utilisation"
            ),
        ),
        ("ended", _td(s.get("ended") or "-")),
    ]
    return rows


def _headline(s: dict) -> str:
    done = (s.get("jobs_by_state") or {}).get(results.FinalState.COMPLETED, 0)
    rows = [
        (
            "jobs completed / submitted",
            f"<td data-key='jobs' data-value='{s.get('jobs')!r}'>{done} / {s.get('jobs')}</td>",
        )
    ]
    for k in HEADLINE:
        if k in s and s[k] is not None:
            rows.append((units.label(k), _cell(k, s[k])))
    states = s.get("jobs_by_state") or {}
    for state in (results.FinalState.FAILED, results.FinalState.KILLED, results.FinalState.REJECTED):
        if states.get(state):
            rows.append((f"jobs {state.name.lower()}", _cell(f"jobs_{state.name.lower()}", states[state])))
    for k in sorted(k for k in s if results.is_rate(k)):
        rows.append((units.label(k), _cell(k, s[k])))
    return _kv(rows)


def _by_class(rows: list[dict], s: dict) -> str:
    """Per job class: jobs, their ends, mean response/waiting time and slowdown, and the summary's
    per-class ratios (rejections, deadlines missed, frame latency)."""
    classes = sorted({r["job_class"] or "default" for r in rows})
    extra = sorted(
        {k.split(".", 1)[0] for k in s if "." in k and not results.is_rate(k) and s[k] is not None}
    )
    head = [
        "class",
        "jobs",
        "completed",
        "rejected",
        "failed / killed",
        "mean response",
        "mean waiting",
        "mean slowdown",
        "max slowdown",
        *[units.label(k) for k in extra],
    ]
    body = []

    def mean(vals):
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    for c in classes:
        mine = [r for r in rows if (r["job_class"] or "default") == c]
        done = [r for r in mine if r["final_state"] == results.FinalState.COMPLETED]
        n = {st: sum(r["final_state"] == st for r in mine) for st in results.FinalState}
        cells = [
            _td(c),
            _cell(f"jobs.{c}", len(mine)),
            _cell(f"jobs_completed.{c}", len(done)),
            _cell(f"jobs_rejected.{c}", n[results.FinalState.REJECTED]),
            _td(f"{n[results.FinalState.FAILED]} / {n[results.FinalState.KILLED]}"),
            _cell(f"mean_response_time_s.{c}", mean(r["turnaround_time"] for r in done)),
            _cell(f"mean_waiting_time_s.{c}", mean(r["waiting_time"] for r in done)),
            _cell(f"mean_slowdown.{c}", mean(r["stretch"] for r in done)),
            _cell(
                f"max_slowdown.{c}",
                max((r["stretch"] for r in done if r["stretch"] is not None), default=None),
            ),
        ]
        cells += [_cell(f"{k}.{c}", s.get(f"{k}.{c}")) for k in extra]
        body.append(cells)
    return _table(head, body)


#: The page lists at most this many jobs (a trace's 10,000 would make it megabytes); jobs.csv has all.
JOBS_LISTED = 2000


def _jobs_table(rows: list[dict]) -> str:
    head = [
        "job",
        "class",
        "size",
        "submitted",
        "started",
        "finished",
        "waiting",
        "response",
        "slowdown",
        "nodes",
        "state",
        "reason",
    ]
    body = []
    for r in rows[:JOBS_LISTED]:
        body.append(
            [
                _td(r["job_id"]),
                _td(r["job_class"] or "-"),
                _td(r["requested_number_of_resources"]),
                _cell("submission_time_s", r["submission_time"]),
                _cell("starting_time_s", r["starting_time"]),
                _cell("finish_time_s", r["finish_time"]),
                _cell("waiting_time_s", r["waiting_time"]),
                _cell("turnaround_time_s", r["turnaround_time"]),
                _cell("stretch", r["stretch"]),
                _td(r["allocated_resources"] or "-"),
                _td(r["final_state"]),
                _td(r["reason"] or ""),
            ]
        )
    return _table(head, body)


def _listed(n: int) -> str:
    if n <= JOBS_LISTED:
        return f"all {n} jobs (jobs.csv)"
    return f"the first {JOBS_LISTED:,} of {n:,} jobs (jobs.csv has them all)"


def run_page(run: Path) -> str:
    s = _read_summary(run)
    try:
        scn = load(run / "scenario.yaml")
    except ScenarioError as exc:
        raise ReportError(f"{run}: its scenario.yaml cannot be read back ({exc})") from None
    tally = results.Tally()
    b = timeline._Builder(scn.cluster.nodes)
    for e in _events(run):
        tally.add(e)
        b.add(e)
    tl = b.finish()
    rows = tally.rows()
    first = min((r["submission_time"] for r in rows), default=0.0)
    window = (first, first + (s.get("makespan_s") or 0.0))
    if window[1] <= window[0]:
        window = (first, max(tl.end, first + 1.0))
    c = scn.cluster
    backend = "simulated" if s.get("backend") == "sim" else "real processes"
    title = f"{scn.name}: {scn.scheduler.name}, {c.nodes} nodes, {backend}"
    body = [
        f"<h1>{_e(title)}</h1>",
        f"<p class='sub'>{_e(scn.description or '')}<br><code>{_e(run)}</code></p>",
        *_warnings(run_warnings(s)),
        "<h2>Settings</h2>",
        _kv(_settings(s, scn)),
        "<h2>Results</h2>",
        _headline(s),
        "<h2>Per job class</h2>",
        _by_class(rows, s),
    ]
    if tl.segments:
        cut = (
            f" (the first {plots.GANTT_NODES_MAX} of {c.nodes} nodes)"
            if c.nodes > plots.GANTT_NODES_MAX
            else ""
        )
        how = (
            "Solid: the process runs; pale: it is alive but stopped (its job's gang slot is not on). "
            if tl.sliced
            else "Each process from its start to its exit (this policy's local decisions are not logged). "
        )
        body += [
            "<h2>Gantt chart per node</h2>",
            _figure(plots.gantt(tl, window), how + "Colour: the job." + cut, "gantt", True),
        ]
    if tl.cells:
        body += [
            "<h2>Gang matrix over time</h2>",
            _figure(
                plots.matrix(tl, window),
                "Each band is one row of the gang matrix (two rows sharing a quantum under paired gang are a "
                "band of their own), with the nodes 0..N-1 from top to bottom, in the colour of the job the "
                "row holds on each node (from the nodes' slot switches); the dark strip above a band: the "
                "quanta its row runs.",
                "matrix",
                True,
            ),
        ]
    power = plots.Power(c.nodes, c.power.idle_watts, c.power.busy_watts)
    capacity = c.total_rate()  # each node at its own rate (cluster.groups)
    body += [
        "<h2>Utilisation, power and queue over time</h2>",
        _figure(
            plots.over_time(tl, window, capacity, power, BINS),
            "CPU utilisation: each process's CPU time (from its exit) spread over the time it ran; its mean "
            "is the summary's utilisation. Power: P = (B + X u) N from it; its integral is the summary's "
            "energy. Jobs: running and waiting in the queue.",
            "over-time",
            True,
        ),
        "<h2>Jobs</h2>",
        f"<details><summary>{_listed(len(rows))}</summary>{_jobs_table(rows)}</details>",
    ]
    return _page(title, body)


# --------------------------------------------------------------------------------------------------------
# A sweep


@dataclass(frozen=True)
class Axis:
    key: str
    values: list  # distinct, in first-seen order (numbers sorted)
    numeric: bool


_MIX = re.compile(r"workload\.generator\.classes\.(\d+)\.weight")


def _parse(v: str):
    if v == "":
        return None
    if v in ("True", "False"):  # a bool as Python wrote it into the CSV
        return v == "True"
    try:
        return json.loads(v)
    except ValueError:
        return v


def _num(v) -> float | None:
    if isinstance(v, bool) or v is None or v == "":
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def sweep_axes(rows: list[dict]) -> list[Axis]:
    """The swept keys: comparison.csv's columns between ``variant`` and ``status``, each with its values;
    numeric when every value is a number (a class weight is a mix, not a number)."""
    cols = list(rows[0]) if rows else []
    keys = cols[1 : cols.index("status")] if "status" in cols else []
    axes = []
    for k in keys:
        vals = []
        for r in rows:
            v = _parse(r[k]) if isinstance(r[k], str) else r[k]
            if v not in vals:
                vals.append(v)
        numeric = not _MIX.fullmatch(k) and all(_num(v) is not None for v in vals)
        axes.append(Axis(k, sorted(vals, key=float) if numeric else vals, numeric))
    return axes


class _Namer:
    """Readable names of a swept key's values: 'mcdf', 'admission on', 'quantum 100 ms', 'RT:BE 9:1'."""

    def __init__(self, sweep: Path) -> None:
        self.sweep = sweep
        self._classes: list | None = None

    def classes(self) -> list:
        if self._classes is None:
            self._classes = []
            for p in sorted(self.sweep.rglob("scenario.yaml")):
                try:
                    gen = load(p).workload.generator
                except ScenarioError:
                    continue
                self._classes = list(gen.classes) if gen is not None else []
                break
        return self._classes

    def __call__(self, key: str, v) -> str:
        last = key.rsplit(".", 1)[-1]
        m = _MIX.fullmatch(key)
        if m and _num(v) is not None:
            return self._mix(int(m.group(1)), float(v))
        if isinstance(v, bool):
            return f"{last.replace('_', ' ')} {'on' if v else 'off'}"
        if isinstance(v, dict):
            return str(v.get("name") or ", ".join(f"{k}={x}" for k, x in v.items()))
        if key in ("scheduler.name", "name") or last == "name":
            return str(v)
        return f"{plots.axis_name(key)} {v}"

    def _mix(self, idx: int, w: float) -> str:
        """A class weight as the mix it makes: 'RT:BE 9:1' (the other class's weight from the scenario)."""
        cls = self.classes()
        if len(cls) != 2 or idx > 1:
            return f"weight {w:g}"
        other = float(cls[1 - idx].weight)
        ws = [other, w] if idx == 1 else [w, other]
        names = [(getattr(c, "name", None) or f"class {i}").upper() for i, c in enumerate(cls)]
        ratio = Fraction(ws[0] / ws[1]).limit_denominator(20) if ws[1] else Fraction(1)
        return f"{names[0]}:{names[1]} {ratio.numerator}:{ratio.denominator}"


def _error_column(rows: list[dict], m: str) -> tuple[str, str] | None:
    named = ((comparison.CI95, "95 % confidence interval"), (comparison.STDEV, "standard deviation"))
    for suffix, name in named:
        if f"{m}{suffix}" in rows[0] and any(_num(r.get(f"{m}{suffix}")) for r in rows):
            return suffix, name + " over repetitions"
    return None


def _metrics(rows: list[dict]) -> list[str]:
    cols = list(rows[0]) if rows else []
    return [c for c in cols if comparison.is_metric(c) and any(_num(r.get(c)) is not None for r in rows)]


def sweep_figures(rows: list[dict], axes: list[Axis], namer) -> list[tuple[str, str, str]]:
    """(svg, caption, id) for each metric against each numeric axis (a line per combination of the other
    axes); with no numeric axis, a bar per variant."""
    figs = []
    numeric = [a for a in axes if a.numeric and len(a.values) > 1]
    for m in _metrics(rows):
        err = _error_column(rows, m)
        err_name = err[1] if err else ""
        if not numeric:
            figs.append((_grouped(rows, axes, namer, m, err), units.label(m), f"fig-{m}"))
            continue
        for x in numeric:
            others = [a for a in axes if a is not x and len(a.values) > 1]
            series = []
            for combo in _combos(rows, others):
                mine = [
                    r for r in rows if all(_parse(r[a.key]) == v for a, v in zip(others, combo, strict=True))
                ]
                pts = sorted(((_num(_parse(r[x.key])), r) for r in mine), key=lambda p: p[0])
                if not pts:
                    continue
                label = ", ".join(namer(a.key, v) for a, v in zip(others, combo, strict=True)) or units.label(
                    m
                )
                series.append(
                    plots.Line(
                        label,
                        [p[0] for p in pts],
                        [_num(r.get(m)) for _, r in pts],
                        [_num(r.get(m + err[0])) if err else None for _, r in pts],
                    )
                )
            legend = ", ".join(_axis_name(a.key) for a in others)
            svg = plots.lines(m, _axis_name(x.key), series, err_name, legend)
            figs.append((svg, f"{units.label(m)} against {_axis_name(x.key)}", f"fig-{m}-{x.key}"))
    return figs


def _combos(rows: list[dict], axes: list[Axis]) -> list[tuple]:
    """The combinations of ``axes``' values that some row has, in the rows' order (swept keys may move
    together: a scheduler's effective parameters hold the admission flag swept beside it)."""
    seen: list[tuple] = []
    for r in rows:
        combo = tuple(_parse(r[a.key]) for a in axes)
        if combo not in seen:
            seen.append(combo)
    return seen


def _grouped(rows: list[dict], axes: list[Axis], namer, m: str, err) -> str:
    """No numeric swept key: the last swept key's values on the x axis (paper 000's mixes), a bar per
    combination of the others in each group; a sweep of named variants, a bar per variant."""
    swept = [a for a in axes if len(a.values) > 1]
    value = [_num(r.get(m)) for r in rows]
    errs = [_num(r.get(m + err[0])) if err else None for r in rows]
    err_name = err[1] if err else ""
    if not swept:
        return plots.bars(m, [r["variant"] for r in rows], value, errs, err_name)
    x, others = swept[-1], swept[:-1]
    cats = [namer(x.key, v) for v in x.values]
    series = []
    for combo in _combos(rows, others):
        ys, es = [None] * len(cats), [None] * len(cats)
        for i, r in enumerate(rows):
            if all(_parse(r[a.key]) == v for a, v in zip(others, combo, strict=True)):
                k = x.values.index(_parse(r[x.key]))
                ys[k], es[k] = value[i], errs[i]
        label = ", ".join(namer(a.key, v) for a, v in zip(others, combo, strict=True)) or units.label(m)
        series.append(plots.Line(label, list(range(len(cats))), ys, es))
    legend = ", ".join(_axis_name(a.key) for a in others)
    return plots.grouped_bars(m, cats, _axis_name(x.key), series, err_name, legend)


def _axis_name(key: str) -> str:
    """A swept key as its axis reads: a class weight is the mix it makes."""
    return "mix" if _MIX.fullmatch(key) else plots.axis_name(key)


def _rows_table(rows: list[dict], axes: list[Axis], namer) -> str:
    metrics = _metrics(rows)
    head = [
        "variant",
        *[_axis_name(a.key) for a in axes],
        "status",
        "repetitions",
        *[units.label(m) for m in metrics],
    ]
    scales = {m: units.scale_for(m, [v for r in rows if (v := _num(r.get(m))) is not None]) for m in metrics}
    body = []
    for r in rows:
        cells = [_td(r["variant"])]
        cells += [
            _td(namer(a.key, _parse(r[a.key])) if isinstance(r[a.key], str) else r[a.key]) for a in axes
        ]
        cells += [_td(r.get("status") or ""), _td(r.get("repetitions") or "")]
        cells += [_cell(m, _num(r.get(m)), scales[m]) for m in metrics]
        body.append(cells)
    return _table(head, body)


def sweep_page(sweep: Path) -> str:
    rows = comparison.read_csv(sweep / "comparison.csv")
    if not rows:
        raise ReportError(f"{sweep}/comparison.csv: no variant in it; run the sweep again")
    axes = sweep_axes(rows)
    namer = _Namer(sweep)
    title = f"sweep: {sweep.name} ({len(rows)} variants)"
    body = [f"<h1>{_e(title)}</h1>", f"<p class='sub'><code>{_e(sweep)}</code></p>"]
    bad = [r for r in rows if r.get("status") != comparison.VariantStatus.OK or r.get("not_as_planned")]
    body += _warnings(
        [(f"variant {r['variant']}: {r.get('error') or r.get('not_as_planned')}", True) for r in bad]
    )
    reps = {r.get("repetitions") for r in rows}
    if reps <= {"1", 1, None}:
        body += _warnings([("One run per variant: no error bars (set repetitions for them).", False)])
    body.append("<h2>Figures</h2><div class='grid'>")
    for svg, caption, fid in sweep_figures(rows, axes, namer):
        body.append(_figure(svg, caption, _e(fid)))
    body += ["</div>", "<h2>Comparison</h2>", _rows_table(rows, axes, namer)]
    return _page(title, body)


# --------------------------------------------------------------------------------------------------------
# Runs side by side (testbed compare, repetitions)


def compare_warnings(es: list[compare.Entry]) -> list[tuple[str, bool]]:
    """Each run's warnings (testbed compare), named by its label, once each."""
    out: list[tuple[str, bool]] = []
    for e in es:
        for s in e.summaries:
            for text, bad in run_warnings(s):
                if (f"{e.label}: {text}", bad) not in out:
                    out.append((f"{e.label}: {text}", bad))
    return out


def compare_page(rows: list[dict], title: str, warnings: list[tuple[str, bool]] = ()) -> str:
    """Runs side by side: a bar per run for each metric (its folder's label over its scheduler and
    backend), and the table."""
    body = [f"<h1>{_e(title)}</h1>", *_warnings(list(warnings))]
    labels = [f"{r['variant']}\n{r['scheduler']}, {r['backend']}" for r in rows]
    body.append("<h2>Figures</h2><div class='grid'>")
    for m in _metrics(rows):
        err = _error_column(rows, m)
        errs = [_num(r.get(m + err[0])) if err else None for r in rows]
        svg = plots.bars(m, labels, [_num(r.get(m)) for r in rows], errs, err[1] if err else "")
        body.append(_figure(svg, units.label(m), _e(f"fig-{m}")))
    body.append("</div><h2>Table</h2>")
    metrics = _metrics(rows)
    scales = {m: units.scale_for(m, [v for r in rows if (v := _num(r.get(m))) is not None]) for m in metrics}
    head = [
        "run",
        "folder",
        "variant",
        "scheduler",
        "backend",
        "repetitions",
        *[units.label(m) for m in metrics],
    ]
    table = []
    for r in rows:
        cells = [
            _td(r["variant"]),
            _td(r["folder"]),
            _td(r["sweep_variant"] or "-"),
            _td(r["scheduler"]),
            _td(r["backend"]),
            _td(r["repetitions"]),
        ]
        cells += [_cell(m, _num(r.get(m)), scales[m]) for m in metrics]
        table.append(cells)
    body.append(_table(head, table))
    return _page(title, body)


# --------------------------------------------------------------------------------------------------------


def page(folder: Path) -> str:
    """The report of any results folder: a run, a sweep, or a folder of runs (repetitions)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ReportError(f"{folder}: no such folder; give a results folder (a run or a sweep)")
    if (folder / "comparison.csv").is_file():
        return sweep_page(folder)
    if results.run_folders(folder) == [folder]:
        return run_page(folder)
    try:
        reps = compare.repetitions(folder)
        es = reps or compare.entries([folder])
    except compare.CompareError as exc:
        raise ReportError(str(exc)) from None
    what = f"{len(es) - 1} repetitions and their mean" if reps else f"{len(es)} runs"
    return compare_page(compare.rows(es), f"{folder.name}: {what}", compare_warnings(es))


def write(folder: Path, out: Path | None = None) -> Path:
    """Writes ``folder``'s report to ``out`` (default: ``folder/report.html``) and returns its path."""
    text = page(folder)
    target = out or Path(folder) / REPORT_FILE
    target.write_text(text)
    return target
