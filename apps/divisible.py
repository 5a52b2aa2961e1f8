"""Paper 001's divisible-load task as a program kind (docs/policies.md, "Divisible load").

A task T = (A, sigma, D) runs on the n nodes its policy gives it (1..size: the job is moldable) plus a
head process on the cluster's head node (:attr:`ProgramKind.head`: the last rank, outside every policy's
view). The partition is the optimal one with setup costs (:func:`testbed.schedulers.divisible.shares`),
computed by every process from n, so policy, head and workers agree on it without a message.

* **Head.** Sends worker j (j = 0..n-1) its chunk of ``alpha_j * sigma`` units, ``unit_bytes`` real bytes
  a unit, through tbcomm, one chunk after another: chunk j occupies the head's link for ``ST + alpha_j *
  sigma * Cms`` emulated seconds and is handed over when that time is up, counted from the job's start
  (``TB_START_S``, apps/environ.py), so the head process's own start-up overlaps the first chunk (the head
  paces its own link; the NICs emulate the receiving side only, and a cluster's network latency and
  bandwidth come on top, so divisible scenarios leave them at 0 / unlimited). It then waits for each
  worker's finish notice, and reports the task's deadline (met when the last worker finished by A + D)
  and the bytes it sent.
* **Worker.** Receives its chunk, computes over its bytes (CRC-32 passes) for ``SC + alpha_j * sigma *
  Cps`` emulated seconds of CPU on its node (scaled to the node's CPU rate, so a slower node takes the
  same emulated time the policies planned with), reports the bytes it received and its finish time
  (``finish_s``, emulated), and sends the head an 8-byte finish notice (tag 1: not output, a notice).

In the simulator the same steps are operations: the head sleeps each chunk's link time and sends it, a
worker receives and computes. ``arrival_s`` and ``cpu_rate`` are set when the workload is built
(:meth:`Divisible.bind`), from the job's submission and the cluster.
"""

from __future__ import annotations

import math
import struct
import time
import zlib
from collections.abc import Iterator
from typing import Any, Literal

from pydantic import Field, model_validator
from testbed.apps.base import (
    Compute,
    MessagingConfig,
    Op,
    ProgramKind,
    Progress,
    Recv,
    Reports,
    Send,
    SimContext,
    Sleep,
)
from testbed.apps.reports import DEADLINES_MET, DEADLINES_MISSED, FINISH_UNIT

#: Tags: the data chunks, and the workers' finish notices to the head.
TAG_CHUNK, TAG_DONE = 0, 1
_F64 = struct.Struct("!d")
#: Bytes of a chunk each CRC pass takes at once: small enough that the CPU-time check stays close.
_SLICE = 16 * 1024
#: A task's deadline holds when it ends by A + D within this relative rounding.
DEADLINE_TOL = 1e-9


class DivisibleConfig(MessagingConfig):
    kind: Literal["divisible"] = "divisible"
    sigma: float = Field(..., gt=0, description="data size: units of data (the paper's sigma)")
    deadline_s: float = Field(..., gt=0, description="relative deadline D, emulated s after arrival")
    cms: float = Field(1.0, gt=0, description="emulated s to send one unit of data over a link (Cms)")
    cps: float = Field(1.0, gt=0, description="emulated s to compute one unit of data on a node (Cps)")
    setup_link: float = Field(0.0, ge=0, description="setup cost ST: emulated s per chunk sent")
    setup_compute: float = Field(0.0, ge=0, description="setup cost SC: emulated s per node's computation")
    unit_bytes: int = Field(1000, ge=1, le=1_000_000, description="real bytes per unit of data")
    arrival_s: float | None = Field(
        None,
        ge=0,
        description="arrival A (emulated s); set from the job submission when the workload is built",
    )
    cpu_rate: float = Field(
        1.0, gt=0, le=1.0, description="the nodes' CPU rate; set from the cluster when the workload is built"
    )

    @model_validator(mode="after")
    def _costs(self):
        from testbed.schedulers.divisible import cost_ratio_problem

        problem = cost_ratio_problem(self.cms, self.cps)
        if problem:
            raise ValueError(problem)
        return self


def load(cfg: DivisibleConfig):
    from testbed.schedulers.divisible import Load

    return Load(cfg.sigma, cfg.cms, cfg.cps, cfg.setup_link, cfg.setup_compute)


def plan(cfg: DivisibleConfig, n: int) -> tuple[list[float], list[int]]:
    """The shares alpha_1..alpha_n on ``n`` workers and each one's chunk in bytes. Beyond the fastest
    number of nodes (with setup costs, where the next share would not be positive) the extra workers get
    a share of 0: a policy of this family never gives that many, another (batch, gang) may."""
    from testbed.schedulers.divisible import fastest, shares

    used = fastest(load(cfg), n)
    alphas = shares(load(cfg), used) + [0.0] * (n - used)
    return alphas, [round(a * cfg.sigma * cfg.unit_bytes) for a in alphas]


def _link_s(cfg: DivisibleConfig, alpha: float) -> float:
    return cfg.setup_link + alpha * cfg.sigma * cfg.cms


def _cpu_s(cfg: DivisibleConfig, alpha: float) -> float:
    """CPU seconds at rate 1.0 that take ``SC + alpha * sigma * Cps`` emulated seconds on the node."""
    return (cfg.setup_compute + alpha * cfg.sigma * cfg.cps) * cfg.cpu_rate


def pace(
    cfg: DivisibleConfig, alphas: list[float], origin: float, now, sleep_until
) -> Iterator[tuple[int, float]]:
    """The head's link: yields (j, t) when chunk j is due to be handed over, at emulated time t, after
    sleeping until then (``sleep_until(t)``; ``now()`` reads the clock). The link starts at ``origin``,
    the job's start: the head process's own start-up (a testbed cost, not the model's) overlaps the first
    chunk's link time. Chunk j takes ``ST + alpha_j * sigma * Cms`` from the later of the previous chunk's
    due time and its real hand-over (a head that could not keep up delays the rest: the link is
    sequential); an empty chunk takes none."""
    t = origin
    for j, alpha in enumerate(alphas):
        if alpha > 0:
            t += _link_s(cfg, alpha)
            sleep_until(t)
        yield j, t
        t = max(t, now())


def _sleep_until(clock, t: float) -> None:
    left = clock.real_at(t) - time.monotonic()
    if left > 0:
        time.sleep(left)


def _payload(nbytes: int, seed: int) -> bytes:
    # Not all alike, so the workers' checksums are over real data; cheap to make (one pattern repeated).
    pattern = bytes((seed * 131 + i * 7) & 0xFF for i in range(251))
    return (pattern * (nbytes // 251 + 1))[:nbytes]


def digest(data: bytes, cpu_s: float) -> int:
    """CRC-32 passes over ``data`` until this thread has used ``cpu_s`` seconds of CPU (at least one
    pass): the worker's computation, real work over the bytes it received, as long as its Cps says."""
    view = memoryview(data)
    crc = 0
    t0 = time.thread_time()
    while True:
        for off in range(0, max(len(view), 1), _SLICE):
            crc = zlib.crc32(view[off : off + _SLICE], crc)
            if time.thread_time() - t0 >= cpu_s:
                return crc


class Divisible(ProgramKind):
    name = "divisible"
    summary = "paper 001: a head sends a divisible load's chunks one after another; workers compute them"
    Config = DivisibleConfig
    reports = Reports(units=("bytes", FINISH_UNIT, DEADLINES_MET, DEADLINES_MISSED))
    head = True

    @classmethod
    def bind(cls, cfg: DivisibleConfig, submit_time: float, cpu_rate: float = 1.0) -> tuple[Any, dict]:
        from testbed.schedulers.base import DivisibleLoad

        app = cfg.model_copy(update={"arrival_s": float(submit_time), "cpu_rate": float(cpu_rate)})
        task = DivisibleLoad(
            data_size=cfg.sigma,
            cms=cfg.cms,
            cps=cfg.cps,
            deadline=cfg.deadline_s,
            setup_link=cfg.setup_link,
            setup_compute=cfg.setup_compute,
        )
        return app, {"moldable": True, "divisible": task}

    @classmethod
    def largest_message(cls, cfg: DivisibleConfig, size: int) -> int | None:
        return math.ceil(cfg.sigma * cfg.unit_bytes)  # a chunk is a share (alpha <= 1) of the data

    @classmethod
    def ideal_runtime(cls, cfg: DivisibleConfig, cpu_rate: float = 1.0) -> float:
        # The policies size the task themselves; one node's time is the longest it can take.
        from testbed.schedulers.divisible import exec_time

        return exec_time(load(cfg), 1)

    @classmethod
    def default_class(cls, cfg: DivisibleConfig) -> str:
        return "divisible"

    # -- real processes ----------------------------------------------------------------------------------

    @classmethod
    def run(cls, cfg: DivisibleConfig, ctx) -> None:
        from testbed.apps.worker import WorkerError

        clock = ctx.clock
        workers = ctx.size - 1
        if workers < 1:
            raise WorkerError(
                f"a divisible task needs a head and at least one worker; got {ctx.size} rank(s)"
            )
        alphas, nbytes = plan(cfg, workers)
        if ctx.rank == workers:  # the head
            chunks = [_payload(nbytes[j], j) for j in range(workers)]
            comm = ctx.connect()
            origin = ctx.start_s if ctx.start_s is not None else clock.now()
            for j, _ in pace(cfg, alphas, origin, clock.now, lambda t: _sleep_until(clock, t)):
                comm.send(j, chunks[j], TAG_CHUNK)
            ctx.progress("bytes", sum(nbytes))
            last = max(_F64.unpack(comm.recv(tag=TAG_DONE))[0] for _ in range(workers))
            _report_deadline(cfg, ctx.progress, last)
        else:
            comm = ctx.connect()
            data = comm.recv(workers, TAG_CHUNK)
            if len(data) != nbytes[ctx.rank]:
                raise WorkerError(f"chunk of {len(data)} bytes, expected {nbytes[ctx.rank]}")
            ctx.progress("bytes", len(data))
            done = clock.now()
            if alphas[ctx.rank] > 0:
                digest(data, _cpu_s(cfg, alphas[ctx.rank]))
                done = clock.now()
                ctx.progress(FINISH_UNIT, done)
            comm.send(workers, _F64.pack(done), TAG_DONE)

    # -- simulator ---------------------------------------------------------------------------------------

    @classmethod
    def model(cls, cfg: DivisibleConfig, ctx: SimContext) -> Iterator[Op]:
        workers = ctx.size - 1
        alphas, nbytes = plan(cfg, workers)
        if ctx.rank == workers:
            for j in range(workers):
                if alphas[j] > 0:
                    yield Sleep(_link_s(cfg, alphas[j]))
                yield Send((j,), nbytes[j], TAG_CHUNK)
            yield Progress("bytes", sum(nbytes))
            yield Recv(workers, TAG_DONE)
            # The notices carry no value here: the last one arrives when the last worker finished (plus
            # the network's latency, 0 in divisible scenarios).
            ok = met(cfg, ctx.now())
            yield Progress(DEADLINES_MET, 1.0 if ok else 0.0)
            yield Progress(DEADLINES_MISSED, 0.0 if ok else 1.0)
        else:
            yield Recv(1, TAG_CHUNK)
            yield Progress("bytes", nbytes[ctx.rank])
            if alphas[ctx.rank] > 0:
                yield Compute(_cpu_s(cfg, alphas[ctx.rank]))
                yield Progress(FINISH_UNIT, ctx.now())
            yield Send((workers,), 8, TAG_DONE)


def met(cfg: DivisibleConfig, finish: float) -> bool:
    """Whether a task whose last worker finished at ``finish`` met its deadline A + D."""
    due = (cfg.arrival_s or 0.0) + cfg.deadline_s
    return finish <= due + DEADLINE_TOL * max(1.0, abs(due))


def _report_deadline(cfg: DivisibleConfig, progress, finish: float) -> None:
    ok = met(cfg, finish)
    progress(DEADLINES_MET, 1.0 if ok else 0.0)
    progress(DEADLINES_MISSED, 0.0 if ok else 1.0)


__all__ = ["Divisible", "DivisibleConfig", "digest", "met", "pace", "plan"]
