"""A program kind that lives outside the testbed, as a third party's would: installed through the
``testbed.apps`` entry-point group (tests/e2e/test_plugins.py writes the entry point), written once, run
by both backends. Ranks pair up (0-1, 2-3, ...): the even rank computes, sends, waits for the answer;
the odd one waits, computes, answers; ``rounds`` times, reporting the rounds done."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Literal

from pydantic import Field
from testbed.apps.base import (
    WORK_UNIT_S,
    Compute,
    MessagingConfig,
    Op,
    ProgramKind,
    Progress,
    Recv,
    Reports,
    Send,
    SimContext,
)


class PingPongConfig(MessagingConfig):
    kind: Literal["pingpong"] = "pingpong"
    rounds: int = Field(5, ge=1, description="exchanges per pair")
    work: float = Field(10.0, ge=0, description="work units each side computes per round")
    nbytes: int = Field(64, ge=0, description="bytes per message")


def _peer(rank: int, size: int) -> int | None:
    peer = rank ^ 1
    return peer if peer < size else None


class PingPong(ProgramKind):
    name = "pingpong"
    summary = "pairs of ranks exchanging a message per round (a test plug-in)"
    Config = PingPongConfig
    reports = Reports(units=("rounds",))

    @classmethod
    def ideal_runtime(cls, cfg: PingPongConfig, cpu_rate: float = 1.0) -> float:
        return cfg.rounds * 2 * cfg.work * WORK_UNIT_S / cpu_rate

    @classmethod
    def run(cls, cfg: PingPongConfig, ctx) -> None:
        comm = ctx.connect()
        peer = _peer(ctx.rank, ctx.size)
        payload = b"p" * cfg.nbytes

        def burn():
            t0 = time.thread_time()
            while time.thread_time() - t0 < cfg.work * WORK_UNIT_S:
                pass

        for i in range(cfg.rounds):
            if peer is not None and ctx.rank % 2 == 0:
                burn()
                comm.send(peer, payload)
                comm.recv(peer)
            elif peer is not None:
                comm.recv(peer)
                burn()
                comm.send(peer, payload)
            ctx.progress("rounds", i + 1)

    @classmethod
    def model(cls, cfg: PingPongConfig, ctx: SimContext) -> Iterator[Op]:
        peer = _peer(ctx.rank, ctx.size)
        work = cfg.work * WORK_UNIT_S
        for i in range(cfg.rounds):
            if peer is not None and ctx.rank % 2 == 0:
                yield Compute(work)
                yield Send((peer,), cfg.nbytes, 0)
                yield Recv(1, 0)
            elif peer is not None:
                yield Recv(1, 0)
                yield Compute(work)
                yield Send((peer,), cfg.nbytes, 0)
            yield Progress("rounds", i + 1)
