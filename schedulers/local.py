"""Native local scheduling (NLS): every process may run and each node's OS shares its CPU (docs/policies.md,
"Coscheduling mechanisms" and "Batch, allocation and energy"). The only global decision is where a job goes
and whether a node already holds ``mpl`` processes, and (memory-aware allocation,
:class:`~testbed.schedulers.placement.NodeMemory`) whether the job's processes fit in the free memory of the
nodes."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import model_validator

from .base import GlobalAction, JobSpec, RunAll, Scheduler, Start
from .params import PolicyParams, param, rule_error
from .placement import FcfsQueue, MemoryAwareParams, NodeMemory, least_loaded


class NlsParams(PolicyParams):
    """Native local scheduling's allocation, shared by local and the coscheduling family."""

    mpl: int = param(3, "most processes per node", noun="a whole number of processes per node", ge=1)
    packing: bool = param(True, "least-loaded nodes, a contiguous block first (false: random nodes)")


class LocalGlobal(FcfsQueue):
    params: NlsParams

    def __init__(self, nodes: int, params: NlsParams, seed: int = 0) -> None:
        super().__init__(nodes, params, seed)
        self.mpl = self.params.mpl
        self.packing = self.params.packing
        self.mem = NodeMemory(self)
        self.rng = random.Random(seed)
        self.load = [0] * nodes
        self.queue: list[JobSpec] = []
        self.placed: dict[str, tuple[int, ...]] = {}

    def max_jobs_per_node(self) -> int:
        return self.mpl

    def finished(self, now: float, job_id: str) -> list[GlobalAction]:
        nodes = self.placed.pop(job_id, None)
        if nodes is None:
            self.queue = [j for j in self.queue if j.job_id != job_id]
        else:
            for n in nodes:
                self.load[n] -= 1
            self.mem.release(job_id)
        return self._schedule(now)

    def _schedule(self, now: float) -> list[GlobalAction]:
        actions: list[GlobalAction] = []
        while self.queue:
            job = self.queue[0]
            eligible = [
                n
                for n in range(self.nodes)
                if self.load[n] < self.mpl and n not in self.down and self.mem.fits(n, job)
            ]
            if len(eligible) < job.size:
                break  # FCFS: the head blocks the queue (also while its memory does not fit)
            if self.packing:
                nodes = least_loaded(self.load, eligible, job.size)
            else:
                nodes = tuple(sorted(self.rng.sample(eligible, job.size)))
            self.queue.pop(0)
            for n in nodes:
                self.load[n] += 1
            self.mem.take(job, nodes)
            self.placed[job.job_id] = nodes
            actions.append(Start(job.job_id, nodes))
        return actions


class LocalParams(NlsParams, MemoryAwareParams):
    memory_pool: float | None = param(
        None,
        "paper 004's parallel memory pool M_D as a fraction of the smallest node's memory: processes that "
        "share a node may hold at most M_D = memory_pool x min_i(M_i) together (a process alone, its node's "
        "memory); null: no pool. Needs memory_aware and cluster memory",
        noun="a fraction",
        gt=0,
        le=1,
    )
    pool_oversize: Literal["alone", "reject"] = param(
        "alone",
        "a job whose process needs more than M_D (memory_pool): 'alone' runs it alone on its nodes; "
        "'reject' refuses it at submission (paper 004's Wrk2 admits only jobs that fit in M_D)",
    )

    @model_validator(mode="after")
    def _reject_needs_a_pool(self):
        # Without a pool there is no M_D to compare with, so 'reject' would silently admit everything.
        if self.pool_oversize == "reject" and self.memory_pool is None:
            raise rule_error(
                "pool_oversize",
                "rejects a job larger than M_D = memory_pool x the smallest node's memory, so it needs "
                "memory_pool; set memory_pool or remove pool_oversize",
            )
        return self


class Local(Scheduler):
    name = "local"
    summary = "native local scheduling: up to mpl processes per node, the OS shares each CPU"
    global_policy = LocalGlobal
    local_policy = RunAll
    Params = LocalParams
