"""Placement helpers shared by the schedulers that put jobs on nodes (batch, local and the coscheduling
family on top of it, gang, paired gang): node choice (PACKING's contiguous blocks, least-loaded nodes),
the FCFS arrival queue, the check for jobs that can never fit, and memory-aware allocation with its
parameter group."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from .base import GlobalAction, GlobalPolicy, JobSpec, Reject
from .params import PolicyParams, param


def contiguous_block(free: Sequence[int], size: int) -> tuple[int, ...] | None:
    """The lowest-numbered run of ``size`` consecutive node numbers in ``free`` (sorted, distinct), or
    None. ``free[i] - i`` is the same along a run and grows from one run to the next, so a window of
    ``size`` that is not one run is left for the start of the run holding its last node, found by
    bisection: a few steps a run, not one a node (10,000 nodes, 100,000 jobs: benchmarks/sim_scale.py)."""
    if size <= 0:
        return ()
    s = 0
    while s + size <= len(free):
        e = s + size - 1
        top = free[e] - e
        if free[s] - s == top:
            return tuple(free[s : e + 1])
        lo, hi = s + 1, e  # the run holding e starts in (s, e]
        while lo < hi:
            mid = (lo + hi) // 2
            if free[mid] - mid == top:
                hi = mid
            else:
                lo = mid + 1
        s = lo
    return None


def pack(free: Iterable[int], size: int) -> tuple[int, ...]:
    """PACKING: the first contiguous block that fits, else the lowest-numbered free nodes."""
    ordered = sorted(free)
    block = contiguous_block(ordered, size)
    return block if block is not None else tuple(ordered[:size])


def least_loaded(load: list[int], eligible: list[int], size: int) -> tuple[int, ...]:
    """The ``size`` least-loaded eligible nodes (ties: lowest index); a contiguous block of nodes with the
    same total load is preferred, the lowest such block first."""
    ranked = sorted(eligible, key=lambda n: (load[n], n))
    best = ranked[:size]
    target = sum(load[n] for n in best)
    ok = set(eligible)
    # Sliding window over node numbers: total load and count of ineligible nodes in the window.
    window_load = 0
    blocked = 0
    for last in range(len(load)):
        window_load += load[last]
        blocked += last not in ok
        first = last - size + 1
        if first > 0:
            window_load -= load[first - 1]
            blocked -= (first - 1) not in ok
        if first >= 0 and blocked == 0 and window_load == target:
            return tuple(range(first, last + 1))
    return tuple(sorted(best))


def oversize_reason(job: JobSpec, nodes: int) -> str | None:
    """Why a job can never run on a cluster of ``nodes`` uniprocessor nodes, or None if it can."""
    if job.size < 1:
        return f"job {job.job_id} asks for {job.size} processes; a job needs at least 1"
    if job.size > nodes:
        return (
            f"job {job.job_id} needs {job.size} nodes but the cluster has only {nodes}; it could never start"
        )
    return None


# --------------------------------------------------------------------------------------------------------
# Memory-aware allocation (paper 003 §5.3)


class MemoryAwareParams(PolicyParams):
    """The allocation parameter every placing scheduler accepts."""

    memory_aware: bool = param(
        True, "place a process only where it fits in the node's free memory (needs cluster.memory_mb)"
    )


class NodeMemory:
    """Memory-aware allocation (paper 003 §5.3), shared by the schedulers that place jobs on nodes.

    Tracks the memory the placed processes hold on each node (``JobSpec.memory_mb`` per process; a
    stopped process keeps its memory). While the check is on (``memory_aware``, default true, and the
    owner told the policy its nodes' memory: ``set_nodes``), a process may go on a node only if it fits in
    that node's free memory (each node its own, as ``cluster.groups`` may differ), so a job that does not
    fit waits in the queue instead of making a node swap; a job larger than every node is rejected.
    """

    def __init__(self, policy: GlobalPolicy) -> None:
        self.policy = policy
        # A scheduler declared with a plain defaults dict may lack the parameter (the check stays on), or
        # have it without its model being a MemoryAwareParams: read by name.
        self.aware = getattr(policy.params, "memory_aware", True)
        self.used = [0.0] * policy.nodes
        self.count = [0] * policy.nodes  # the processes placed on each node
        self.held: dict[str, tuple[tuple[int, ...], float]] = {}  # job -> (nodes, MB per process)
        # Paper 004's parallel memory pool (LocalParams.memory_pool): processes that share a node hold at
        # most M_D = memory_pool x the smallest node's memory together; one alone, its node's memory.
        self.pool = getattr(policy.params, "memory_pool", None) if self.aware else None
        # LocalParams.pool_oversize: what becomes of a job whose process alone exceeds M_D.
        self.reject_oversize = getattr(policy.params, "pool_oversize", "alone") == "reject"
        self._seen: tuple = ()  # the node_info ``alike`` was computed for
        self._alike = True

    @property
    def alike(self) -> bool:
        """True when every node's memory is checked alike (all the same, or no check): an empty node then
        holds any process that :meth:`never_fits` lets through."""
        info = self.policy.node_info
        if info is not self._seen:
            self._seen, self._alike = info, not self.aware or len({i.memory_mb for i in info}) <= 1
        return self._alike

    def capacity(self, node: int) -> float | None:
        """Memory of ``node`` (MB) when the check is on, else None."""
        return self.policy.node_info[node].memory_mb if self.aware else None

    def limit(self, node: int) -> float:
        """The most ``node`` may hold (its memory, with a rounding margin); infinite when unchecked."""
        cap = self.capacity(node)
        return math.inf if cap is None else cap * (1 + 1e-12)

    def never_fits(self, job: JobSpec) -> str | None:
        """Why ``job`` can never start on this cluster's nodes (a process bigger than every node, or than
        all but fewer nodes than it needs), or None."""
        caps = [self.capacity(0)] if self.alike else [self.capacity(n) for n in range(self.policy.nodes)]
        if None in caps:
            return None
        big = sum(1 for cap in caps if job.memory_mb <= cap)
        need = 1 if job.moldable else job.size
        if big == 0:
            which = "a node has" if self.alike else "the largest node has"
            return (
                f"job {job.job_id} needs {job.memory_mb:g} MB of memory per process but {which} only "
                f"{max(caps):g} MB; it could never start without swapping"
            )
        if self.alike:
            return None
        if big < min(need, len(caps)):
            return (
                f"job {job.job_id} needs {need} nodes with {job.memory_mb:g} MB of memory per process but "
                f"only {big} nodes have that much; it could never start without swapping"
            )
        return None

    def pool_mb(self) -> float:
        """M_D, the most that processes sharing a node may hold together (MB; infinite without a pool or
        with some node's memory unknown)."""
        smallest = self.policy.node_memory_mb
        if self.pool is None or smallest is None:
            return math.inf
        return smallest * self.pool * (1 + 1e-12)

    def over_pool(self, job: JobSpec) -> str | None:
        """Why ``job`` is refused by the pool (``pool_oversize: reject`` and a process larger than M_D), or
        None. Paper 004's Wrk2 runs only jobs whose tasks fit in M_D; admitted alone, such a job is the
        one CCS stops for as long as a local user keeps its node swapping (docs/measurements.md, "Paper
        004, five seeds")."""
        if not self.reject_oversize or job.memory_mb <= self.pool_mb():
            return None
        m_d = self.policy.node_memory_mb * self.pool
        return (
            f"job {job.job_id} needs {job.memory_mb:g} MB of memory per process, more than the parallel "
            f"memory pool M_D = {m_d:g} MB (memory_pool {self.pool:g}); pool_oversize is reject"
        )

    def fits(self, node: int, job: JobSpec) -> bool:
        limit = self.limit(node)
        if self.count[node]:
            limit = min(limit, self.pool_mb())
        return self.used[node] + job.memory_mb <= limit

    def fitting(self, nodes: Iterable[int], job: JobSpec) -> list[int]:
        """The nodes of ``nodes`` (in their order) where one more process of ``job`` fits."""
        mb, used = job.memory_mb, self.used
        if self.pool is not None:
            return [n for n in nodes if self.fits(n, job)]
        if self.alike:  # one limit for every node (the common case: no per-node call in the loop)
            top = self.limit(0)
            return list(nodes) if top == math.inf else [n for n in nodes if used[n] + mb <= top]
        limit = self.limit
        return [n for n in nodes if used[n] + mb <= limit(n)]  # fits()'s own comparison, term for term

    def take(self, job: JobSpec, nodes: Iterable[int]) -> None:
        """``job``'s processes now hold their memory on ``nodes`` (one entry per process)."""
        nodes = tuple(nodes)
        self.held[job.job_id] = (nodes, job.memory_mb)
        for n in nodes:
            self.used[n] += job.memory_mb
            self.count[n] += 1

    def release(self, job_id: str) -> None:
        """``job_id`` ended: its memory is free again (nothing if it held none)."""
        nodes, mb = self.held.pop(job_id, ((), 0.0))
        for n in nodes:
            self.used[n] = max(0.0, self.used[n] - mb)
            self.count[n] -= 1


class FcfsQueue(GlobalPolicy):
    """An FCFS arrival queue in front of ``_schedule(now)``; jobs that can never fit are rejected at once."""

    queue: list[JobSpec]
    mem: NodeMemory

    def node_up(self, now: float, node: int) -> list[GlobalAction]:
        super().node_up(now, node)
        return self._schedule(now)

    def submit(self, now: float, job: JobSpec) -> list[GlobalAction]:
        reason = oversize_reason(job, self.nodes) or self.mem.never_fits(job) or self.mem.over_pool(job)
        if reason is not None:
            return [Reject(job.job_id, reason)]
        self.queue.append(job)
        return self._schedule(now)

    def _schedule(self, now: float) -> list[GlobalAction]:  # pragma: no cover - interface
        raise NotImplementedError
