"""A node owner's interactive session (paper 004's local user) as a program kind: ``localuser``
(docs/policies.md, "Local users"; docs/architecture.md, "Local users: the owner's jobs").

A session is a one-process job that the decision core starts on its owner's node the moment it arrives,
bypassing the global policy (:meth:`ProgramKind.owner_node`); the node's local policy sees its process
as a local one (``ProcAdded.local``). It runs a duty cycle for ``session_s`` emulated seconds:

* every ``period_ms`` (100 emulated ms by default) it computes ``cpu_fraction`` of the period's worth of
  work at its node's rate (``cpu_fraction x period x node_rate`` CPU-seconds at rate 1.0, work units
  burnt against the thread's CPU clock, apps/work.py), then sleeps the rest of the period, a fixed think
  time: alone on its node one cycle takes exactly one period, slowed down the compute part stretches;
* its memory (``memory_mb``) is really allocated and every page written by the worker harness at start
  (apps/worker.py ``allocate``); each cycle rewrites one page in 16 (``ctx.touch``), so it stays resident;
* an Xwin session sends ``bytes_per_s`` (3 KB/s: 300 bytes per 100 ms cycle) as one UDP datagram per
  cycle to a socket it bound itself on 127.0.0.1, and drains that socket each cycle. UDP rather than a
  pipe or a Unix socket: a datagram to loopback is a real system call and a real copy, and a full
  receive buffer drops rather than blocks, so the sink can never stall the session's duty cycle.

Each session measures its own slowdown: the emulated time its cycles took against the same work alone at
its node's rate (its CPU work / rate + its sleeps = cycles x period). It reports both as running totals,
``session_elapsed_s`` and ``session_ideal_s`` (apps/reports.py), every ``REPORT_EVERY`` cycles and at the
end, so a session cut short by the run's end still has its slowdown so far; results take their ratio
(testbed/results/summary.py). The simulator's model yields the same cycles (Compute, Sleep, Progress)
and measures the same way.

Profiles (paper 004 §3): ``cpu`` 65 % CPU, 35 MB, no network; ``xwin`` 20 % CPU, 84 MB, 3 KB/s. Fields
given explicitly override the profile's.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator
from testbed.apps.base import (
    WORK_UNIT_S,
    AppConfig,
    Compute,
    Op,
    ProgramKind,
    Progress,
    Reports,
    SimContext,
    Sleep,
)
from testbed.apps.reports import SESSION_BYTES, SESSION_ELAPSED, SESSION_IDEAL


@dataclass(frozen=True)
class Profile:
    """A local user's load: the fraction of each period it computes, its resident memory, its trickle."""

    cpu_fraction: float
    memory_mb: float
    bytes_per_s: float


#: Paper 004 §3's two profiles.
PROFILES: dict[str, Profile] = {
    "cpu": Profile(cpu_fraction=0.65, memory_mb=35.0, bytes_per_s=0.0),
    "xwin": Profile(cpu_fraction=0.20, memory_mb=84.0, bytes_per_s=3000.0),
}
ProfileName = Literal["cpu", "xwin"]

#: The duty cycle's period, emulated ms (one compute burst and one think time per period).
PERIOD_MS = 100.0
#: The longest session, emulated s (about 116 days): far beyond any run, and short enough that its
#: cycles (100 per emulated s by default) stay countable.
MAX_SESSION_S = 1e7
#: The largest UDP datagram on loopback (65,535 less the IP and UDP headers): a period's bytes are one
#: datagram, and a larger one failed the session's send (EMSGSIZE; bytes_per_s 1e300 a MemoryError).
MAX_DATAGRAM = 65_507
#: Cycles between two reports of the session's running totals (1 emulated s at the default period).
REPORT_EVERY = 10


class LocalUserConfig(AppConfig):
    """A local user's session on node ``node``: a duty cycle of the profile's CPU fraction for
    ``session_s`` emulated seconds, its memory resident, Xwin's bytes to a loopback sink."""

    kind: Literal["localuser"] = "localuser"
    profile: ProfileName = Field("cpu", description="cpu (65 % CPU, 35 MB) or xwin (20 % CPU, 84 MB, 3 KB/s)")
    session_s: float = Field(
        60.0, gt=0, le=MAX_SESSION_S, description="the session's length alone, emulated seconds"
    )
    node: int | None = Field(None, ge=0, description="the owner's node, where the session runs (required)")
    cpu_fraction: float | None = Field(
        None, gt=0, le=1, description="fraction of each period spent computing; null: the profile's"
    )
    memory_mb: float | None = Field(None, ge=0, description="resident memory, MB; null: the profile's")
    bytes_per_s: float | None = Field(
        None, ge=0, description="bytes per emulated second to a loopback UDP sink; null: the profile's"
    )
    period_ms: float = Field(PERIOD_MS, ge=1, le=10_000, description="the duty cycle's period, emulated ms")
    node_rate: float | None = Field(
        None, gt=0, le=1, description="the node's CPU rate: filled from the cluster, leave it out"
    )

    @model_validator(mode="after")
    def _one_datagram(self):
        per_period = (self.bytes_per_s or 0.0) * self.period_ms / 1000.0
        if per_period > MAX_DATAGRAM:
            raise ValueError(
                f"bytes_per_s: {self.bytes_per_s:g} bytes a second are {per_period:.3g} bytes each period of "
                f"{self.period_ms:g} ms, sent as one datagram of at most {MAX_DATAGRAM}; lower bytes_per_s "
                "or period_ms"
            )
        return self


class LocalUser(ProgramKind):
    name = "localuser"
    summary = "a node owner's session (paper 004): a CPU duty cycle, resident memory, Xwin's trickle"
    Config = LocalUserConfig
    reports = Reports((SESSION_ELAPSED, SESSION_IDEAL, SESSION_BYTES))

    # -- scenario -> job -------------------------------------------------------------------------------

    @classmethod
    def resolve(cls, cfg: LocalUserConfig) -> LocalUserConfig:
        p = PROFILES[cfg.profile]
        return cfg.model_copy(
            update={
                "cpu_fraction": p.cpu_fraction if cfg.cpu_fraction is None else cfg.cpu_fraction,
                "memory_mb": p.memory_mb if cfg.memory_mb is None else cfg.memory_mb,
                "bytes_per_s": p.bytes_per_s if cfg.bytes_per_s is None else cfg.bytes_per_s,
            }
        )

    @classmethod
    def owner_node(cls, cfg: LocalUserConfig) -> int | None:
        return cfg.node

    @classmethod
    def fixed_size(cls, cfg: LocalUserConfig) -> int | None:
        return 1

    @classmethod
    def memory_mb(cls, cfg: LocalUserConfig, size: int) -> float:
        return float(cls.resolve(cfg).memory_mb)

    @classmethod
    def ideal_runtime(cls, cfg: LocalUserConfig, cpu_rate: float = 1.0) -> float:
        return cycles(cfg) * cfg.period_ms / 1000.0

    @classmethod
    def with_duration(cls, cfg: LocalUserConfig, duration_s: float, cpu_rate: float = 1.0) -> LocalUserConfig:
        return cfg.model_copy(update={"session_s": max(float(duration_s), cfg.period_ms / 1000.0)})

    @classmethod
    def bind(cls, cfg: LocalUserConfig, submit_time: float, cpu_rate: float = 1.0):
        # The workload plans a session at its owner node's rate: the work of a cycle is sized to it.
        return cls.resolve(cfg).model_copy(update={"node_rate": float(cpu_rate)}), {}

    @classmethod
    def default_class(cls, cfg: LocalUserConfig) -> str:
        return session_class(cfg.profile)

    @classmethod
    def problems(cls, cfg: LocalUserConfig, nodes: int, cpu_rate: float) -> list[tuple[str, str]]:
        if cfg.node is None:
            return [("node", f"required: the node whose owner runs the session (0..{nodes - 1})")]
        if cfg.node >= nodes:
            return [("node", f"node {cfg.node} does not exist (nodes 0..{nodes - 1}); pick one of them")]
        return []

    # -- real processes --------------------------------------------------------------------------------

    @classmethod
    def run(cls, cfg: LocalUserConfig, ctx) -> None:
        from testbed.apps.work import work

        c = cls.resolve(cfg)
        period = c.period_ms / 1000.0
        units = unit_per_cycle(c)
        think_real = (1.0 - c.cpu_fraction) * period * ctx.tdf
        out = sink = None
        payload = b""
        if c.bytes_per_s > 0:
            sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sink.bind(("127.0.0.1", 0))
            sink.setblocking(False)
            out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            out.connect(sink.getsockname())
            payload = b"\x78" * max(1, round(c.bytes_per_s * period))
        try:
            ctx.connect()  # returns at GO: what comes before is start-up, not the session's work
            n = cycles(c)
            sent = 0
            t0 = ctx.clock.now()
            for i in range(n):
                ctx.touch(i)
                work(units)
                if out is not None:
                    sent += out.send(payload)
                    _drain(sink)
                time.sleep(think_real)
                done = i + 1
                if done % REPORT_EVERY == 0 or done == n:
                    ctx.progress(SESSION_IDEAL, done * period)
                    ctx.progress(SESSION_ELAPSED, ctx.clock.now() - t0)
                    if out is not None:
                        ctx.progress(SESSION_BYTES, sent)
        finally:
            for s in (out, sink):
                if s is not None:
                    s.close()

    # -- simulator -------------------------------------------------------------------------------------

    @classmethod
    def model(cls, cfg: LocalUserConfig, ctx: SimContext) -> Iterator[Op]:
        c = cls.resolve(cfg)
        period = c.period_ms / 1000.0
        cpu_s = unit_per_cycle(c) * WORK_UNIT_S
        think = (1.0 - c.cpu_fraction) * period
        per_cycle = max(1, round(c.bytes_per_s * period)) if c.bytes_per_s > 0 else 0
        n = cycles(c)
        t0 = ctx.now()  # asked first when the process starts
        for i in range(n):
            yield Compute(cpu_s)
            yield Sleep(think)
            done = i + 1
            if done % REPORT_EVERY == 0 or done == n:
                yield Progress(SESSION_IDEAL, done * period)
                yield Progress(SESSION_ELAPSED, ctx.now() - t0)
                if per_cycle:
                    yield Progress(SESSION_BYTES, done * per_cycle)


def cycles(cfg: LocalUserConfig) -> int:
    """The session's duty cycles: its length in periods, at least one."""
    return max(1, round(cfg.session_s * 1000.0 / cfg.period_ms))


def unit_per_cycle(c: LocalUserConfig) -> float:
    """Work units computed per cycle: the CPU fraction of a period at the node's rate (a resolved config)."""
    rate = 1.0 if c.node_rate is None else c.node_rate
    return c.cpu_fraction * (c.period_ms / 1000.0) * rate / WORK_UNIT_S


def session_class(profile: str) -> str:
    """A session's job class by default (results break local slowdown down by it): ``cpu-user``,
    ``xwin-user``."""
    return f"{profile}-user"


def _drain(sink: socket.socket) -> None:
    """Reads what reached the sink (non-blocking), so its receive buffer never fills."""
    while True:
        try:
            sink.recv(65536)
        except BlockingIOError:
            return


__all__ = ["PERIOD_MS", "PROFILES", "LocalUser", "LocalUserConfig", "Profile", "cycles", "session_class"]
