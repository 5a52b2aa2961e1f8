"""How a metric reads to a person: its unit and scale, one definition for the report's tables and its
figures' axes (testbed/results/report.py, plots.py).

A summary stores SI values (seconds, joules, fractions); a person reads 13.4 kJ, 55.8 %, 1.07 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.core.jobs import StrEnum
from testbed.results import comparison


class Kind(StrEnum):
    TIME = "time"  # seconds
    ENERGY = "energy"  # joules
    SHARE = "share"  # a fraction, shown in %
    RATIO = "ratio"  # a plain number (slowdown)
    RATE = "rate"  # per second
    COUNT = "count"


#: Metrics that lie in [0, 1] by definition: the share of the CPU used, of quanta paired, of jobs
#: rejected or late.
_FRACTIONS = (
    "utilization",
    "quanta_paired_fraction",
    "reject_ratio",
    "deadline_miss_ratio",
    "rt_rejected_ratio",
)
#: Metrics shown in %: the fractions, and the CPU-rate error (relative, so it may pass 100 %).
_SHARES = (*_FRACTIONS, "cpu_rate_error_max", "rate_window_error_max")


def kind_of(key: str) -> Kind:
    base = key.split(".", 1)[0]
    if base.startswith("jobs_") or base in ("jobs", "nodes", "slot_switches", "repetitions"):
        return Kind.COUNT
    if base in _SHARES:
        return Kind.SHARE
    if base.endswith("_j"):
        return Kind.ENERGY
    if comparison.results.is_rate(key):
        return Kind.RATE
    if base.endswith(("_s", "_ms")) or "_s_" in base or "_ms_" in base:
        return Kind.TIME
    return Kind.RATIO


def error_span(key: str, value: float, err: float) -> tuple[float, float]:
    """An error bar's reach (below, above) ``value``: ``err`` each way, cut at the metric's range where it
    has one (a fraction's 95 % interval from 2 repetitions can reach 230 %, and a reject ratio never
    will)."""
    if key.split(".", 1)[0] not in _FRACTIONS:
        return err, err
    return max(0.0, value - max(0.0, value - err)), max(0.0, min(1.0, value + err) - value)


@dataclass(frozen=True)
class Scale:
    """A unit for a set of values: ``value / factor`` is shown, followed by ``unit``."""

    unit: str
    factor: float


_ENERGY = (Scale("GJ", 1e9), Scale("MJ", 1e6), Scale("kJ", 1e3), Scale("J", 1.0))


def scale_for(key: str, values: list[float]) -> Scale:
    """One unit for all of ``values`` (a figure's axis, a table's column): the largest that keeps the
    biggest value at 1 or more."""
    kind = kind_of(key)
    top = max((abs(v) for v in values if v is not None and math.isfinite(v)), default=0.0)
    if kind == Kind.ENERGY:
        return next((s for s in _ENERGY if top >= s.factor), _ENERGY[-1])
    if kind == Kind.SHARE:
        return Scale("%", 0.01)
    if kind == Kind.TIME:
        if "_ms" in key.split(".", 1)[0]:  # stored in ms already
            return Scale("ms", 1.0)
        return Scale("ms", 1e-3) if 0 < top < 1.0 else Scale("s", 1.0)
    if kind == Kind.RATE:
        return Scale("/s", 1.0)
    return Scale("", 1.0)


def number(v: float) -> str:
    """Three significant figures, thousands separated: 0.0123, 1.07, 55.8, 1,234."""
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) < 1e-3:
        return f"{v:.2e}"
    return f"{v:#.3g}".rstrip(".")  # '#': 1.00 rather than 1, as a table of figures reads


def show(key: str, v, scale: Scale | None = None) -> str:
    """A value with its unit: ``show('energy_j', 13413.0)`` -> '13.4 kJ'; None -> '-'."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if kind_of(key) == Kind.COUNT:
        return f"{v:,.0f}"
    scale = scale or scale_for(key, [float(v)])
    text = number(float(v) / scale.factor)
    if scale.unit == "/s":
        return f"{text}/s"
    return f"{text} {scale.unit}" if scale.unit else text


def label(key: str) -> str:
    """A metric's name without its unit: 'mean response time', 'energy', 'barriers/s, io'."""
    if comparison.results.is_rate(key):
        return comparison.results.rate_label(key)
    base, _, cls = key.partition(".")
    text = comparison.metric_label(base).split(" (")[0]
    for suffix in (" s", " ms", " j"):  # a name without a label of its own: its unit goes on the axis
        if text == base.replace("_", " ") and text.endswith(suffix):
            text = text.removesuffix(suffix)
    return f"{text}, {cls}" if cls else text


def axis_label(key: str, scale: Scale) -> str:
    """'mean response time (s)', 'energy (MJ)', 'reject ratio (%)'."""
    if comparison.results.is_rate(key):
        return label(key)
    return f"{label(key)} ({scale.unit})" if scale.unit else label(key)
