"""A program kind with a head process (ProgramKind.head): one process more than the allocated nodes, on
the head node outside the policy's view, in the simulator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import pytest
from testbed.apps import registry
from testbed.apps.base import WORK_UNIT_S, Compute, MessagingConfig, ProgramKind, Recv, Send, SimContext
from testbed.schedulers.base import JobSpec
from testbed.schedulers.batch import Batch

from testbed.core import events as ev
from testbed.core.jobs import Job
from testbed.results import summary as results
from testbed.sim import simulate


class ScatterConfig(MessagingConfig):
    kind: Literal["scatter"] = "scatter"
    work: float = 100.0  # units per worker
    nbytes: int = 1_000_000


class Scatter(ProgramKind):
    """The head (last rank) sends each worker its chunk, one after another; each computes it."""

    name = "scatter"
    summary = "test: a head sends chunks"
    Config = ScatterConfig
    head = True

    @classmethod
    def ideal_runtime(cls, cfg, cpu_rate=1.0):
        return cfg.work * WORK_UNIT_S / cpu_rate

    @classmethod
    def model(cls, cfg: ScatterConfig, ctx: SimContext) -> Iterator:
        workers = ctx.size - 1
        if ctx.rank == workers:  # the head
            for w in range(workers):
                yield Send((w,), cfg.nbytes, 0)
        else:
            yield Recv(1, 0)
            yield Compute(cfg.work * WORK_UNIT_S)


@pytest.fixture
def scatter_kind(monkeypatch):
    targets = {**registry._targets(), "scatter": f"{__name__}:Scatter"}
    monkeypatch.setattr(registry, "_targets", lambda: targets)


def test_a_head_runs_on_the_head_node_beside_the_allocated_ones(scatter_kind):
    job = Job(JobSpec("s", 3, 0.0), ScatterConfig())
    assert job.processes == 4
    # 1 MB at 10 MB/s: 0.1 s per chunk on the link, sent one after another.
    events = simulate([job], Batch, {}, nodes=3, latency_s=0.0, bandwidth_Bps=1e7)
    started = [e for e in events if e["kind"] == ev.PROC_STARTED]
    assert [(e["rank"], e["node"]) for e in started] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert next(e for e in events if e["kind"] == ev.JOB_STARTED)["nodes"] == [0, 1, 2]  # the policy's view
    # The head's sends go out together (no acknowledgement wait): each chunk takes 0.1 s on its link, then
    # 0.1 s of compute; the job ends when all four processes have exited.
    finished = next(e for e in events if e["kind"] == ev.JOB_FINISHED)
    assert finished["t"] == pytest.approx(0.2)
    summary = results.summarize(
        events, results.RunFacts(3, 1.0, 1, 219.1, 18.968, 1.0, "modelled", "sim", "batch")
    )
    # Utilisation counts the three cluster nodes' CPU only: 3 x 0.1 s over 3 nodes x 0.2 s.
    assert summary["utilization"] == pytest.approx(0.5)
