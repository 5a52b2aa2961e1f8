"""The synthetic program of paper 002, fig. 6 (docs/policies.md, "Paired gang"), as a program kind.

Each process: ``iterations`` x { compute ``gcomp`` work units; ``gio`` writes of ``io_bytes`` bytes to a
real file in the node's I/O folder, each padded with sleep to at least ``io_time_ms`` emulated ms;
barrier (all send to rank 0, rank 0 replies after hearing from all) }, reporting the barriers passed.

Paper 000's best-effort process: with ``pattern`` ring | neighbour | alltoall | rank0 the barrier is
replaced by ``msgs`` rounds of that point-to-point exchange (:func:`pattern_plan`) with ``msg_bytes``-byte
payloads, real sends and receives through tbcomm (no collective notices: they are not collectives),
reported as iterations. Round g of the run uses tag g % 2: a peer is never more than one round ahead (it
needs this rank's message of the round to finish it), so any-source receives with that tag take exactly
this round's messages. ``barrier: false`` drops the communication step altogether.

``profile`` (EP, BT, LU, MG, SP, CG, IS; apps/profiles.py) fills the fields it defines; fields given
explicitly override it. Memory is the job's (``memory_mb`` of the job entry or generator class): the
worker harness keeps it resident and each iteration rewrites a 1/16 stride of its pages.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Literal

from pydantic import Field, field_validator, model_validator
from testbed.apps import profiles
from testbed.apps.base import (
    TAG_BARRIER,
    WORK_UNIT_S,
    Collective,
    Compute,
    Lockstep,
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

#: The I/O file wraps around at this size: the writes stay real, the disk use stays bounded.
IO_FILE_CAP = 16 * 1024 * 1024

#: Steps of less CPU (seconds at rate 1) keep a job rank by rank in the simulator: there a step of at most
#: its EPS counts as done without CPU, which one piece would not reproduce (the margin up to 1 us is ours).
TINY_STEP_S = 1e-6

#: The simulated model reports its progress every this many iterations (and after the last): the real
#: worker reports each, but the simulator's log need not be that long.
PROGRESS_EVERY = 10

#: Per-iteration communication patterns (paper 000's best-effort process).
PATTERNS = ("barrier", "ring", "neighbour", "alltoall", "rank0")


def pattern_plan(pattern: str, rank: int, size: int) -> tuple[bool, tuple[int, ...], tuple[int, ...]]:
    """One round of a point-to-point ``pattern`` seen from ``rank`` of ``size``: (sends first, the ranks
    it sends one message to, the ranks it receives one message from). Sends are asynchronous (they go to
    the receiver's NIC, which always reads), so send-then-receive cannot deadlock; only rank 0 of
    ``rank0`` receives first (it replies once it has heard from all).

    ``ring``: to rank+1, from rank-1; ``neighbour``: to and from both neighbours on a 1-D ring (one peer
    when size is 2); ``alltoall``: to and from every other rank; ``rank0``: every rank sends to rank 0,
    which replies to each. ``barrier`` is not point to point (see :meth:`tbcomm.Comm.barrier`)."""
    if size <= 1:
        return True, (), ()
    if pattern == "ring":
        return True, ((rank + 1) % size,), ((rank - 1) % size,)
    if pattern == "neighbour":
        peers = tuple(sorted({(rank - 1) % size, (rank + 1) % size}))
        return True, peers, peers
    if pattern == "alltoall":
        others = tuple(r for r in range(size) if r != rank)
        return True, others, others
    if pattern == "rank0":
        if rank == 0:
            others = tuple(range(1, size))
            return False, others, others
        return True, (0,), (0,)
    raise ValueError(f"pattern {pattern!r} has no point-to-point plan; use one of {', '.join(PATTERNS[1:])}")


#: The most rounds a job may have: each is several events in the simulator and a barrier on real nodes,
#: and 10 million already is weeks of emulated time at the shortest round.
MAX_ITERATIONS = 10_000_000


class SyntheticConfig(MessagingConfig):
    """gcomp is in work units (1 unit = 1 ms of the worker thread's own CPU time at rate 1.0); each gio
    write takes at least io_time_ms emulated."""

    kind: Literal["synthetic"] = "synthetic"
    iterations: int = Field(10, ge=1, le=MAX_ITERATIONS, description="compute / I/O / communication rounds")
    gcomp: float = Field(100.0, ge=0, description="work units of CPU per iteration (1 unit = 1 ms at rate 1)")
    gio: int = Field(0, ge=0, description="real file writes per iteration")
    # At most the I/O file's size: each write's block is allocated whole (1e12 bytes was a MemoryError in
    # every worker of a real run, which validate and the simulator took).
    io_bytes: int = Field(8193, ge=1, le=IO_FILE_CAP, description="bytes per write")
    io_time_ms: float = Field(1.0, ge=0, description="emulated ms each write takes at least")
    barrier: bool = Field(True, description="false: no communication step at all")
    pattern: Literal["barrier", "ring", "neighbour", "alltoall", "rank0"] = Field(
        "barrier", description="communication per iteration: a barrier, or rounds of a point-to-point pattern"
    )
    msg_bytes: int = Field(0, ge=0, description="payload of each point-to-point message (not barrier)")
    msgs: int = Field(1, ge=0, description="rounds of the pattern per iteration")
    profile: str | None = Field(None, description="NAS-like profile: EP, BT, LU, MG, SP, CG or IS")

    @field_validator("profile")
    @classmethod
    def _profile_known(cls, v):
        return None if v is None else profiles.get(v).name  # ValueError naming the known profiles

    @model_validator(mode="after")
    def _consistent(self):
        f = Synthetic.resolve(self)
        if f.gcomp == 0 and f.gio == 0:
            raise ValueError("gcomp and gio are both 0: the job would do no work; set one of them above 0")
        if f.pattern == "barrier" and (f.msg_bytes != 0 or f.msgs != 1):
            raise ValueError(
                "pattern barrier sends one round of empty messages per iteration: leave msg_bytes at 0 and "
                "msgs at 1, or use pattern rank0 (the same shape with payloads and rounds)"
            )
        if not f.barrier and f.pattern != "barrier":
            raise ValueError(f"barrier false means no communication, but pattern is {f.pattern!r}; drop one")
        return self


def messages_per_iteration(cfg: SyntheticConfig, size: int) -> float:
    """Messages one process sends per iteration, averaged over the ``size`` ranks."""
    if not cfg.barrier or size <= 1:
        return 0.0
    if cfg.pattern == "barrier":
        return 2.0 * (size - 1) / size
    sent = sum(len(pattern_plan(cfg.pattern, r, size)[1]) for r in range(size))
    return cfg.msgs * sent / size


def messages_per_compute_s(cfg: SyntheticConfig, size: int) -> float:
    """Messages one process of a synthetic job (``cfg``, resolved) sends per emulated second of compute
    (rate 1): the intensity measure by which the profiles (apps/profiles.py) are ranked."""
    c = cfg.gcomp * WORK_UNIT_S
    return messages_per_iteration(cfg, size) / c if c > 0 else float("inf")


class Synthetic(ProgramKind):
    name = "synthetic"
    summary = "paper 002's compute / real file I/O / barrier program, or paper 000's point-to-point patterns"
    Config = SyntheticConfig
    reports = Reports(units=("barriers", "iterations"))

    @classmethod
    def resolve(cls, cfg: SyntheticConfig) -> SyntheticConfig:
        """The profile's fields, then the fields given explicitly (the profile is then spent)."""
        if cfg.profile is None:
            return cfg
        given = cfg.model_fields_set - {"kind", "profile"}
        fields = {k: v for k, v in profiles.get(cfg.profile).app_fields().items() if k not in given}
        return cfg.model_copy(update={**fields, "profile": None})

    @classmethod
    def compute_only(cls, cfg: SyntheticConfig, size: int) -> float | None:
        """Without barrier or writes the model is ``iterations`` computes on every rank, back to back
        (no Progress either: it reports only with a communication step)."""
        if cfg.barrier or cfg.gio:
            return None
        step = cfg.gcomp * WORK_UNIT_S
        if step < TINY_STEP_S:
            return None
        return cfg.iterations * step

    @classmethod
    def lockstep(cls, cfg: SyntheticConfig, size: int) -> Lockstep | None:
        """A barrier after each compute and no writes (a trace job's steps) is a lockstep model; the
        point-to-point patterns are not."""
        if not cfg.barrier or cfg.gio or cfg.pattern != "barrier":
            return None
        step = cfg.gcomp * WORK_UNIT_S
        if step < TINY_STEP_S:
            return None
        return Lockstep(cfg.iterations, step, size > 1, "barriers", PROGRESS_EVERY)

    @classmethod
    def ideal_runtime(cls, cfg: SyntheticConfig, cpu_rate: float = 1.0) -> float:
        """Runtime alone on dedicated nodes, ignoring message latency (emulated s)."""
        return cfg.iterations * (cfg.gcomp * WORK_UNIT_S / cpu_rate + cfg.gio * cfg.io_time_ms / 1000.0)

    @classmethod
    def largest_message(cls, cfg: SyntheticConfig, size: int) -> int | None:
        return cfg.msg_bytes

    @classmethod
    def with_duration(cls, cfg: SyntheticConfig, duration_s: float, cpu_rate: float = 1.0) -> SyntheticConfig:
        per_iter = cls.ideal_runtime(cfg.model_copy(update={"iterations": 1}), cpu_rate)
        iterations = max(1, round(duration_s / per_iter)) if per_iter > 0 else 1
        return cfg.model_copy(update={"iterations": iterations})

    @classmethod
    def has_own_length(cls, cfg: SyntheticConfig) -> bool:
        return cfg.profile is not None

    @classmethod
    def with_own_length(cls, cfg: SyntheticConfig, scale: float) -> SyntheticConfig:
        """The profile's own length (apps/profiles.py) times ``scale``."""
        iterations = max(1, round(profiles.get(cfg.profile).iterations() * scale))
        return cls.resolve(cfg).model_copy(update={"iterations": iterations})

    @classmethod
    def size_choices(cls, cfg: SyntheticConfig, lo: int, hi: int) -> list[int]:
        """A profile's process counts within [lo, hi] (NAS benchmarks run at set counts)."""
        return [] if cfg.profile is None else [s for s in profiles.get(cfg.profile).sizes if lo <= s <= hi]

    @classmethod
    def with_work(cls, cfg: SyntheticConfig, cpu_s: float, steps: int) -> SyntheticConfig:
        return cfg.model_copy(update={"iterations": steps, "gcomp": cpu_s / steps / WORK_UNIT_S})

    @classmethod
    def memory_mb(cls, cfg: SyntheticConfig, size: int) -> float:
        return 0.0 if cfg.profile is None else profiles.get(cfg.profile).memory_mb(size)

    @classmethod
    def default_class(cls, cfg: SyntheticConfig) -> str:
        if cfg.profile is not None:
            return cfg.profile  # a NAS-like profile's jobs are its class (paper 003's classes)
        if cfg.gio and cfg.gcomp == 0:
            return "io"
        if cfg.gio:
            return "mixed"
        return "compute"

    # -- real processes --------------------------------------------------------------------------------

    @classmethod
    def run(cls, cfg: SyntheticConfig, ctx) -> None:
        # Imported here: the scenario loader and the simulator use this module without them.
        from testbed.apps.work import work

        fd = -1
        if cfg.gio > 0:
            path = ctx.io_path(f"{ctx.job}.{ctx.rank}.io")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            comm = ctx.connect()  # returns at GO: nothing above counts as the job's work
            io_real_s = cfg.io_time_ms * ctx.tdf / 1000.0
            block = b"\xa5" * cfg.io_bytes
            written = 0
            p2p = cfg.pattern != "barrier"
            unit = "iterations" if not cfg.barrier or p2p else "barriers"
            plan = pattern_plan(cfg.pattern, comm.rank, comm.size) if p2p else None
            payload = b"\x5a" * cfg.msg_bytes
            rounds = 0
            for i in range(cfg.iterations):
                ctx.touch(i)
                work(cfg.gcomp)
                for _ in range(cfg.gio):
                    start = time.monotonic()
                    if written + cfg.io_bytes > IO_FILE_CAP:
                        os.lseek(fd, 0, os.SEEK_SET)
                        written = 0
                    os.write(fd, block)
                    written += cfg.io_bytes
                    left = start + io_real_s - time.monotonic()
                    if left > 0:
                        time.sleep(left)
                if p2p:
                    for _ in range(cfg.msgs):
                        _exchange(comm, plan, payload, rounds & 1)
                        rounds += 1
                elif cfg.barrier:
                    comm.barrier()
                ctx.progress(unit, i + 1)
        finally:
            if fd >= 0:
                os.close(fd)

    # -- simulator -------------------------------------------------------------------------------------

    @classmethod
    def model(cls, cfg: SyntheticConfig, ctx: SimContext) -> Iterator[Op]:
        rank, size = ctx.rank, ctx.size
        work = cfg.gcomp * WORK_UNIT_S
        io_s = cfg.io_time_ms / 1000.0
        p2p = cfg.barrier and cfg.pattern != "barrier"
        if p2p:
            sends_first, dests, srcs = pattern_plan(cfg.pattern, rank, size)
            rounds = 0
        unit = "iterations" if p2p else ("barriers" if cfg.barrier else None)
        for i in range(cfg.iterations):
            yield Compute(work)
            for _ in range(cfg.gio):
                yield Sleep(io_s)
            if p2p:
                if size > 1:
                    for _ in range(cfg.msgs):
                        tag = rounds & 1
                        rounds += 1
                        if sends_first:
                            yield Send(dests, cfg.msg_bytes, tag)
                        yield Recv(len(srcs), tag)
                        if not sends_first:
                            yield Send(dests, cfg.msg_bytes, tag)
            elif cfg.barrier and size > 1:
                yield Collective("barrier", True)
                if rank != 0:
                    yield Send((0,), 0, TAG_BARRIER)
                    yield Recv(1, TAG_BARRIER)
                else:
                    yield Recv(size - 1, TAG_BARRIER)
                    yield Send(tuple(range(1, size)), 0, TAG_BARRIER)
                yield Collective("barrier", False)
            # Every PROGRESS_EVERY-th and the last, like the real worker's reports but fewer.
            done = i + 1
            if unit is not None and (done % PROGRESS_EVERY == 0 or done == cfg.iterations):
                yield Progress(unit, done)


def _exchange(comm, plan: tuple[bool, tuple[int, ...], tuple[int, ...]], payload: bytes, tag: int) -> None:
    """One round of a point-to-point pattern: sends are asynchronous (to the receiver's NIC), so sending
    first cannot deadlock; each receive is one tbcomm receive in the job's wait mode."""
    sends_first, dests, srcs = plan
    if sends_first:
        for d in dests:
            comm.send(d, payload, tag)
    for _ in srcs:
        comm.recv(-1, tag)
    if not sends_first:
        for d in dests:
            comm.send(d, payload, tag)


__all__ = [
    "PATTERNS",
    "Synthetic",
    "SyntheticConfig",
    "messages_per_compute_s",
    "messages_per_iteration",
    "pattern_plan",
]
