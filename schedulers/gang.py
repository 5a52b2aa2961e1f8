"""Gang scheduling with a strict Ousterhout matrix (docs/policies.md, "Gang scheduling").

``mpl`` rows (time slots) x ``nodes`` columns. A job of size s holds s cells of one row and is started as
soon as it is placed; its processes run only while a Dispatch allows its job. Every quantum the global
policy plans the next non-empty row, a lead time ahead, so each node switches on its own timer
(docs/architecture.md, "Gang switches scheduled ahead"). With alternate scheduling, idle columns of the chosen
row also run jobs of other rows whose columns are all free in it. Memory-aware allocation
(:class:`~testbed.schedulers.placement.NodeMemory`): every process placed on a node holds its memory there,
running or stopped, so a job goes only on columns whose node has room for it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from itertools import compress

from pydantic import model_validator

from .base import (
    Dispatch,
    GlobalAction,
    GlobalPolicy,
    JobSpec,
    LocalDecision,
    LocalEvent,
    LocalPolicy,
    Proc,
    ProcAdded,
    ProcExited,
    Reject,
    Scheduler,
    SlotJobs,
    SlotStart,
    Start,
)
from .params import MAX_ROWS, MIN_QUANTUM_MS, PolicyParams, param, rule_error
from .placement import MemoryAwareParams, NodeMemory, contiguous_block, oversize_reason


class GangParams(MemoryAwareParams):
    mpl: int = param(
        3,
        "rows of the Ousterhout matrix (time slots)",
        noun="a whole number of matrix rows",
        ge=1,
        le=MAX_ROWS,
    )
    quantum_ms: float = param(
        100.0, "length of a time slot", noun="a number of milliseconds", ge=MIN_QUANTUM_MS
    )
    alternate: bool = param(True, "idle columns of a slot run jobs of other rows that fit there")
    packing: bool = param(True, "a job goes on the first contiguous block of free columns (false: random)")
    lead_ms: float = param(
        25.0,
        "how far ahead of its start a slot is planned and sent (shorter than quantum_ms)",
        noun="a number of milliseconds",
        ge=0,
    )

    @model_validator(mode="after")
    def _lead_within_quantum(self):
        if self.lead_ms >= self.quantum_ms:
            raise rule_error(
                "lead_ms",
                f"plans each slot lead_ms ahead, so it must be shorter than quantum_ms "
                f"({self.lead_ms:g} >= {self.quantum_ms:g}); lower lead_ms",
            )
        return self


class GangGlobal(GlobalPolicy):
    params: GangParams

    def __init__(self, nodes: int, params: GangParams, seed: int = 0) -> None:
        super().__init__(nodes, params, seed)
        self.mpl = self.params.mpl
        self.quantum = self.params.quantum_ms / 1000.0
        self.lead = self.params.lead_ms / 1000.0
        self.alternate = self.params.alternate
        self.packing = self.params.packing
        self.mem = NodeMemory(self)
        self.rng = random.Random(seed)
        # matrix[row][col] = job id or None
        self.matrix: list[list[str | None]] = [[None] * nodes for _ in range(self.mpl)]
        self.row_used = [0] * self.mpl  # occupied cells per row: rows without room are skipped unread
        # Each row's jobs -> their lowest column, and the row's jobs in that order while no cell of the row
        # changes: a slot takes its row's jobs without a pass over the row's cells (10,000 a slot in
        # benchmarks/sim_scale.py's scale run, where the slots outnumber the matrix's changes).
        self.row_jobs: list[dict[str, int]] = [{} for _ in range(self.mpl)]
        self.row_order: dict[int, list[str]] = {}
        # Each row's slot plan (its jobs, then its alternates), kept until a cell of the matrix changes.
        self.plans: dict[int, list[str]] = {}
        # Each row's free columns of up nodes, kept until a cell of the row or a node's state changes: the
        # queue's head is fitted again at every arrival and end, mostly against unchanged rows. They are
        # read from the row's map (1: the cell is empty and its node up, kept by _set and the nodes' state)
        # at C speed, not by a pass over the row's cells (10,000 at each change in the scale run).
        self.free_cols: dict[int, list[int]] = {}
        self.free_map = [bytearray(b"\x01") * nodes for _ in range(self.mpl)]
        self.cols = tuple(range(nodes))  # the node numbers the lists take (not new ints at each read)
        self.placed: dict[str, tuple[int, tuple[int, ...]]] = {}  # job -> (row, columns)
        self.queue: list[JobSpec] = []
        self.row = -1  # row of the last Dispatch
        self.slot = -1  # number of the last Dispatch
        self.next_at: float | None = None  # start of the next slot; None when the cluster is idle
        self.last_at = float("-inf")  # start of the last planned slot
        self.last_jobs: frozenset[str] = frozenset()  # jobs allowed by the last Dispatch

    # ----------------------------------------------------------------------------------------------------
    # GlobalPolicy

    def next_tick(self) -> float | None:
        return None if self.next_at is None else self.next_at - self.lead

    def max_jobs_per_node(self) -> int:
        return self.mpl

    def node_down(self, now: float, node: int) -> list[GlobalAction]:
        self.free_cols.clear()
        for free in self.free_map:
            free[node] = 0
        return super().node_down(now, node)

    def node_up(self, now: float, node: int) -> list[GlobalAction]:
        super().node_up(now, node)
        self.free_cols.clear()
        for row, free in enumerate(self.free_map):
            free[node] = self.matrix[row][node] is None
        actions = self._place_queued()
        if self.next_at is None and self.placed:
            actions.append(self._dispatch(max(now + self.lead, self.last_at)))
        return actions

    def submit(self, now: float, job: JobSpec) -> list[GlobalAction]:
        reason = oversize_reason(job, self.nodes) or self.mem.never_fits(job)
        if reason is not None:
            return [Reject(job.job_id, reason)]
        self.queue.append(job)
        actions = self._place_queued()
        if self.next_at is None and self.placed:
            actions.append(self._dispatch(max(now + self.lead, self.last_at)))
        return actions

    def finished(self, now: float, job_id: str) -> list[GlobalAction]:
        where = self.placed.pop(job_id, None)
        if where is None:
            self.queue = [j for j in self.queue if j.job_id != job_id]
        else:
            row, cols = where
            self._set(row, cols, None)
            self.mem.release(job_id)
        actions = self._place_queued()
        if not self.placed:
            self.next_at = None  # idle: no ticks until a job arrives
        elif self.next_at is None:
            actions.append(self._dispatch(max(now + self.lead, self.last_at)))
        elif now >= self.last_at and not (self.last_jobs & self.placed.keys()):
            # Everything the running slot allowed has ended: switch now rather than idle out the quantum.
            # (now >= last_at: the last Dispatch is in force, none is planned beyond it.)
            actions.append(self._dispatch(now + self.lead))
        return actions

    def tick(self, now: float) -> list[GlobalAction]:
        if self.next_at is None or not self.placed:
            return []
        at = self.next_at
        if now > at:
            at = now + self.lead  # called late: keep the lead rather than plan a slot in the past
        return [self._dispatch(at)]

    # ----------------------------------------------------------------------------------------------------
    # Matrix

    def _set(self, row: int, cols, job_id: str | None) -> None:
        """Puts ``job_id`` (None: nothing) in ``cols`` of ``row``: a job's cells of a row are set and cleared
        together (its columns)."""
        cells = self.matrix[row]
        self.free_cols.pop(row, None)
        self.row_order.pop(row, None)
        self.plans.clear()
        jobs = self.row_jobs[row]
        free, down = self.free_map[row], self.down
        for c in cols:
            old = cells[c]
            if old is not None:
                jobs.pop(old, None)
            self.row_used[row] += (job_id is not None) - (old is not None)
            cells[c] = job_id
            free[c] = job_id is None and c not in down
        if job_id is not None and cols:
            jobs[job_id] = min(cols)

    def _free_cols(self, row: int) -> list[int]:
        """The row's free columns of up nodes, in order (not to be changed: it is kept in :attr:`free`)."""
        if self.nodes - self.row_used[row] - len(self.down) <= 0:
            return []  # a down node's cells are empty: so many cells of the row are free, and up
        free = self.free_cols.get(row)
        if free is None:
            free = self.free_cols[row] = list(compress(self.cols, self.free_map[row]))
        return free

    def _fit(self, job: JobSpec) -> tuple[int, tuple[int, ...]] | None:
        size = job.size
        room = self.nodes - len(self.down)
        usable = [
            self.mem.fitting(self._free_cols(r), job) if room - self.row_used[r] >= size else []
            for r in range(self.mpl)
        ]
        if self.packing:
            for r in range(self.mpl):
                block = contiguous_block(usable[r], size)
                if block is not None:
                    return r, block
        for r in range(self.mpl):
            free = usable[r]
            if len(free) >= size:
                if self.packing:
                    return r, tuple(free[:size])
                return r, tuple(sorted(self.rng.sample(free, size)))
        return None

    def _place_queued(self) -> list[GlobalAction]:
        actions: list[GlobalAction] = []
        while self.queue:
            fit = self._fit(self.queue[0])
            if fit is None:
                break  # FCFS: the head blocks the queue (also while its memory does not fit)
            job = self.queue.pop(0)
            row, cols = fit
            self._set(row, cols, job.job_id)
            self.mem.take(job, cols)
            self.placed[job.job_id] = (row, cols)
            actions.append(Start(job.job_id, cols))
        return actions

    def _row_jobs(self, row: int) -> list[str]:
        """Jobs of a row, by lowest column (a list of the caller's own)."""
        order = self.row_order.get(row)
        if order is None:
            jobs = self.row_jobs[row]
            order = self.row_order[row] = sorted(jobs, key=jobs.__getitem__)
        return list(order)

    def _next_row(self) -> int:
        for step in range(1, self.mpl + 1):
            r = (self.row + step) % self.mpl
            if self.row_used[r]:
                return r
        raise AssertionError("no placed job")  # callers check self.placed first

    def _alternates(
        self, row: int, jobs: list[str], accept: Callable[[str], bool] | None = None
    ) -> list[str]:
        """Alternate scheduling: jobs of the other rows (in round-robin order from ``row``) whose columns
        are all idle with ``jobs`` running (and that ``accept`` takes, if given)."""
        busy: set[int] = set()
        for j in jobs:
            busy.update(self.placed[j][1])
        extra: list[str] = []
        for step in range(1, self.mpl):
            for j in self._row_jobs((row + step) % self.mpl):
                cols = self.placed[j][1]
                if busy.isdisjoint(cols) and (accept is None or accept(j)):
                    extra.append(j)
                    busy.update(cols)
        return extra

    def _plan_jobs(self, row: int) -> list[str]:
        """The jobs the slot of ``row`` runs; ``self.row`` is still the previous slot's row. The same while
        the matrix is: a row's plan is kept until a cell of the matrix changes (:meth:`_set`)."""
        plan = self.plans.get(row)
        if plan is None:
            plan = self._row_jobs(row)
            if self.alternate:
                plan += self._alternates(row, plan)
            self.plans[row] = plan
        return list(plan)

    def _dispatch(self, at: float) -> Dispatch:
        row = self._next_row()
        jobs = self._plan_jobs(row)
        self.row = row
        self.slot += 1
        self.last_at = at
        self.last_jobs = frozenset(jobs)
        self.next_at = at + self.quantum
        # By job: the slot's jobs and their columns, as many steps as it runs jobs, not one per node.
        plan = SlotJobs(self.nodes, {j: self.placed[j][1] for j in jobs})
        return Dispatch(at=at, slot=self.slot, allowed=plan, rows=self._slot_rows(row))

    def _slot_rows(self, row: int) -> tuple[int, ...]:
        """The matrix rows the slot just planned (by :meth:`_plan_jobs`) runs."""
        return (row,)


class GangLocal(LocalPolicy):
    """Runs exactly the node's processes whose job the last slot allowed; nothing before the first slot."""

    slot_start_keeps_latest_only = True

    def __init__(self, node: int, params: PolicyParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.procs: set[Proc] = set()
        self.allowed: frozenset[str] = frozenset()

    def on_event(self, now: float, event: LocalEvent) -> LocalDecision:
        if isinstance(event, ProcAdded):
            self.procs.add(event.proc)
        elif isinstance(event, ProcExited):
            self.procs.discard(event.proc)
        elif isinstance(event, SlotStart):
            self.allowed = event.allowed
        return LocalDecision(run=frozenset(p for p in self.procs if p.job_id in self.allowed))


class Gang(Scheduler):
    name = "gang"
    summary = "strict gang scheduling on an Ousterhout matrix (mpl rows), optional alternate scheduling"
    global_policy = GangGlobal
    local_policy = GangLocal
    Params = GangParams
