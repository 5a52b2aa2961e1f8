"""Paper 000: real-time (RT) pipelines beside best-effort (BE) jobs: 1GS, 2DCS-TDM and 2DCS-PS, with their
admission control (docs/policies.md, "Real-time and best-effort classes").

A job is RT when its :class:`~testbed.schedulers.base.JobSpec` carries ``realtime`` (period d, buffer b,
per-rank work phi per frame, maximum queue wait w), BE otherwise.

Units (the paper's question of units, docs/policies.md "Admission control for 2DCS"): phi is the CPU work of
**one frame** and the bound it is held against is the **frame period d**, everywhere. 1GS's rule charges
phi_max per frame against d already; the 2DCS laxity and admission test read ``Phi_i + phi <= min(d_i, d_A)
* x/(x+y)``, a sufficient form of the EDF utilisation test ``sum phi/d <= x/(x+y)``. The literal reading (a
sum of per-frame work against a whole period b*d) would let a node take b times more work than it can do, so
it is not taken. The buffer b then only absorbs jitter: the vision kind makes frame k due b*d after its
release.

Costs (the paper's δ, ω, interrupt): 1GS's admission counts ω per row switch (``r = ceil(M (Q+ω) phi_max /
(Q d))``); 2DCS's counts, per frame and process, two context switches and one interrupt (every receive taken
as blocking), and TDM's also the division switch (δ per Gamma off the RT share). On real processes the
switches cost what they really cost; the simulator charges none (its switches are free), so these figures
enter only the admission tests.

Global synchronisation: 2DCS-TDM's divisions follow the run's one emulated clock (division k*Gamma on every
node), so no message is needed to keep them aligned; 2DCS-PS keeps its virtual times per node only.

Classes on one node share the CPU through nice values (what the node's OS can do): the favoured class runs
at its own levels (RT: ``rt_first_nice`` for the EDF-first ready process, ``rt_nice`` for the others; BE:
PB-SB's ``normal_nice`` / ``boost_nice``), the other class at ``borrow_nice``, so it runs only while the
favoured one has nothing ready (the paper's borrowing), within one CFS wake-up of the owner being ready.
"""

from __future__ import annotations

import itertools
import math

from pydantic import model_validator

from .base import (
    Dispatch,
    GlobalAction,
    GlobalPolicy,
    JobSpec,
    LocalEvent,
    Proc,
    ProcAdded,
    Reject,
    Scheduler,
    Start,
)
from .cosched import NICE_MAX, NICE_MIN, PbSbLocal, PeriodicParams, SpinBlockParams, WakeParams
from .gang import GangLocal
from .params import MAX_ROWS, MIN_QUANTUM_MS, PolicyParams, param, rule_error
from .placement import MemoryAwareParams, NodeMemory, contiguous_block, oversize_reason

RT, BE = "rt", "be"
#: The most one class's share of the cluster may outweigh the other's (fairness_x:fairness_y either way);
#: the paper's ratios are 1:1 to 4:1.
MAX_FAIRNESS_RATIO = 1e6
_NICE = {"noun": "a whole nice value", "ge": NICE_MIN, "le": NICE_MAX}
_MS = "a number of milliseconds"
_US = "a number of microseconds"


def is_rt(job: JobSpec | None) -> bool:
    return job is not None and job.realtime is not None


# --------------------------------------------------------------------------------------------------------
# Parameters


class MulticlassParams(MemoryAwareParams):
    fairness_x: float = param(
        2.0, "x of the fairness ratio x:y (RT's share of the cluster)", noun="a number", gt=0
    )
    fairness_y: float = param(1.0, "y of the fairness ratio x:y (BE's share)", noun="a number", gt=0)
    admission: bool = param(False, "admission control for RT jobs (paper 000 §4.1 for 1GS, §4.4 for 2DCS)")
    context_switch_us: float = param(200.0, "ω: cost of a context switch", noun=_US, ge=0)
    sync_ms: float = param(1.0, "δ: cost of a global synchronisation", noun=_MS, ge=0)
    interrupt_us: float = param(50.0, "cost of the interrupt that unblocks a receiver", noun=_US, ge=0)

    @model_validator(mode="after")
    def _ratio(self):
        # Each class keeps a share a float can hold: fairness_x 1e300 made RT's share x/(x+y) exactly 1.0,
        # BE's 0, and 2DCS-PS's virtual time divided by it mid-run (ZeroDivisionError).
        x, y = self.fairness_x, self.fairness_y
        if max(x, y) / min(x, y) > MAX_FAIRNESS_RATIO:
            only_y = "fairness_x" not in self.model_fields_set and "fairness_y" in self.model_fields_set
            raise rule_error(
                "fairness_y" if only_y else "fairness_x",
                f"splits the cluster {x:g}:{y:g} between RT and BE, beyond {MAX_FAIRNESS_RATIO:g}:1 "
                "(the smaller class's share would vanish); bring fairness_x and fairness_y closer",
            )
        return self

    def rt_share(self) -> float:
        return self.fairness_x / (self.fairness_x + self.fairness_y)


class OneGsParams(MulticlassParams):
    rows: int = param(
        6,
        "M: rows of the Ousterhout matrix, split x:y between RT and BE",
        noun="a whole number",
        ge=2,
        le=MAX_ROWS,
    )
    quantum_ms: float = param(500.0, "Q: length of a row's slot", noun=_MS, ge=MIN_QUANTUM_MS)
    lead_ms: float = param(25.0, "how far ahead a slot is planned and sent", noun=_MS, ge=0)

    @model_validator(mode="after")
    def _rows_and_lead(self):
        if self.lead_ms >= self.quantum_ms:
            raise rule_error(
                "lead_ms", f"must be shorter than quantum_ms ({self.lead_ms:g} >= {self.quantum_ms:g})"
            )
        rt = rt_rows(self.rows, self.fairness_x, self.fairness_y)
        if rt < 1 or rt >= self.rows:
            raise rule_error(
                "rows",
                f"{self.rows} rows split {self.fairness_x:g}:{self.fairness_y:g} leave {rt} RT and "
                f"{self.rows - rt} BE rows; each class needs one at least: add rows",
            )
        return self


class _LocalClassParams(PolicyParams):
    rt_first_nice: int = param(-20, "nice of the RT process EDF runs first", **_NICE)
    rt_nice: int = param(-10, "nice of the other RT processes while RT is favoured", **_NICE)
    borrow_nice: int = param(
        19, "nice of the class not favoured: it runs only on what the other leaves", **_NICE
    )


class TwoDcsParams(_LocalClassParams, SpinBlockParams, PeriodicParams, WakeParams, MulticlassParams):
    pass


class TdmParams(TwoDcsParams):
    gamma_ms: float = param(3000.0, "Γ: the period split into an RT and a BE division", noun=_MS, gt=0)


class PsParams(TwoDcsParams):
    quantum_ms: float = param(
        100.0,
        "a scheduling event at least this often (the BE quantum)",
        noun=_MS,
        ge=MIN_QUANTUM_MS,
    )


# --------------------------------------------------------------------------------------------------------
# Admission formulas (pure functions: the tests work them by hand)


def rt_rows(rows: int, x: float, y: float) -> int:
    """RT rows of an M-row matrix split x:y (M = 6 at 2:1: 4)."""
    return round(rows * x / (x + y))


def gs_rows_needed(rows: int, quantum_s: float, omega_s: float, phi_max_s: float, period_s: float) -> int:
    """1GS: rows r an RT job needs per cycle of M slots of Q: ``r Q >= (M (Q + ω) / d) phi_max``, with ω
    charged once per row switch (docs/policies.md, "1GS")."""
    need = rows * (quantum_s + omega_s) * phi_max_s / (quantum_s * period_s)
    return max(1, math.ceil(need - 1e-9))


def dcs_fits(
    node_phi: float, node_period: float, phi: float, period: float, share: float, cost: float
) -> bool:
    """2DCS admission test for one process on one node: ``Phi_i + phi + cost <= min(d_i, d_A) * share``."""
    return node_phi + phi + cost <= min(node_period, period) * share + 1e-12


# --------------------------------------------------------------------------------------------------------
# 1GS


class OneGsGlobal(GlobalPolicy):
    """An Ousterhout matrix of M rows, the first ``round(M x/(x+y))`` RT's and the rest BE's; a job holds
    cells of its class's rows (RT under admission: r rows in the same columns) and the matrix is replicated
    in four steps after every arrival and departure; a slot runs one row on every node."""

    admits_at_start = True
    params: OneGsParams

    def __init__(self, nodes: int, params: OneGsParams, seed: int = 0) -> None:
        super().__init__(nodes, params, seed)
        p = self.params
        self.M = p.rows
        self.Q = p.quantum_ms / 1000.0
        self.lead = p.lead_ms / 1000.0
        self.omega = p.context_switch_us / 1e6
        self.admission = p.admission
        self.n_rt = rt_rows(self.M, p.fairness_x, p.fairness_y)
        self.rt_rows = tuple(range(self.n_rt))
        self.be_rows = tuple(range(self.n_rt, self.M))
        self.matrix: list[list[str | None]] = [[None] * nodes for _ in range(self.M)]
        self.orig: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}  # job -> (rows, columns)
        self.copies: dict[str, list[int]] = {}
        self.specs: dict[str, JobSpec] = {}
        self.queues: dict[str, list[JobSpec]] = {RT: [], BE: []}
        self.mem = NodeMemory(self)  # a process holds its memory once, however many rows run it
        self.row = -1
        self.slot = -1
        self.next_at: float | None = None
        self.last_at = float("-inf")

    def max_jobs_per_node(self) -> int:
        return self.M

    def needed(self, job: JobSpec) -> int:
        rt = job.realtime
        return gs_rows_needed(self.M, self.Q, self.omega, rt.phi_max, rt.period_s)

    # -- events ------------------------------------------------------------------------------------------

    def submit(self, now: float, job: JobSpec) -> list[GlobalAction]:
        reason = oversize_reason(job, self.nodes) or self.mem.never_fits(job)
        if reason is None and is_rt(job) and self.admission and self.needed(job) > self.n_rt:
            reason = (
                f"job {job.job_id} needs {self.needed(job)} RT rows of the matrix to meet its rate "
                f"(r = ceil(M (Q+ω) phi_max / (Q d))) but there are {self.n_rt}; it could never be admitted"
            )
        if reason is not None:
            return [Reject(job.job_id, reason)]
        self.queues[RT if is_rt(job) else BE].append(job)
        return self._changed(now)

    def finished(self, now: float, job_id: str) -> list[GlobalAction]:
        if job_id in self.orig:
            rows, cols = self.orig.pop(job_id)
            self.specs.pop(job_id, None)
            self.mem.release(job_id)
            for r in (*rows, *self.copies.pop(job_id, ())):
                self._set(r, cols, None)
        else:
            for q in self.queues.values():
                q[:] = [j for j in q if j.job_id != job_id]
        return self._changed(now)

    def next_tick(self) -> float | None:
        times = [j.submit_time + j.realtime.max_wait_s for j in self.queues[RT] if j.realtime.max_wait_s]
        if self.next_at is not None:
            times.append(self.next_at - self.lead)
        return min(times, default=None)

    def tick(self, now: float) -> list[GlobalAction]:
        actions = self._evict(now)
        if self.next_at is not None and now >= self.next_at - self.lead - 1e-9 and self.orig:
            at = self.next_at if now <= self.next_at else now + self.lead
            actions.append(self._dispatch(at))
        return actions

    # -- matrix ------------------------------------------------------------------------------------------

    def _evict(self, now: float) -> list[GlobalAction]:
        out: list[GlobalAction] = []
        keep = []
        for j in self.queues[RT]:
            w = j.realtime.max_wait_s
            if w is not None and now >= j.submit_time + w - 1e-9:
                out.append(Reject(j.job_id, f"waited {w:g} s (its w) without a place in the matrix"))
            else:
                keep.append(j)
        self.queues[RT] = keep
        return out

    def _set(self, row: int, cols, job_id: str | None) -> None:
        for c in cols:
            self.matrix[row][c] = job_id

    def _free(self, row: int, cols) -> bool:
        return all(self.matrix[row][c] is None for c in cols)

    def _place(self, job: JobSpec) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """Rows and columns for a queued job's original cells (copies are gone when this runs)."""
        rows = self.rt_rows if is_rt(job) else self.be_rows
        k = self.needed(job) if is_rt(job) and self.admission else 1
        up = self.mem.fitting((c for c in range(self.nodes) if c not in self.down), job)
        for combo in itertools.combinations(rows, k):
            free = [c for c in up if all(self.matrix[r][c] is None for r in combo)]
            cols = contiguous_block(free, job.size)
            if cols is None and len(free) >= job.size:
                cols = tuple(free[: job.size])
            if cols is not None:
                return combo, cols
        return None

    def _changed(self, now: float) -> list[GlobalAction]:
        """After an arrival or departure: copies removed, queues served FCFS, copies made again."""
        for j, rows in self.copies.items():
            cols = self.orig[j][1]
            for r in rows:
                self._set(r, cols, None)
        self.copies = {}
        actions: list[GlobalAction] = self._evict(now)
        for cls in (RT, BE):
            q = self.queues[cls]
            while q:
                where = self._place(q[0])
                if where is None:
                    break  # FCFS within the class
                job = q.pop(0)
                rows, cols = where
                for r in rows:
                    self._set(r, cols, job.job_id)
                self.orig[job.job_id] = where
                self.specs[job.job_id] = job
                self.mem.take(job, cols)
                actions.append(Start(job.job_id, cols))
        self.replicate()
        if not self.orig:
            self.next_at = None
        elif self.next_at is None:
            actions.append(self._dispatch(max(now + self.lead, self.last_at)))
        return actions

    def replicate(self) -> None:
        """The four steps of §4.1, jobs in placement order: (1) RT jobs short of their rate into other RT
        rows, (2) every BE job into other BE rows, (3) RT jobs still short into BE rows, (4) BE jobs into RT
        rows. A copy takes the original's columns in a row where they are all free."""
        rt = [j for j in self.orig if is_rt(self.specs[j])]
        be = [j for j in self.orig if not is_rt(self.specs[j])]

        def held(j: str) -> int:
            return len(self.orig[j][0]) + len(self.copies.get(j, ()))

        def copy(j: str, rows, until=None) -> None:
            cols = self.orig[j][1]
            for r in rows:
                if until is not None and held(j) >= until:
                    return
                if self._free(r, cols):
                    self._set(r, cols, j)
                    self.copies.setdefault(j, []).append(r)

        for j in rt:
            copy(j, self.rt_rows, self.needed(self.specs[j]))
        for j in be:
            copy(j, self.be_rows)
        for j in rt:
            copy(j, self.be_rows, self.needed(self.specs[j]))
        for j in be:
            copy(j, self.rt_rows)

    def _dispatch(self, at: float) -> Dispatch:
        for step in range(1, self.M + 1):
            r = (self.row + step) % self.M
            if any(self.matrix[r]):
                break
        self.row = r
        self.slot += 1
        self.last_at = at
        self.next_at = at + self.Q
        allowed = {n: frozenset([self.matrix[r][n]] if self.matrix[r][n] else []) for n in range(self.nodes)}
        return Dispatch(at=at, slot=self.slot, allowed=allowed, rows=(r,))


class OneGs(Scheduler):
    name = "1gs"
    summary = (
        "paper 000's 1GS: gang matrix with rows split x:y between RT and BE, 4-step replication, admission"
    )
    global_policy = OneGsGlobal
    local_policy = GangLocal
    Params = OneGsParams
    wait_mode = "spin"  # §4.1: receives spin
    allows_wait_mode_override = False


# --------------------------------------------------------------------------------------------------------
# 2DCS: global allocation and admission (shared by TDM and PS)


class TwoDcsGlobal(GlobalPolicy):
    """RT processes go by laxity (several of one job may share a node), BE jobs on the s nodes holding the
    fewest BE processes. Under admission an RT job that fails the test waits in the RT queue (FCFS), tried
    again at each departure, and is turned away after w; without it every job starts on arrival."""

    admits_at_start = True
    params: TwoDcsParams

    def __init__(self, nodes: int, params: TwoDcsParams, seed: int = 0) -> None:
        super().__init__(nodes, params, seed)
        p = self.params
        self.admission = p.admission
        self.share = self.rt_share()
        self.cost = 2 * p.context_switch_us / 1e6 + p.interrupt_us / 1e6
        self.phi = [0.0] * nodes  # Phi_i
        self.periods: list[list[float]] = [[] for _ in range(nodes)]  # d of each RT process on node i
        self.be = [0] * nodes
        self.placed: dict[str, tuple[JobSpec, tuple[int, ...]]] = {}
        self.queue: list[JobSpec] = []  # RT jobs waiting (admission, memory)
        self.be_queue: list[JobSpec] = []  # BE jobs waiting (memory only)
        self.mem = NodeMemory(self)

    def rt_share(self) -> float:
        """The share of a node's CPU the admission test gives the RT class."""
        return self.params.rt_share()

    def period(self, i: int) -> float:
        return min(self.periods[i], default=math.inf)

    def laxity(self, i: int, period: float) -> float:
        """``x/(x+y) * min(d_i, d_A) - Phi_i``: the per-frame slack of node i for a job of period d_A."""
        return min(self.period(i), period) * self.share - self.phi[i]

    def allocate_rt(self, job: JobSpec) -> tuple[int, ...] | None:
        """Processes in descending phi, each on the node of largest laxity (lowest index on a tie); None
        when admission is on and a process fails the test on the node of most slack."""
        rt = job.realtime
        phi = list(self.phi)
        periods = [list(p) for p in self.periods]
        nodes: list[int | None] = [None] * job.size
        used = list(self.mem.used)
        limit = self.mem.limit
        order = sorted(range(job.size), key=lambda r: (-rt.work_s[r], r))
        for rank in order:
            up = [i for i in range(self.nodes) if i not in self.down and used[i] + job.memory_mb <= limit(i)]
            if not up:
                return None  # no node has the memory for this process now
            lax = {i: min(min(periods[i], default=math.inf), rt.period_s) * self.share - phi[i] for i in up}
            best = max(up, key=lambda i: (lax[i], -i))
            node_d = min(periods[best], default=math.inf)
            if self.admission and not dcs_fits(
                phi[best], node_d, rt.work_s[rank], rt.period_s, self.share, self.cost
            ):
                return None
            nodes[rank] = best
            used[best] += job.memory_mb
            phi[best] += rt.work_s[rank] + (self.cost if self.admission else 0.0)
            periods[best].append(rt.period_s)
        return tuple(nodes)

    def allocate_be(self, job: JobSpec) -> tuple[int, ...] | None:
        """The ``s`` nodes (with memory for it) holding the fewest BE processes; None if too few have room."""
        up = self.mem.fitting((i for i in range(self.nodes) if i not in self.down), job)
        if len(up) < job.size:
            return None
        return tuple(sorted(sorted(up, key=lambda i: (self.be[i], i))[: job.size]))

    def _take(self, job: JobSpec, nodes: tuple[int, ...]) -> Start:
        self.placed[job.job_id] = (job, nodes)
        self.mem.take(job, nodes)
        if is_rt(job):
            for rank, i in enumerate(nodes):
                self.phi[i] += job.realtime.work_s[rank] + (self.cost if self.admission else 0.0)
                self.periods[i].append(job.realtime.period_s)
        else:
            for i in nodes:
                self.be[i] += 1
        return Start(job.job_id, nodes)

    def submit(self, now: float, job: JobSpec) -> list[GlobalAction]:
        reason = (oversize_reason(job, self.nodes) if not is_rt(job) else None) or self.mem.never_fits(job)
        if reason is not None:
            return [Reject(job.job_id, reason)]
        if not is_rt(job):
            self.be_queue.append(job)
            return self._serve()
        self.queue.append(job)
        actions = self._evict(now)
        if self.admission and self._never(job):
            self.queue.remove(job)
            return actions + [
                Reject(job.job_id, f"job {job.job_id} fails the admission test even on an empty cluster")
            ]
        return actions + self._serve()

    def _never(self, job: JobSpec) -> bool:
        """The test fails with nothing else placed: waiting cannot help."""
        saved = self.phi, self.periods, self.mem.used
        self.phi, self.periods = [0.0] * self.nodes, [[] for _ in range(self.nodes)]
        self.mem.used = [0.0] * self.nodes
        try:
            return self.allocate_rt(job) is None
        finally:
            self.phi, self.periods, self.mem.used = saved

    def _serve(self) -> list[GlobalAction]:
        out: list[GlobalAction] = []
        while self.queue:
            nodes = self.allocate_rt(self.queue[0])
            if nodes is None:
                break
            out.append(self._take(self.queue.pop(0), nodes))
        while self.be_queue:  # BE jobs wait only for memory
            nodes = self.allocate_be(self.be_queue[0])
            if nodes is None:
                break
            out.append(self._take(self.be_queue.pop(0), nodes))
        return out

    def _evict(self, now: float) -> list[GlobalAction]:
        out: list[GlobalAction] = []
        keep = []
        for j in self.queue:
            w = j.realtime.max_wait_s
            if w is not None and now >= j.submit_time + w - 1e-9:
                out.append(Reject(j.job_id, f"waited {w:g} s (its w) without passing the admission test"))
            else:
                keep.append(j)
        self.queue = keep
        return out

    def finished(self, now: float, job_id: str) -> list[GlobalAction]:
        got = self.placed.pop(job_id, None)
        if got is None:
            self.queue = [j for j in self.queue if j.job_id != job_id]
            self.be_queue = [j for j in self.be_queue if j.job_id != job_id]
            return []
        job, nodes = got
        self.mem.release(job_id)
        if is_rt(job):
            for rank, i in enumerate(nodes):
                self.phi[i] -= job.realtime.work_s[rank] + (self.cost if self.admission else 0.0)
                self.periods[i].remove(job.realtime.period_s)
                if not self.periods[i]:
                    self.phi[i] = 0.0  # no float residue on an empty node
        else:
            for i in nodes:
                self.be[i] -= 1
        return self._evict(now) + self._serve()

    def next_tick(self) -> float | None:
        return min(
            (j.submit_time + j.realtime.max_wait_s for j in self.queue if j.realtime.max_wait_s), default=None
        )

    def tick(self, now: float) -> list[GlobalAction]:
        return self._evict(now)


class TdmGlobal(TwoDcsGlobal):
    params: TdmParams

    def rt_share(self) -> float:
        # A division switch per Gamma is time the RT division loses.
        return super().rt_share() - self.params.sync_ms / self.params.gamma_ms


# --------------------------------------------------------------------------------------------------------
# 2DCS: the node level


class VirtualTimes:
    """2DCS-PS's class choice on one node (§4.3). At each scheduling event the class that ran since the
    last one advances by the time it ran over its share; the class behind runs (a tie goes to RT); a class
    with nothing ready yields to the other. A class that had nothing ready and has something again starts
    no earlier than the other's virtual time (the reset rule, applied: docs/policies.md, "2DCS-PS"; ``max``
    so a class that ran ahead keeps its debt)."""

    def __init__(self, rt_share: float) -> None:
        self.share = {RT: rt_share, BE: 1.0 - rt_share}
        self.vt = {RT: 0.0, BE: 0.0}
        self.running: str | None = None
        self.ready = {RT: False, BE: False}
        self.last = 0.0

    def event(self, now: float, rt_ready: bool, be_ready: bool) -> str | None:
        tau = max(0.0, now - self.last)
        self.last = now
        if self.running is not None:
            self.vt[self.running] += tau / self.share[self.running]
        ready = {RT: rt_ready, BE: be_ready}
        for c, other in ((RT, BE), (BE, RT)):
            if ready[c] and not self.ready[c]:
                self.vt[c] = max(self.vt[c], self.vt[other])
        self.ready = ready
        if rt_ready and be_ready:
            self.running = RT if self.vt[RT] <= self.vt[BE] else BE
        elif rt_ready or be_ready:
            self.running = RT if rt_ready else BE
        else:
            self.running = None
        return self.running


class ClassLocal(PbSbLocal):
    """The node's second level for both 2DCS schemes: RT processes by EDF (deadlines on each job's frame
    grid from its start: ``start + k d``), BE processes by PB-SB (the periodic pick among BE processes
    only, wake boosts of blocked receivers), the class not favoured at ``borrow_nice``. ``favoured(now)``
    is the scheme's (TDM: the division; PS: the virtual times)."""

    params: TwoDcsParams

    def __init__(self, node: int, params: TwoDcsParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        p = self.params
        self.rt_first_nice, self.rt_nice, self.borrow_nice = p.rt_first_nice, p.rt_nice, p.borrow_nice
        self.rt: dict[Proc, tuple[float, float]] = {}  # RT process -> (start, period d)
        self.favour: str | None = None
        self.edf_first: Proc | None = None

    def favoured(self, now: float) -> str | None:
        raise NotImplementedError

    def ready(self, cls: str) -> bool:
        return any(self.useful(p) for p in self.procs if (p in self.rt) == (cls == RT))

    def deadline(self, p: Proc, now: float) -> float:
        start, d = self.rt[p]
        return start + (math.floor((now - start) / d + 1e-9) + 1) * d

    def pick(self) -> Proc | None:
        return next((p for p in self.candidates() if p not in self.rt and self.useful(p)), None)

    def react(self, now: float, event: LocalEvent) -> None:
        if isinstance(event, ProcAdded) and is_rt(event.spec):
            self.rt[event.proc] = (now, event.spec.realtime.period_s)
        super().react(now, event)

    def forget(self, proc: Proc) -> None:
        super().forget(proc)
        self.rt.pop(proc, None)

    def expire(self, now: float, key, at: float) -> None:
        # PB-SB's pick chooses among BE processes only: with fewer than two there is nothing to choose,
        # and the timer stops until a BE process arrives (RT-only nodes then hear no pick every interval).
        if key == ("pick",) and sum(p not in self.rt for p in self.procs) < 2:
            self.favourite = None
            return
        super().expire(now, key, at)

    def on_event(self, now: float, event: LocalEvent):
        out = super().on_event(now, event)  # bookkeeping; nice values are recomputed below
        self.favour = self.favoured(now)
        ready_rt = [p for p in self.rt if p in self.procs and self.useful(p)]
        self.edf_first = min(ready_rt, key=lambda p: (self.deadline(p, now), p), default=None)
        changes = dict(out.nice)
        for p in self.procs:
            want = self.nice_of(p)
            if self.applied.get(p) != want:
                changes[p] = want
                self.applied[p] = want
        wakeup = out.wakeup
        extra = self.extra_wakeup(now)
        if extra is not None and (self.armed is None or extra < self.armed):
            self.armed = wakeup = extra
        return type(out)(run=out.run, nice=changes, wakeup=wakeup)

    def extra_wakeup(self, now: float) -> float | None:
        return None

    def nice_of(self, proc: Proc) -> int:
        if not hasattr(self, "rt"):
            return self.normal_nice
        if proc in self.rt:
            if self.favour == BE:
                return self.borrow_nice
            return self.rt_first_nice if proc == self.edf_first else self.rt_nice
        if self.favour == RT:
            return self.borrow_nice
        return super().nice_of(proc)


class TdmLocal(ClassLocal):
    """2DCS-TDM: RT owns ``[k Γ, k Γ + x/(x+y) Γ)`` and BE the rest of each Γ, on every node alike."""

    params: TdmParams

    def __init__(self, node: int, params: TdmParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        p = self.params
        self.gamma = p.gamma_ms / 1000.0
        self.rt_part = self.gamma * p.fairness_x / (p.fairness_x + p.fairness_y)

    def favoured(self, now: float) -> str:
        return RT if (now + 1e-9) % self.gamma < self.rt_part else BE

    def extra_wakeup(self, now: float) -> float | None:
        if not self.procs:
            return None
        base = math.floor((now + 1e-9) / self.gamma) * self.gamma
        nxt = base + self.rt_part if self.favoured(now) == RT else base + self.gamma
        return nxt if nxt > now else nxt + self.gamma


class PsLocal(ClassLocal):
    """2DCS-PS: :class:`VirtualTimes` decide the favoured class at every event, and at least every
    ``quantum_ms`` (the quantum's end is a scheduling event)."""

    params: PsParams

    def __init__(self, node: int, params: PsParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.quantum = self.params.quantum_ms / 1000.0
        self.vt = VirtualTimes(self.params.rt_share())

    def favoured(self, now: float) -> str | None:
        return self.vt.event(now, self.ready(RT), self.ready(BE))

    def extra_wakeup(self, now: float) -> float | None:
        return now + self.quantum if self.procs else None


class _TwoDcs(Scheduler):
    wait_mode = "spin-block"  # §4.2: RT receives spin-block; PB-SB's for BE
    spin_time_us = 300.0
    allows_wait_mode_override = False


class TwoDcsTdm(_TwoDcs):
    name = "2dcs-tdm"
    summary = "paper 000's 2DCS-TDM: RT/BE divisions of Γ, laxity allocation, EDF for RT and PB-SB for BE"
    global_policy = TdmGlobal
    local_policy = TdmLocal
    Params = TdmParams


class TwoDcsPs(_TwoDcs):
    name = "2dcs-ps"
    summary = "paper 000's 2DCS-PS: per-node class virtual times (x:y), laxity allocation, EDF and PB-SB"
    global_policy = TwoDcsGlobal
    local_policy = PsLocal
    Params = PsParams
