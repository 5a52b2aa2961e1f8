"""The report's figures, drawn with matplotlib as SVG text to inline in the page (docs/architecture.md,
"Reports"): vector figures that read like a paper's, in a file that needs no network and no script.

Every function returns a figure's ``<svg>`` element as a string. The style is one place (:data:`STYLE`):
small serif-free type, no top and right spines, markers and line styles that survive black and white.
"""

from __future__ import annotations

import io
import math
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import StrMethodFormatter  # noqa: E402

from testbed.results import units  # noqa: E402
from testbed.results.timeline import Timeline  # noqa: E402

STYLE = {
    # matplotlib lays text out with DejaVu Sans (it ships it); a browser without it falls back to fonts
    # of about its width, named in the SVG.
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Verdana", "Helvetica", "Arial"],
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.linewidth": 0.7,
    "lines.linewidth": 1.3,
    "lines.markersize": 4.5,
    "legend.frameon": False,
    "svg.fonttype": "none",  # text stays text: smaller, sharp at any zoom, searchable
    "svg.hashsalt": "testbed-report",  # same figure, same file
}
#: Paper-like line styles, distinguishable in black and white.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
DASHES = ("-", "--", "-.", ":")
#: A page-wide figure's width and a small multiple's, inches (a paper's text and column widths).
WIDE_IN = 10.0
SMALL_IN = (3.4, 2.4)
#: The Gantt chart shows at most this many nodes (the first ones); the page says so when it cuts.
GANTT_NODES_MAX = 64
#: Beyond this many bars a chart's bars are embedded as an image in the SVG (a 10,000-job trace's Gantt
#: chart: 3 MB of paths); axes and text stay vector.
RASTER_ABOVE = 4000
#: The legend names each job up to this many jobs.
LEGEND_JOBS = 24
#: A stopped process is drawn in its job's colour at this opacity; a running one solid.
STOPPED_ALPHA = 0.18


def svg(fig) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog), then closed."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg") :]


def job_colours(jobs: Sequence[str]) -> dict[str, tuple]:
    """A colour per job, in submission order (tab20's pairs split: dark ones first, then light)."""
    cmap = plt.get_cmap("tab20")
    order = [*range(0, 20, 2), *range(1, 20, 2)]
    return {j: cmap(order[i % 20]) for i, j in enumerate(jobs)}


def _lanes(segments) -> tuple[dict[tuple[str, int], int], int]:
    """A sub-lane per process on one node, so processes alive at once sit one above the other."""
    life: dict[tuple[str, int], list[float]] = {}
    for s in segments:
        span = life.setdefault((s.job, s.rank), [s.t0, s.t1])
        span[0], span[1] = min(span[0], s.t0), max(span[1], s.t1)
    free: list[float] = []  # per lane: when it frees up
    lane: dict[tuple[str, int], int] = {}
    for proc, (t0, t1) in sorted(life.items(), key=lambda kv: kv[1][0]):
        k = next((i for i, end in enumerate(free) if end <= t0 + 1e-12), None)
        if k is None:
            free.append(t1)
            k = len(free) - 1
        free[k] = t1
        lane[proc] = k
    return lane, max(1, len(free))


def gantt(tl: Timeline, window: tuple[float, float]) -> str:
    """A lane per node, each process a bar in its job's colour: solid while it runs, pale while it is
    stopped (gang slots); processes alive at once share the lane one above the other."""
    colours = job_colours(tl.jobs)
    shown = min(tl.nodes, GANTT_NODES_MAX)
    by_node = defaultdict(list)
    for s in tl.segments:
        if s.node < shown:
            by_node[s.node].append(s)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(WIDE_IN, 0.9 + 0.2 * shown))
        raster = sum(len(v) for v in by_node.values()) > RASTER_ABOVE
        for node, segs in by_node.items():
            lane, n = _lanes(segs)
            h = 0.84 / n
            groups: dict[tuple[int, bool], tuple[list, list]] = defaultdict(lambda: ([], []))
            for s in segs:
                ranges, faces = groups[(lane[(s.job, s.rank)], s.running)]
                ranges.append((s.t0, s.t1 - s.t0))
                faces.append(colours[s.job])
            for (k, running), (ranges, faces) in groups.items():
                y = node - 0.42 + k * h
                ax.broken_barh(
                    ranges,
                    (y, h * 0.92),
                    facecolors=faces,
                    alpha=1.0 if running else STOPPED_ALPHA,
                    linewidth=0,
                    rasterized=raster,
                )
        ax.set_ylim(shown - 0.5, -0.5)
        ax.set_yticks(range(shown), [str(n) if shown <= 32 or n % 4 == 0 else "" for n in range(shown)])
        ax.set_ylabel("node")
        ax.set_xlabel("emulated time (s)")
        ax.set_xlim(*window)
        _thousands(ax.xaxis, window[1])
        _job_legend(ax, tl.jobs, colours, running_note=tl.sliced)
        return svg(fig)


def _thousands(axis, top: float) -> None:
    if top >= 10_000:  # 100,000 s rather than 100000 or 1e5
        axis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def _job_legend(ax, jobs: Sequence[str], colours: dict, running_note: bool) -> None:
    """Each job's colour, up to LEGEND_JOBS jobs (beyond, colours repeat and a legend would mislead)."""
    many = len(jobs) > LEGEND_JOBS
    handles = [] if many else [Patch(facecolor=colours[j], label=j) for j in jobs]
    if running_note:
        handles.append(Patch(facecolor="0.5", alpha=STOPPED_ALPHA, label="pale: stopped"))
    if many:
        handles.append(Patch(facecolor="white", label=f"{len(jobs):,} jobs, 20 colours"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def matrix(tl: Timeline, window: tuple[float, float]) -> str:
    """The gang matrix over time: a band per matrix row (two rows sharing a quantum under paired gang
    are their own band), the nodes stacked in it, each cell in the colour of the job it holds; the band
    is shaded during the quanta its row runs."""
    colours = job_colours(tl.jobs)
    keys = sorted({c.rows for c in tl.cells} | {rows for *_, rows in tl.active})
    band = {k: i for i, k in enumerate(keys)}
    h = 0.88 / tl.nodes
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(WIDE_IN, 0.9 + 0.55 * len(keys)))
        shade = defaultdict(list)
        for t0, t1, rows in tl.active:
            shade[rows].append((t0, t1 - t0))
        for rows, ranges in shade.items():  # a dark strip above the band while its row runs
            ax.broken_barh(ranges, (band[rows] - 0.5, 0.06), facecolors="0.15", linewidth=0)
        cells = defaultdict(lambda: ([], []))
        for c in tl.cells:
            for k, job in enumerate(c.jobs):  # several jobs on one node's cell: split its height
                y = band[c.rows] - 0.42 + c.node * h + k * h / len(c.jobs)
                ranges, faces = cells[(y, h / len(c.jobs))]
                ranges.append((c.t0, c.t1 - c.t0))
                faces.append(colours.get(job, "0.5"))
        for (y, hh), (ranges, faces) in cells.items():
            ax.broken_barh(ranges, (y, hh * 0.9), facecolors=faces, linewidth=0)
        ax.set_yticks(
            range(len(keys)), ["rows " + "+".join(map(str, k)) if len(k) > 1 else f"row {k[0]}" for k in keys]
        )
        ax.set_ylim(len(keys) - 0.5, -0.5)
        ax.set_xlim(*window)
        ax.set_xlabel("emulated time (s)")
        _job_legend(ax, tl.jobs, colours, running_note=False)
        return svg(fig)


@dataclass(frozen=True)
class Power:
    nodes: int
    idle_watts: float
    busy_watts: float


def over_time(
    tl: Timeline, window: tuple[float, float], capacity: float, power: Power, bins: int = 200
) -> str:
    """Three panels sharing the time axis: CPU utilisation, power (P = (B + X u) N, as the summary's
    energy), and the jobs waiting and running."""
    t0, t1 = window
    util = tl.utilisation(t0, t1, bins, capacity) if t1 > t0 else []
    xs = [t for t, _ in util] + ([t1] if util else [])
    us = [u for _, u in util]
    watts = [(power.idle_watts + power.busy_watts * u) * power.nodes for u in us]
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(3, 1, figsize=(WIDE_IN, 3.8), sharex=True)
        ax = axes[0]
        if us:
            ax.stairs([u * 100 for u in us], xs, color="C0", fill=True, alpha=0.35)
            ax.stairs([u * 100 for u in us], xs, color="C0")
            mean = sum(us) / len(us)
            ax.axhline(mean * 100, color="0.3", lw=0.8, ls="--")
            ax.annotate(
                f"mean {mean:.1%}",
                (1.0, mean * 100),
                xycoords=("axes fraction", "data"),
                ha="right",
                va="bottom",
                fontsize=7,
                color="0.3",
            )
        ax.set_ylim(0, 105)
        ax.set_ylabel("CPU utilisation (%)")
        ax = axes[1]
        if watts:
            scale = 1e3 if max(watts) >= 1e3 else 1.0
            ax.stairs([w / scale for w in watts], xs, color="C3", baseline=None)
            idle = power.idle_watts * power.nodes / scale
            ax.axhline(idle, color="0.3", lw=0.8, ls=":")
            ax.annotate(
                "idle: B N",
                (0.01, idle),
                xycoords=("axes fraction", "data"),
                va="bottom",
                fontsize=7,
                color="0.3",
            )
            top = (power.idle_watts + power.busy_watts) * power.nodes / scale  # every node busy
            ax.set_ylim(idle - 0.1 * (top - idle), top + 0.05 * (top - idle))
            energy = sum(w * (t1 - t0) / bins for w in watts)
            e_scale = units.scale_for("energy_j", [energy])
            ax.text(
                0.99,
                0.95,
                f"energy {units.show('energy_j', energy, e_scale)}",
                transform=ax.transAxes,
                ha="right",
                va="top",
                fontsize=7,
                color="0.3",
            )
            ax.set_ylabel("power (kW)" if scale > 1 else "power (W)")
        ax = axes[2]
        for series, label, style in ((tl.running, "running", "-"), (tl.queued, "waiting", "--")):
            if series:
                ts = [t for t, _ in series] + [max(t1, series[-1][0])]
                ax.stairs([n for _, n in series], ts, label=label, ls=style, baseline=None)
        ax.set_ylabel("jobs")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper right", ncols=2)
        axes[-1].set_xlabel("emulated time (s)")
        axes[-1].set_xlim(t0, t1 if t1 > t0 else t0 + 1)
        _thousands(axes[-1].xaxis, t1)
        fig.align_ylabels(axes)
        return svg(fig)


# ----------------------------------------------------------------------------------------------------
# Sweeps and comparisons


@dataclass(frozen=True)
class Line:
    label: str
    xs: list[float]
    ys: list[float | None]
    errs: list[float | None]


def _value_scale(ax, key: str, values: list[float]) -> units.Scale:
    scale = units.scale_for(key, values)
    ax.set_ylabel(units.axis_label(key, scale))
    return scale


def _yerr(metric: str, values: list[float | None], errs: list[float | None], scale: units.Scale) -> list:
    """matplotlib's ``yerr`` (a row of reaches below, a row above) in the axis's unit; a fraction's bars
    end at 0 and 100 % (units.error_span). A missing value or error is a bar of 0."""
    spans = [
        units.error_span(metric, v, e) if v is not None and e else (0.0, 0.0)
        for v, e in zip(values, errs, strict=True)
    ]
    return [[lo / scale.factor for lo, _ in spans], [hi / scale.factor for _, hi in spans]]


def _value_limits(ax, values: list[float], scale: units.Scale) -> None:
    """After plotting: the value axis from 0 (or below, for negative values); an all-zero metric gets a
    plain 0..1 axis and says so, not matplotlib's -0.06..0.06."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if finite and max(abs(v) for v in finite) == 0:
        ax.set_ylim(0, 1)
        ax.text(0.5, 0.5, "all values 0", transform=ax.transAxes, ha="center", color="0.4", fontsize=7)
    else:
        ax.set_ylim(bottom=min(0.0, min(finite, default=0.0) / scale.factor * 1.1))
    if ax.get_ylim()[1] >= 1000:  # 50,000 s, not 50000 s or 5e4
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def lines(metric: str, x_label: str, series: list[Line], error_name: str, legend_title: str) -> str:
    """One metric against one numeric axis, a line (marker, dash) per group, with error bars."""
    values = [y for s in series for y in s.ys if y is not None]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=SMALL_IN)
        scale = _value_scale(ax, metric, values)
        for i, s in enumerate(series):
            pts = [(x, y, e) for x, y, e in zip(s.xs, s.ys, s.errs, strict=True) if y is not None]
            if not pts:
                continue
            ax.errorbar(
                [p[0] for p in pts],
                [p[1] / scale.factor for p in pts],
                yerr=_yerr(metric, [p[1] for p in pts], [p[2] for p in pts], scale)
                if any(p[2] for p in pts)
                else None,
                label=s.label,
                marker=MARKERS[i % len(MARKERS)],
                ls=DASHES[(i // len(MARKERS)) % len(DASHES)],
                capsize=2,
                elinewidth=0.7,
            )
        _value_limits(ax, values, scale)
        ax.set_xlabel(x_label)
        ax.grid(alpha=0.25, lw=0.5)
        if len(series) > 1:
            ax.legend(title=legend_title, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        if any(e for s in series for e in s.errs):
            ax.set_title(f"error bars: {error_name}", loc="right", fontsize=6, color="0.4")
        return svg(fig)


def bars(
    metric: str, labels: list[str], values: list[float | None], errs: list[float | None], error_name: str
) -> str:
    """One metric, a bar per labelled run (or variant), with error bars; a missing value is marked."""
    vals = [v for v in values if v is not None]
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(max(SMALL_IN[0], 0.42 * len(labels) + 1.2), SMALL_IN[1] + 0.6))
        scale = _value_scale(ax, metric, vals)
        x = list(range(len(labels)))
        heights = [(v or 0.0) / scale.factor for v in values]
        ax.bar(x, heights, color="0.55", edgecolor="0.2", linewidth=0.5)
        with_err = [i for i, e in enumerate(errs) if e]  # a single run has none, not one of 0
        if with_err:
            ax.errorbar(
                [x[i] for i in with_err],
                [heights[i] for i in with_err],
                yerr=_yerr(metric, [values[i] for i in with_err], [errs[i] for i in with_err], scale),
                fmt="none",
                ecolor="black",
                elinewidth=0.8,
                capsize=2,
            )
        _value_limits(ax, vals, scale)
        for xi, v in zip(x, values, strict=True):
            if v is None:
                ax.annotate("n/a", (xi, 0), ha="center", va="bottom", fontsize=6, color="0.4")
        ax.set_xticks(
            x, labels, rotation=35 if len(labels) > 3 else 0, ha="right" if len(labels) > 3 else "center"
        )
        ax.grid(axis="y", alpha=0.25, lw=0.5)
        if any(errs):
            ax.set_title(f"error bars: {error_name}", loc="right", fontsize=6, color="0.4")
        return svg(fig)


#: Bar fills of a grouped bar chart, distinguishable in black and white too (with the hatches).
HATCHES = ("", "//", "..", "xx", "\\\\", "oo", "--", "++")


def grouped_bars(
    metric: str, categories: list[str], x_label: str, series: list[Line], error_name: str, legend_title: str
) -> str:
    """One metric: a group of bars per category on the x axis (paper 000's mixes), a bar per series in
    each (a scheme, admission on or off), with error bars; ``Line.xs`` index ``categories``."""
    values = [y for s in series for y in s.ys if y is not None]
    n = max(1, len(series))
    width = 0.8 / n
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(
            figsize=(max(SMALL_IN[0], 0.9 * len(categories) * max(1, n / 3) + 1.0), SMALL_IN[1])
        )
        scale = _value_scale(ax, metric, values)
        for i, s in enumerate(series):
            xs = [x - 0.4 + width * (i + 0.5) for x in s.xs]
            errs = _yerr(metric, s.ys, s.errs, scale) if any(s.errs) else None
            ax.bar(
                xs,
                [(y or 0.0) / scale.factor for y in s.ys],
                width * 0.92,
                yerr=errs,
                capsize=1.5,
                label=s.label,
                color=plt.get_cmap("tab10")(i % 10),
                hatch=HATCHES[(i // 10) % len(HATCHES)],
                edgecolor="0.2",
                linewidth=0.4,
                error_kw={"elinewidth": 0.6},
            )
        _value_limits(ax, values, scale)
        ax.set_xticks(range(len(categories)), categories)
        ax.set_xlabel(x_label)
        ax.grid(axis="y", alpha=0.25, lw=0.5)
        if n > 1:
            ax.legend(title=legend_title, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        if any(e for s in series for e in s.errs):
            ax.set_title(f"error bars: {error_name}", loc="right", fontsize=6, color="0.4")
        return svg(fig)


def axis_name(key: str) -> str:
    """A swept key as an axis label: 'workload.divisible.load' -> 'load', 'scheduler.params.quantum_ms'
    -> 'quantum (ms)'."""
    parts = key.split(".")
    last = parts[-1]
    if last == "name" and len(parts) > 1:  # scheduler.name -> scheduler
        return parts[-2]
    m = re.fullmatch(r"(.*)_(ms|s|mb|j)", last)
    if m:
        unit = {"mb": "MB", "j": "J"}.get(m.group(2), m.group(2))
        return f"{m.group(1).replace('_', ' ')} ({unit})"
    return last.replace("_", " ")
