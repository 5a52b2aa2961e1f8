"""Batch: PBS-like first-come first-served space sharing, one job per node (MPL 1), with optional EASY
backfilling (ALGORITHMS.md §6). Allocation is PACKING (lowest contiguous block) or NO PACKING (random).

Memory-aware allocation (:class:`NodeMemory`, paper 003 §5.3) is shared by every placing scheduler. Under
batch a free node holds no other process, so all its memory is free: the only job memory can refuse is
one whose process is bigger than a whole node, and that one is rejected."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .base import GlobalAction, GlobalPolicy, JobSpec, PolicyConfigError, Reject, RunAll, Scheduler, Start


def contiguous_block(free: Sequence[int], size: int) -> tuple[int, ...] | None:
    """The lowest-numbered run of ``size`` consecutive node numbers in ``free`` (sorted), or None."""
    if size <= 0:
        return ()
    run_start = 0
    for i in range(len(free)):
        if i > 0 and free[i] != free[i - 1] + 1:
            run_start = i
        if i - run_start + 1 == size:
            return tuple(free[run_start : i + 1])
    return None


def pack(free: Iterable[int], size: int) -> tuple[int, ...]:
    """PACKING: the first contiguous block that fits, else the lowest-numbered free nodes."""
    ordered = sorted(free)
    block = contiguous_block(ordered, size)
    return block if block is not None else tuple(ordered[:size])


def oversize_reason(job: JobSpec, nodes: int) -> str | None:
    """Why a job can never run on a cluster of ``nodes`` uniprocessor nodes, or None if it can."""
    if job.size < 1:
        return f"job {job.job_id} asks for {job.size} processes; a job needs at least 1"
    if job.size > nodes:
        return (
            f"job {job.job_id} needs {job.size} nodes but the cluster has only {nodes}; it could never start"
        )
    return None


def param_bool(params: Mapping[str, Any], name: str, scheduler: str) -> bool:
    value = params[name]
    if not isinstance(value, bool):
        raise PolicyConfigError(f"scheduler.params.{name}: {scheduler} needs true or false, got {value!r}")
    return value


#: The memory-aware allocation parameter every placing scheduler accepts (Scheduler.allocation_defaults).
MEMORY_DEFAULTS = {"memory_aware": True}


class NodeMemory:
    """Memory-aware allocation (paper 003 §5.3), shared by the schedulers that place jobs on nodes.

    Tracks the memory the placed processes hold on each node (``JobSpec.memory_mb`` per process; a
    stopped process keeps its memory). While the check is on (``memory_aware``, default true, and the
    owner told the policy its node memory through ``set_node_memory``), a process may go on a node only
    if it fits in that node's free memory, so a job that does not fit waits in the queue instead of
    making a node swap; a job larger than a whole node is rejected.
    """

    def __init__(self, policy: GlobalPolicy, scheduler: str) -> None:
        self.policy = policy
        params = policy.params
        self.aware = param_bool(params, "memory_aware", scheduler) if "memory_aware" in params else True
        self.used = [0.0] * policy.nodes
        self.held: dict[str, tuple[tuple[int, ...], float]] = {}  # job -> (nodes, MB per process)

    @property
    def capacity(self) -> float | None:
        """Memory of one node (MB) when the check is on, else None."""
        return self.policy.node_memory_mb if self.aware else None

    def never_fits(self, job: JobSpec) -> str | None:
        """Why ``job`` can never start on this cluster's nodes (a process bigger than a node), or None."""
        cap = self.capacity
        if cap is None or job.memory_mb <= cap:
            return None
        return (
            f"job {job.job_id} needs {job.memory_mb:g} MB of memory per process but a node has only "
            f"{cap:g} MB; it could never start without swapping"
        )

    def fits(self, node: int, job: JobSpec) -> bool:
        cap = self.capacity
        return cap is None or self.used[node] + job.memory_mb <= cap * (1 + 1e-12)

    def fitting(self, nodes: Iterable[int], job: JobSpec) -> list[int]:
        """The nodes of ``nodes`` (in their order) where one more process of ``job`` fits."""
        return [n for n in nodes if self.fits(n, job)]

    def take(self, job: JobSpec, nodes: Iterable[int]) -> None:
        """``job``'s processes now hold their memory on ``nodes`` (one entry per process)."""
        nodes = tuple(nodes)
        self.held[job.job_id] = (nodes, job.memory_mb)
        for n in nodes:
            self.used[n] += job.memory_mb

    def release(self, job_id: str) -> None:
        """``job_id`` ended: its memory is free again (nothing if it held none)."""
        nodes, mb = self.held.pop(job_id, ((), 0.0))
        for n in nodes:
            self.used[n] = max(0.0, self.used[n] - mb)


class FcfsQueue(GlobalPolicy):
    """An FCFS arrival queue in front of ``_schedule(now)``; jobs that can never fit are rejected at once."""

    queue: list[JobSpec]
    mem: NodeMemory

    def pending(self) -> int:
        return len(self.queue)

    def submit(self, now: float, job: JobSpec) -> list[GlobalAction]:
        reason = oversize_reason(job, self.nodes) or self.mem.never_fits(job)
        if reason is not None:
            return [Reject(job.job_id, reason)]
        self.queue.append(job)
        return self._schedule(now)

    def _schedule(self, now: float) -> list[GlobalAction]:  # pragma: no cover - interface
        raise NotImplementedError


class BatchGlobal(FcfsQueue):
    """FCFS queue; the head blocks unless EASY backfilling lets a later job through."""

    def __init__(self, nodes: int, params: Mapping[str, Any], seed: int = 0) -> None:
        super().__init__(nodes, params, seed)
        self.backfill = param_bool(self.params, "backfill", "batch")
        self.packing = param_bool(self.params, "packing", "batch")
        self.mem = NodeMemory(self, "batch")
        self.rng = random.Random(seed)
        self.free: set[int] = set(range(nodes))
        self.queue: list[JobSpec] = []
        # job_id -> (nodes, expected end); end is inf when the job gave no estimate
        self.running: dict[str, tuple[tuple[int, ...], float]] = {}

    def finished(self, now: float, job_id: str) -> list[GlobalAction]:
        placed = self.running.pop(job_id, None)
        if placed is not None:
            self.free.update(placed[0])
        else:  # ended while still queued (killed, failed)
            self.queue = [j for j in self.queue if j.job_id != job_id]
        return self._schedule(now)

    # ----------------------------------------------------------------------------------------------------

    def _allocate(self, candidates: Iterable[int], size: int) -> tuple[int, ...]:
        if self.packing:
            return pack(candidates, size)
        return tuple(sorted(self.rng.sample(sorted(candidates), size)))

    def _start(self, now: float, job: JobSpec, nodes: tuple[int, ...]) -> Start:
        self.free.difference_update(nodes)
        end = now + job.estimate if job.estimate is not None else math.inf
        self.running[job.job_id] = (nodes, end)
        return Start(job.job_id, nodes)

    def _schedule(self, now: float) -> list[GlobalAction]:
        actions: list[GlobalAction] = []
        while self.queue and self.queue[0].size <= len(self.free):
            job = self.queue.pop(0)
            actions.append(self._start(now, job, self._allocate(self.free, job.size)))
        if self.backfill and len(self.queue) > 1:
            actions.extend(self._backfill(now))
        return actions

    def _reservation(self, now: float) -> tuple[float, set[int]]:
        """EASY: the earliest time the head can start by the running jobs' estimates, and the nodes it
        will take then. Jobs that overran their estimate are taken to end now."""
        head = self.queue[0]
        avail = set(self.free)
        shadow = now
        freed_later: set[int] = set()
        for _job_id, (nodes, end) in sorted(self.running.items(), key=lambda kv: (kv[1][1], kv[0])):
            if len(avail) >= head.size:
                break
            shadow = max(shadow, end)
            avail.update(nodes)
            freed_later.update(nodes)
        if self.packing:
            reserved = set(pack(avail, head.size))
        else:
            # Nodes that are busy now cannot be backfilled anyway: reserving them first leaves the
            # most free nodes to later jobs.
            order = sorted(freed_later) + sorted(self.free)
            reserved = set(order[: head.size])
        return shadow, reserved

    def _backfill(self, now: float) -> list[GlobalAction]:
        shadow, reserved = self._reservation(now)
        if math.isinf(shadow):
            return []  # the head waits on a job of unknown length: nothing may pass it
        actions: list[GlobalAction] = []
        for job in list(self.queue[1:]):
            if job.size > len(self.free):
                continue
            ends_in_time = job.estimate is not None and now + job.estimate <= shadow
            if ends_in_time:
                nodes = self._allocate(self.free, job.size)
            else:
                spare = self.free - reserved
                if job.size > len(spare):
                    continue
                nodes = self._allocate(spare, job.size)
            self.queue.remove(job)
            actions.append(self._start(now, job, nodes))
        return actions


class Batch(Scheduler):
    name = "batch"
    summary = "PBS-like FCFS space sharing, one job per node; optional EASY backfilling"
    global_policy = BatchGlobal
    local_policy = RunAll
    defaults = {"backfill": False, "packing": True}
    allocation_defaults = MEMORY_DEFAULTS
