"""Statistics over repetitions: mean, sample standard deviation and the 95 % confidence interval of the
mean (Student's t with n - 1 degrees of freedom), and the file that records them for a run's repetitions
(``repetitions.json``, beside ``summaries.json``).

The t quantile is computed here (numpy only: scipy is no dependency of the testbed) by integrating the
t density and inverting it by bisection; ``tests/unit/test_stats.py`` checks it against the published
table values.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

#: The confidence level of every interval the testbed reports.
CONFIDENCE = 0.95
#: The file of a run's repetitions' statistics.
REPETITIONS_FILE = "repetitions.json"


def _t_cdf(x: float, df: int) -> float:
    """P(T <= x) for Student's t with ``df`` degrees of freedom, x >= 0 (Simpson's rule on [0, x])."""
    import numpy as np  # here: a run without repetitions never needs numpy (its import: 0.14 s of CPU)

    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    ts = np.linspace(0.0, x, 2001)
    pdf = c * (1 + ts * ts / df) ** (-(df + 1) / 2)
    h = x / 2000
    area = h / 3 * (pdf[0] + pdf[-1] + 4 * pdf[1:-1:2].sum() + 2 * pdf[2:-1:2].sum())
    return 0.5 + float(area)


def t_quantile(p: float, df: int) -> float:
    """The ``p`` quantile (p > 0.5) of Student's t with ``df`` degrees of freedom."""
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:  # bracket it (df 1 at 0.975: 12.7)
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Described:
    n: int
    mean: float
    stdev: float | None  # None with one value
    ci95_low: float | None
    ci95_high: float | None

    @property
    def ci95_half(self) -> float | None:
        return None if self.ci95_low is None else (self.ci95_high - self.ci95_low) / 2


def describe(values: Sequence[float]) -> Described | None:
    """Mean, sample stdev and the 95 % confidence interval of the mean of ``values`` (None if empty)."""
    vals = [float(v) for v in values]
    if not vals:
        return None
    mean = sum(vals) / len(vals)
    if len(vals) == 1:
        return Described(1, mean, None, None, None)
    sd = statistics.stdev(vals)
    half = t_quantile(1 - (1 - CONFIDENCE) / 2, len(vals) - 1) * sd / math.sqrt(len(vals))
    return Described(len(vals), mean, sd, mean - half, mean + half)


def identical(folders: Sequence[Path]) -> bool:
    """Whether the repetitions in ``folders`` ended with byte-identical jobs.csv files (more than one)."""
    texts = {(f / "jobs.csv").read_bytes() for f in folders if (f / "jobs.csv").exists()}
    return len(folders) > 1 and len(texts) == 1


def repetitions_doc(
    summaries: list[dict], seeds: list[int], same_results: bool, metrics: Sequence[str]
) -> dict:
    """What ``repetitions.json`` holds: each repetition's workload seed, whether they all gave the same
    jobs.csv, and each metric's mean, stdev and 95 % interval over the repetitions."""
    out: dict = {
        "repetitions": len(summaries),
        "workload_seeds": seeds,
        "identical_results": same_results,
        "confidence": CONFIDENCE,
        "metrics": {},
    }
    for m in metrics:
        d = describe([s[m] for s in summaries if isinstance(s.get(m), int | float)])
        if d is not None:
            out["metrics"][m] = asdict(d)
    return out


def write_repetitions(folder: Path, doc: dict) -> Path:
    path = folder / REPETITIONS_FILE
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
