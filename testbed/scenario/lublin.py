"""The Lublin-Feitelson workload model of rigid parallel jobs: U. Lublin and D. G. Feitelson, "The workload
on parallel supercomputers: modeling the characteristics of rigid jobs", J. Parallel Distrib. Comput.
63(11), 2003. Written here from the paper's description; the parameters are the paper's (those its
authors' generator ships with), fitted on a 128-node machine.

Each job has a type (batch or interactive when ``job_types: split``, else one type fitted to all jobs):

* **size**: serial with probability ``serial``; otherwise ``u`` is drawn from a two-stage uniform
  (``[ulow, umed]`` with probability ``uprob``, else ``[umed, uhi]``), rounded to an integer with
  probability ``pow2`` (a power of two), and the size is ``round(2**u)``, at most the cluster. ``uhi`` is
  log2 of the cluster's nodes (7 in the paper) and ``umed`` keeps its distance below it (the paper's
  rule: ``umed = uhi - 2.5``);
* **run time**: ``log(run time)`` is hyper-gamma: gamma(a1, b1) with probability ``p``, else
  gamma(a2, b2), where ``p = pa * size + pb`` (clipped to [0, 1]): ``pa < 0``, so wider jobs run longer;
  draws above ``log`` of two days are drawn again, as the paper's generator does;
* **arrivals**: the day is 48 half-hour buckets; bucket ``(i - 1) mod 48`` is weighted by the
  gamma(anum, bnum) mass of ``[i - 0.5, i + 0.5]``, ``i = 11..58`` (normalised to mean 1): the fitted day
  starts at 05:00 and the busiest hours are early afternoon. A job's inter-arrival is
  ``exp(gamma(aarr * arar, barr))`` seconds of "average" time, spent through the buckets at their weight:
  the clock moves slowly through a heavy (busy) bucket, so more jobs arrive in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The half-hour buckets of a day, and their length in seconds.
BUCKETS = 48
BUCKET_S = 86_400 / BUCKETS
#: The gamma of the daily cycle is fitted on a day that starts at bucket 11 (05:30), wrapping around.
CYCLE_START = 11
#: Redraw a log run time above this (log of about two days) and a log inter-arrival above 13 (five days).
MAX_LOG_RUN = 12.0
MAX_LOG_ARRIVAL = 13.0


@dataclass(frozen=True)
class Params:
    """One job type's parameters. Sizes: log2 offsets below the cluster's log2 size are kept as the paper
    fitted them at 128 nodes (``uhi_below``: 0, or 1.5 for interactive jobs)."""

    serial: float
    pow2: float
    ulow: float
    umed_below: float  # uhi - umed
    uhi_below: float  # log2(nodes) - uhi
    uprob: float
    a1: float
    b1: float
    a2: float
    b2: float
    pa: float
    pb: float
    aarr: float
    barr: float
    anum: float
    bnum: float
    arar: float


#: The paper's parameters: all jobs, batch jobs, interactive jobs.
ALL = Params(
    serial=0.244, pow2=0.576, ulow=0.8, umed_below=2.5, uhi_below=0.0, uprob=0.86,
    a1=4.2, b1=0.94, a2=312.0, b2=0.03, pa=-0.0054, pb=0.78,
    aarr=10.2303, barr=0.4871, anum=8.1737, bnum=3.9631, arar=1.0225,
)  # fmt: skip
BATCH = Params(
    serial=0.2927, pow2=0.6686, ulow=1.2, umed_below=2.0, uhi_below=0.0, uprob=0.875,
    a1=6.57, b1=0.823, a2=639.1, b2=0.0156, pa=-0.003, pb=0.6986,
    aarr=6.0415, barr=0.8531, anum=6.1271, bnum=5.2740, arar=1.0519,
)  # fmt: skip
INTERACTIVE = Params(
    serial=0.1541, pow2=0.625, ulow=1.0, umed_below=2.5, uhi_below=1.5, uprob=0.705,
    a1=3.8351, b1=0.6605, a2=7.073, b2=0.6856, pa=-0.0118, pb=0.9156,
    aarr=6.5510, barr=0.6621, anum=8.9186, bnum=3.6680, arar=0.9797,
)  # fmt: skip


@dataclass(frozen=True)
class Drawn:
    submit_s: float  # model seconds from the start
    size: int
    run_s: float  # model seconds
    job_type: str  # "batch", "interactive", or "all"


# --------------------------------------------------------------------------------------------------------
# Sizes and run times


def size(p: Params, nodes: int, rng: np.random.Generator) -> int:
    """A job's size on ``nodes`` nodes."""
    u = rng.random()
    if u <= p.serial or nodes == 1:
        return 1
    uhi = max(math.log2(nodes) - p.uhi_below, p.ulow)
    umed = min(max(uhi - p.umed_below, p.ulow), uhi)
    lo, hi = (p.ulow, umed) if rng.random() <= p.uprob else (umed, uhi)
    par = lo + (hi - lo) * rng.random()
    if u <= p.serial + p.pow2:
        par = math.floor(par + 0.5)  # a power of two
    return max(1, min(nodes, int(2.0**par + 0.5)))


def first_gamma_share(p: Params, n: int) -> float:
    """The hyper-gamma's share of its first (short) gamma for a job of ``n`` processes."""
    return min(1.0, max(0.0, p.pa * n + p.pb))


def log_run(p: Params, n: int, rng: np.random.Generator) -> float:
    """log(run time in seconds) of a job of ``n`` processes."""
    first = rng.random() <= first_gamma_share(p, n)
    shape, scale = (p.a1, p.b1) if first else (p.a2, p.b2)
    while True:
        v = rng.gamma(shape, scale)
        if v <= MAX_LOG_RUN:
            return float(v)


# --------------------------------------------------------------------------------------------------------
# Arrivals


def _gamma_pdf(x: np.ndarray, shape: float, scale: float) -> np.ndarray:
    x = np.maximum(x, 1e-12)
    return np.exp((shape - 1) * np.log(x) - x / scale - math.lgamma(shape) - shape * math.log(scale))


def daily_weights(p: Params) -> np.ndarray:
    """The 48 buckets' weights (mean 1), bucket 0 at midnight: the gamma(anum, bnum) mass over each
    bucket's unit interval, counted from :data:`CYCLE_START` and wrapped around the day."""
    out = np.zeros(BUCKETS)
    mids = (np.arange(400) + 0.5) / 400 - 0.5  # midpoint rule over the unit interval
    for i in range(CYCLE_START, CYCLE_START + BUCKETS):
        out[(i - 1) % BUCKETS] = _gamma_pdf(i + mids, p.anum, p.bnum).mean()
    return out / out.mean()


class Arrivals:
    """One type's arrival clock: each call spends one inter-arrival through the weighted buckets."""

    def __init__(self, p: Params, start_hour: int, rng: np.random.Generator) -> None:
        self.p = p
        self.rng = rng
        self.weights = daily_weights(p)
        self.bucket = start_hour * BUCKETS // 24
        self.into = 0.0  # the share of the current bucket already passed
        self.t = 0.0  # seconds from the start

    def advance(self) -> float:
        """The next arrival's time, seconds from the start."""
        while True:
            g = self.rng.gamma(self.p.aarr * self.p.arar, self.p.barr)
            if g <= MAX_LOG_ARRIVAL:
                break
        budget = math.exp(g) / BUCKET_S  # in buckets of weight 1
        while True:
            w = self.weights[self.bucket]
            left = (1.0 - self.into) * w
            if budget <= left:
                step = budget / w
                self.into += step
                self.t += step * BUCKET_S
                return self.t
            budget -= left
            self.t += (1.0 - self.into) * BUCKET_S
            self.bucket = (self.bucket + 1) % BUCKETS
            self.into = 0.0


# --------------------------------------------------------------------------------------------------------
# Jobs


def draw(count: int, nodes: int, seed: int, split: bool = False, start_hour: int = 8) -> list[Drawn]:
    """``count`` jobs for a cluster of ``nodes`` nodes, in arrival order. ``split``: batch and interactive
    jobs, each from its own parameters and arrival clock (the next job is the type whose clock comes
    first); otherwise the parameters fitted to all jobs."""
    rng = np.random.default_rng(seed)
    types = {"batch": BATCH, "interactive": INTERACTIVE} if split else {"all": ALL}
    clocks = {name: Arrivals(p, start_hour, rng) for name, p in types.items()}
    nxt = {name: c.advance() for name, c in clocks.items()}
    out = []
    for _ in range(count):
        name = min(nxt, key=lambda k: (nxt[k], k))
        p = types[name]
        n = size(p, nodes, rng)
        out.append(Drawn(nxt[name], n, math.exp(log_run(p, n, rng)), name))
        nxt[name] = clocks[name].advance()
    return out
