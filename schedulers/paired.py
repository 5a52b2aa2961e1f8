"""Paired gang scheduling (paper 002 §2-3; docs/policies.md, "Paired gang").

A gang matrix (:class:`~testbed.schedulers.gang.GangGlobal`: ``mpl`` rows x ``nodes`` columns, round robin,
alternate scheduling, memory-aware placement) whose slots may be *paired*: the slot whose turn it is runs
together with a partner slot in one quantum, both slots' jobs are allowed on their nodes, and each node's OS
shares the CPU between them (the local policy is gang's: run exactly the allowed jobs).

Rules as built:

* **Measurement.** The owner reports each process's CPU use over each quantum in which its job ran
  (:meth:`PairedGlobal.utilization`, a fraction of the node). A job's quantum closes when all its ranks
  have reported (or, if some never do, when a rank reports again); its utilisation for that quantum is the
  mean over the ranks that reported.
* **Prediction** (paper 002, eq. 1): ``u_n = sum_{i=1..4} ((5 - i) / 10) * t_{n-i}``, weights 0.4, 0.3,
  0.2, 0.1 over the job's last four measured quanta, most recent first. A new job is postulated at 100 %:
  its four-quantum history starts as 1.0, 1.0, 1.0, 1.0, so it runs alone until measurements bring it down.
* **Pairing rule.** Slots x and y may share a quantum if ``max(x) + max(y) + m < 100 %`` (max over the
  slots' jobs' predictions; ``m = margin_pct``, 1 %). A slot holding an exclusive job (``JobSpec.exclusive``,
  the never-pair flag) or a job that must run alone this quantum is never paired.
* **Fair matching** (``matching: fair``), once per round of the matrix (when the round robin wraps):
  sort the pairable slots by utilisation (ties in an order that rotates every round), match the lowest
  with the highest unmatched slot that fits, moving inwards; a high slot that does not fit the lowest
  unmatched one fits no unmatched one and is left over. Every slot left over is then matched, if it can
  be, with an already matched slot (the lowest-utilisation one that fits). At a slot's turn its partner
  of the round is used if the rule still holds with the current predictions, else it runs alone.
  ``matching: best-fit`` is the paper's unfair alternative: at every switch scan all slots in the same
  order and pick the highest-utilisation slot that fits, ties going to the last one.
* **Slot homogeneity.** At every switch, a job J in slot s with ``u(J) >= min(s) + M_band`` (``band_pct``,
  20 %) leaves s for the first other slot whose columns are free and whose range stays under the band with
  J in it, else for an empty slot (a new slot); if neither exists (the matrix has ``mpl`` rows) it stays.
* **Sharp change.** When a job's measured utilisation differs from its previous measurement by more than
  ``sharp_change_pct`` (20 %), it runs its next quantum alone (its slot is not paired, nor used as a
  partner) so its real character is observed; the flag clears once it has run a quantum alone.
* **Alternate scheduling** (``alternate``): idle columns of the chosen slot(s) run jobs of other slots
  whose columns are all idle, as in gang, but only a job within the band of the chosen slot (or of its
  partner) is taken.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import ClassVar, Literal

from .base import GlobalAction, JobSpec, Reject, Scheduler
from .gang import GangGlobal, GangLocal, GangParams
from .params import param

#: (5 - i) / 10 for i = 1..4: the weights of the last four quanta, most recent first.
WEIGHTS = (0.4, 0.3, 0.2, 0.1)
#: A new job's postulated utilisation.
NEW_JOB_UTIL = 1.0


def predict(history: Iterable[float]) -> float:
    """Paper 002, eq. 1: the weighted sum of the last four per-quantum utilisations, most recent first."""
    # (5 - i) * t summed, then / 10: exact for equal quanta (1.0 stays 1.0).
    return sum((5 - i) * t for i, t in enumerate(history, start=1) if i <= len(WEIGHTS)) / 10


class JobUsage:
    """What paired gang knows about a job's CPU use."""

    __slots__ = ("size", "exclusive", "history", "last", "pending", "alone")

    def __init__(self, size: int, exclusive: bool) -> None:
        self.size = size
        self.exclusive = exclusive
        self.history: deque[float] = deque([NEW_JOB_UTIL] * len(WEIGHTS), maxlen=len(WEIGHTS))
        self.last: float | None = None  # the last measured quantum (none yet: postulated)
        self.pending: dict[int, float] = {}  # rank -> utilisation, for the quantum being reported
        self.alone = False  # sharp change: run the next quantum alone

    def predicted(self) -> float:
        return predict(self.history)


class PairedGlobal(GangGlobal):
    wants_utilization: ClassVar[bool] = True
    params: PairedParams

    def __init__(self, nodes: int, params: PairedParams, seed: int = 0) -> None:
        super().__init__(nodes, params, seed)
        self.margin = self.params.margin_pct / 100.0
        self.band = self.params.band_pct / 100.0
        self.sharp = self.params.sharp_change_pct / 100.0
        self.matching = self.params.matching
        self.usage: dict[str, JobUsage] = {}
        self.partners: dict[int, int] = {}  # fair matching of this round: row -> partner row
        self.round = -1
        # Statistics: quanta planned, quanta paired, times each row was chosen as a partner, the last
        # Dispatch's partner row, and homogeneity moves.
        self.quanta = 0
        self.paired_quanta = 0
        self.partner_counts = [0] * self.mpl
        self.last_partner: int | None = None
        self.moves = 0

    # ----------------------------------------------------------------------------------------------------
    # GlobalPolicy

    def submit(self, now: float, job: JobSpec) -> list[GlobalAction]:
        self.usage[job.job_id] = JobUsage(job.size, job.exclusive)
        actions = super().submit(now, job)
        if any(isinstance(a, Reject) and a.job_id == job.job_id for a in actions):
            del self.usage[job.job_id]
        return actions

    def finished(self, now: float, job_id: str) -> list[GlobalAction]:
        self.usage.pop(job_id, None)
        return super().finished(now, job_id)

    def utilization(
        self, now: float, job_id: str, rank: int, util: float, interval: float
    ) -> list[GlobalAction]:
        u = self.usage.get(job_id)
        if u is None or not interval > 0 or not 0 <= rank < u.size:
            return []  # a job that ended, or a sample that measures nothing
        if rank in u.pending:  # a new quantum, though some ranks never reported the last one
            self._close(u)
        u.pending[rank] = min(1.0, max(0.0, float(util)))
        if len(u.pending) >= u.size:
            self._close(u)
        return []

    # ----------------------------------------------------------------------------------------------------
    # Utilisation

    def _close(self, u: JobUsage) -> None:
        mean = sum(u.pending.values()) / len(u.pending)
        u.pending.clear()
        if u.last is not None and abs(mean - u.last) > self.sharp:
            u.alone = True
        u.last = mean
        u.history.appendleft(mean)

    def predicted(self, job_id: str) -> float:
        """The job's predicted utilisation for its next quantum (1.0 for a job never measured)."""
        u = self.usage.get(job_id)
        return NEW_JOB_UTIL if u is None else u.predicted()

    def slot_utilization(self, row: int) -> float:
        """max over the row's jobs of their predictions (0 for an empty row)."""
        return max((self.predicted(j) for j in self._row_jobs(row)), default=0.0)

    def _pairable(self, row: int) -> bool:
        jobs = self._row_jobs(row)
        return bool(jobs) and not any(self.usage[j].exclusive or self.usage[j].alone for j in jobs)

    def _fits(self, x: int, y: int) -> bool:
        return self.slot_utilization(x) + self.slot_utilization(y) + self.margin < 1.0

    def _in_band(self, job_id: str, row: int) -> bool:
        """Whether the row's jobs plus ``job_id`` span less than the band."""
        utils = [self.predicted(j) for j in self._row_jobs(row) if j != job_id]
        utils.append(self.predicted(job_id))
        return max(utils) - min(utils) < self.band

    # ----------------------------------------------------------------------------------------------------
    # Slot homogeneity

    def _homogenise(self) -> None:
        for row in range(self.mpl):
            jobs = self._row_jobs(row)
            if len(jobs) < 2:
                continue
            low = min(self.predicted(j) for j in jobs)
            for j in jobs:
                if self.predicted(j) >= low + self.band:
                    self._move(j, row)

    def _move(self, job_id: str, row: int) -> None:
        cols = self.placed[job_id][1]
        free = [r for r in range(self.mpl) if r != row and all(self.matrix[r][c] is None for c in cols)]
        same = [r for r in free if self._row_jobs(r) and self._in_band(job_id, r)]
        new = [r for r in free if not self._row_jobs(r)]
        target = (same or new or [None])[0]
        if target is None:
            return  # no room: it stays (the matrix has mpl rows)
        self._set(row, cols, None)
        self._set(target, cols, job_id)
        self.placed[job_id] = (target, cols)
        self.moves += 1

    # ----------------------------------------------------------------------------------------------------
    # Matching

    def _match_round(self) -> None:
        """Fair matching, once per round: sort, match from both ends, then the rest to matched slots."""
        self.round += 1
        n = self.mpl
        rows = [r for r in range(n) if self._pairable(r)]
        order = sorted(rows, key=lambda r: (self.slot_utilization(r), (r - self.round) % n))
        partners: dict[int, int] = {}
        lo, hi = 0, len(order) - 1
        while lo < hi:
            a, b = order[lo], order[hi]
            if self._fits(a, b):
                partners[a] = b
                partners[b] = a
                lo += 1
            # else b fits no unmatched slot (a is the lowest of them): it is left over
            hi -= 1
        matched = [r for r in order if r in partners]  # lowest utilisation first
        for r in order:
            if r not in partners:
                for t in matched:
                    if self._fits(r, t):
                        partners[r] = t
                        break
        self.partners = partners

    def _choose_partner(self, row: int) -> int | None:
        if self.matching == "best-fit":
            if not self._pairable(row):
                return None
            best, best_u = None, -1.0
            for r in range(self.mpl):  # the same order at every switch; ties go to the last one
                if r != row and self._pairable(r) and self._fits(row, r):
                    u = self.slot_utilization(r)
                    if u >= best_u:
                        best, best_u = r, u
            return best
        if self.row < 0 or row <= self.row:  # the round robin wrapped: a new round
            self._match_round()
        p = self.partners.get(row)
        if p is None or not self._pairable(row) or not self._pairable(p) or not self._fits(row, p):
            return None
        return p

    # ----------------------------------------------------------------------------------------------------
    # Slot plan (GangGlobal hooks)

    def _dispatch(self, at: float):
        self._homogenise()
        return super()._dispatch(at)

    def _plan_jobs(self, row: int) -> list[str]:
        jobs = self._row_jobs(row)
        partner = self._choose_partner(row)
        if partner is not None:
            jobs += self._row_jobs(partner)
        if self.alternate:
            bands = [row] if partner is None else [row, partner]
            jobs += self._alternates(row, jobs, accept=lambda j: any(self._in_band(j, r) for r in bands))
        self.quanta += 1
        self.last_partner = partner
        if partner is not None:
            self.paired_quanta += 1
            self.partner_counts[partner] += 1
        # A job that runs alone on all its nodes this quantum has had its quantum alone.
        per_col: dict[int, int] = {}
        for j in jobs:
            for c in self.placed[j][1]:
                per_col[c] = per_col.get(c, 0) + 1
        for j in jobs:
            if all(per_col[c] == 1 for c in self.placed[j][1]):
                self.usage[j].alone = False
        return jobs

    def _slot_rows(self, row: int) -> tuple[int, ...]:
        return (row,) if self.last_partner is None else (row, self.last_partner)


class PairedParams(GangParams):
    margin_pct: float = param(
        1.0,
        "two slots share a quantum if their predicted CPU uses plus this margin sum to under 100 %",
        noun="a percentage",
        ge=0,
        le=100,
    )
    band_pct: float = param(
        20.0,
        "slot homogeneity: a job this far above the lowest prediction of its slot moves to another slot",
        noun="a percentage",
        gt=0,
        le=100,
    )
    sharp_change_pct: float = param(
        20.0,
        "a job whose measured CPU use changes by more than this runs its next quantum alone",
        noun="a percentage",
        ge=0,
        le=100,
    )
    matching: Literal["fair", "best-fit"] = param(
        "fair", "fair: partners matched once per round; best-fit: the fullest partner at every switch"
    )


class Paired(Scheduler):
    name = "paired"
    summary = "paired gang: gang matrix whose slots share a quantum when their predicted CPU use fits"
    global_policy = PairedGlobal
    local_policy = GangLocal
    Params = PairedParams
