"""Batch: PBS-like first-come first-served space sharing, one job per node (MPL 1), with optional EASY
backfilling (docs/policies.md, "Batch, allocation and energy"). Allocation is PACKING (lowest contiguous
block) or NO PACKING (random).

Memory-aware allocation (:class:`~testbed.schedulers.placement.NodeMemory`, paper 003 §5.3) is shared by
every placing scheduler. Under batch a free node holds no other process, so all its memory is free: on
alike nodes the only job memory can refuse is one whose process is bigger than a whole node, and that one
is rejected; on nodes whose memory differs (``cluster.groups``) a job goes only on free nodes big enough
for its processes."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence

from .base import GlobalAction, JobSpec, RunAll, Scheduler, Start
from .params import param
from .placement import FcfsQueue, MemoryAwareParams, NodeMemory, pack


class BatchGlobal(FcfsQueue):
    """FCFS queue; the head blocks unless EASY backfilling lets a later job through."""

    params: BatchParams

    def __init__(self, nodes: int, params: BatchParams, seed: int = 0) -> None:
        super().__init__(nodes, params, seed)
        self.backfill = self.params.backfill
        self.packing = self.params.packing
        self.mem = NodeMemory(self)
        self.rng = random.Random(seed)
        # Every node number once: a block of them is a slice, its ints shared by every job's tuple (677 new
        # ints a job from range() held 0.6 GB more in benchmarks/sim_scale.py's 100,000 jobs).
        self.numbers = tuple(range(nodes))
        self.free: set[int] = set(self.numbers)
        # The free nodes again, byte n 1 while node n is free: PACKING's block among them is the first run of
        # a job's size of ones, found by bytes.find in C where the free set was sorted for each job (the
        # largest single part of the NASA replay's policy work).
        self.free_map = bytearray(b"\x01") * nodes
        self.queue: list[JobSpec] = []
        # job_id -> (nodes, expected end); end is inf when the job gave no estimate
        self.running: dict[str, tuple[tuple[int, ...], float]] = {}

    def max_jobs_per_node(self) -> int:
        return 1

    def node_down(self, now: float, node: int) -> list[GlobalAction]:
        super().node_down(now, node)
        self.free.discard(node)  # idle, it was free; busy, finished() will not give it back
        self.free_map[node] = 0
        return []

    def node_up(self, now: float, node: int) -> list[GlobalAction]:
        self.free.add(node)
        self.free_map[node] = 1
        return super().node_up(now, node)

    def finished(self, now: float, job_id: str) -> list[GlobalAction]:
        placed = self.running.pop(job_id, None)
        if placed is not None:
            back = placed[0] if not self.down else [n for n in placed[0] if n not in self.down]
            self.free.update(back)
            self._mark(back, 1)
        else:  # ended while still queued (killed, failed)
            self.queue = [j for j in self.queue if j.job_id != job_id]
        return self._schedule(now)

    # ----------------------------------------------------------------------------------------------------

    def _free_for(self, job: JobSpec, nodes: set[int] | None = None) -> set[int]:
        """The nodes of ``nodes`` (default: the free ones) that can hold ``job``'s processes."""
        nodes = self.free if nodes is None else nodes
        if self.mem.alike:
            return nodes
        return {n for n in nodes if self.mem.fits(n, job)}

    def _mark(self, nodes: Sequence[int], flag: int) -> None:
        """Sets ``nodes``' bytes of :attr:`free_map` (a block at once where they are one)."""
        if not nodes:
            return
        lo, hi = min(nodes), max(nodes)
        if hi - lo + 1 == len(nodes):  # distinct (a job's nodes): every node from lo to hi
            self.free_map[lo : hi + 1] = bytes((flag,)) * len(nodes)
        else:
            for n in nodes:
                self.free_map[n] = flag

    def _allocate(self, candidates: Iterable[int], size: int) -> tuple[int, ...]:
        if self.packing:
            if candidates is self.free:  # the first run of ``size`` free nodes, as pack() finds it
                at = self.free_map.find(b"\x01" * size)
                if at >= 0:
                    return self.numbers[at : at + size]
            return pack(candidates, size)
        return tuple(sorted(self.rng.sample(sorted(candidates), size)))

    def _start(self, now: float, job: JobSpec, nodes: tuple[int, ...]) -> Start:
        self.free.difference_update(nodes)
        self._mark(nodes, 0)
        end = now + job.estimate if job.estimate is not None else math.inf
        self.running[job.job_id] = (nodes, end)
        return Start(job.job_id, nodes)

    def _schedule(self, now: float) -> list[GlobalAction]:
        actions: list[GlobalAction] = []
        while self.queue and self.queue[0].size <= len(fit := self._free_for(self.queue[0])):
            job = self.queue.pop(0)
            actions.append(self._start(now, job, self._allocate(fit, job.size)))
        if self.backfill and len(self.queue) > 1:
            actions.extend(self._backfill(now))
        return actions

    def _reservation(self, now: float) -> tuple[float, int]:
        """EASY: the earliest time the head can start by the running jobs' estimates, and how many of the
        free nodes are held for it until then (the lowest-numbered: :meth:`_held`). Jobs that overran their
        estimate are taken to end now.

        The nodes freed by then are held first, the free nodes only for the rest: busy nodes cannot be
        backfilled anyway, so the free nodes left over are EASY's extra nodes (those free at the shadow
        time beyond the head's size), as many as its definition lets a long job take. Holding the head's
        packed block instead held free nodes that a later job could have had without delaying the head
        (+0.26 % mean wait on the NASA trace against the count-based reference; docs/measurements.md, "The
        simulator at trace scale"). Where the head starts is decided when it starts, not here. Only the
        free nodes held are returned: the busy ones are never free before the shadow time, so no later
        job's choice depends on which they are."""
        head = self.queue[0]
        free = self._free_for(head)
        avail = len(free)
        shadow = now
        freed_later = 0
        for _job_id, (nodes, end) in sorted(self.running.items(), key=lambda kv: (kv[1][1], kv[0])):
            if avail >= head.size:
                break
            shadow = max(shadow, end)
            fit = len(nodes) if self.mem.alike else len(self._free_for(head, set(nodes)))
            avail += fit
            freed_later += fit
        return shadow, max(0, min(head.size - freed_later, avail - freed_later))

    def _held(self, count: int) -> set[int]:
        """The ``count`` lowest-numbered free nodes that the head can use: those held for it (all of them,
        unsorted, when it needs every one: a wide head mostly does)."""
        usable = self._free_for(self.queue[0])
        if count >= len(usable):
            return set(usable)
        return set(sorted(usable)[:count]) if count else set()

    def _backfill(self, now: float) -> list[GlobalAction]:
        # The later jobs no wider than the free nodes, in queue order: only they can start (the free nodes
        # only shrink as they do). One comprehension finds them, where the loop below took a method call
        # for each queued job at every arrival and end (benchmarks/sim_scale.py's 100,000 jobs).
        free_now = len(self.free)
        candidates = [j for j in self.queue[1:] if j.size <= free_now]
        if not candidates:
            return []  # no later job fits on the free nodes: the reservation need not be worked out
        shadow, count = self._reservation(now)
        if math.isinf(shadow):
            return []  # the head waits on a job of unknown length: nothing may pass it
        actions: list[GlobalAction] = []
        # The free nodes held, listed (a sort of the free nodes) only once some job starts: until then a
        # long job on alike nodes fits or not by their count alone, and mostly none starts.
        held: set[int] | None = None
        spare: set[int] | None = None  # the free nodes not held (on alike nodes: kept as jobs start)
        for job in candidates:
            free = self._free_for(job)
            if job.size > len(free):
                continue
            ends_in_time = job.estimate is not None and now + job.estimate <= shadow
            if held is None:
                if not ends_in_time and self.mem.alike and job.size > len(free) - count:
                    continue  # more than the free nodes not held
                held = self._held(count)
            if ends_in_time:
                # Free nodes held for the head first: they are free again by the shadow time, and the
                # extra nodes stay free for a long job (EASY lets one take them).
                mine = held if self.mem.alike else free & held
                if job.size <= len(mine):
                    nodes = self._allocate(mine, job.size)
                else:
                    nodes = tuple(sorted(mine.union(self._allocate(free - mine, job.size - len(mine)))))
            else:
                if not self.mem.alike:
                    own = free - held
                else:
                    if spare is None:
                        spare = free - held
                    own = spare
                if job.size > len(own):
                    continue
                nodes = self._allocate(own, job.size)
            self.queue.remove(job)
            actions.append(self._start(now, job, nodes))
            held.difference_update(nodes)
            if spare is not None:
                spare.difference_update(nodes)
        return actions


class BatchParams(MemoryAwareParams):
    backfill: bool = param(False, "EASY backfilling: a later job may start if it does not delay the head")
    packing: bool = param(True, "PACKING: the lowest contiguous block of free nodes (false: random nodes)")


class Batch(Scheduler):
    name = "batch"
    summary = "PBS-like FCFS space sharing, one job per node; optional EASY backfilling"
    global_policy = BatchGlobal
    local_policy = RunAll
    Params = BatchParams
