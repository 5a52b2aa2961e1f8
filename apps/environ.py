"""A worker's environment: every ``TB_*`` name the testbed sets for a worker process, who builds it and how
it is read back, in one place (docs/architecture.md, "A job's path", step 5).

Three parts, built where they are known and added up by the node agent:

* the **job's** (:class:`JobEnv`): its id, the rank, the ranks' NICs, how its processes wait and the
  memory each keeps resident, built per rank by ``Job.launch`` (testbed/core/jobs.py); the kind's own
  config travels beside it as JSON in ``TB_APP`` (apps/base.py, ``ProgramKind.launch``), and the
  coordinator adds when the policy started the job (:func:`start_env`, ``TB_START_S``);
* the **node's** (:class:`NodeEnv`): the run's clock (:class:`RunClock`), the run id, the node, its NIC
  and its folder for real I/O files, built by the node agent (testbed/emulator/agent.py);
* the **marks** the janitor finds a run's processes by (``TESTBED_RUN_ID``, ``TESTBED_NODE``), put
  there by the process layer (testbed/emulator/mechanism/process.py, testbed/janitor.py).

The worker harness (apps/worker.py) and tbcomm (apps/tbcomm.py) read them back with the ``from_env``
parsers here. A missing name that a parser needs is a KeyError naming it; a bad value, a ValueError.

Standard library only: a worker imports it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

#: The job's config, as JSON (apps/base.py, ``ProgramKind.launch``).
APP = "TB_APP"
# The job's part (JobEnv).
JOB = "TB_JOB"
RANK = "TB_RANK"
SIZE = "TB_SIZE"
NICS = "TB_NICS"
WAIT_MODE = "TB_WAIT_MODE"
SPIN_US = "TB_SPIN_US"
SEND_WAIT = "TB_SEND_WAIT"
MEMORY_MB = "TB_MEMORY_MB"
#: Real seconds a receive may wait before it gives up (tests only; unset: no limit).
RECV_TIMEOUT_S = "TB_RECV_TIMEOUT_S"
#: When the policy started the job, emulated seconds (the coordinator sets it).
START_S = "TB_START_S"
# The node's part (NodeEnv, RunClock).
TDF = "TB_TDF"
T0 = "TB_T0"
RUN_ID = "TB_RUN_ID"
NODE = "TB_NODE"
NODE_NIC = "TB_NODE_NIC"
IO_DIR = "TB_IO_DIR"
KEY = "TB_KEY"
#: The MPI kind's own: every PMI command to the head's log when "1" (apps/mpi_pmi.py), and the pid of a
#: trace recording's parent, whose ranks die with it (apps/mpi_trace.py).
PMI_DEBUG = "TB_PMI_DEBUG"
TRACE_PARENT = "TB_TRACE_PARENT"
#: MPICH's setting that makes every other rank a remote one: each rank is on a node of its own, and the
#: /dev/shm segments MPICH would make otherwise outlive a rank that is killed (apps/mpi.py).
MPICH_NO_LOCAL = "MPIR_CVAR_NOLOCAL"
LINK_LATENCY_S = "TB_LINK_LATENCY_S"
#: The node's CFS period, quota and cgroup files, for a spinning wait's guard: set by the node agent where
#: cluster.spin_reserve_us is above 0 (apps/spinguard.py, GuardSpec).
SPIN_GUARD = "TB_SPIN_GUARD"
LINK_BANDWIDTH_BPS = "TB_LINK_BANDWIDTH_BPS"
#: The run's frame bound (apps/wire.py frame_bound): tbcomm refuses to send a message beyond it.
MAX_FRAME_BODY = "TB_MAX_FRAME_BODY"
#: The marks of every process of a run, which the janitor looks for in /proc/<pid>/environ.
MARK_RUN_ID = "TESTBED_RUN_ID"
MARK_NODE = "TESTBED_NODE"


@dataclass(frozen=True)
class RunClock:
    """The run's clock as it travels to a worker: emulated time is (CLOCK_MONOTONIC - ``t0``) / ``tdf``
    (testbed/core/clock.py's ``Clock`` is this, with what the driver and the agents need besides)."""

    tdf: float
    t0: float  # CLOCK_MONOTONIC reading (real seconds) of emulated time 0

    def now(self) -> float:
        return (time.monotonic() - self.t0) / self.tdf

    def real_at(self, t_emu: float) -> float:
        """CLOCK_MONOTONIC reading at emulated time ``t_emu``."""
        return self.t0 + t_emu * self.tdf

    def to_env(self) -> dict[str, str]:
        return {TDF: repr(self.tdf), T0: repr(self.t0)}

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ):
        """TDF 1 and emulated time 0 now, where the environment does not say."""
        return cls(tdf=float(env.get(TDF, "1")), t0=float(env.get(T0, repr(time.monotonic()))))


@dataclass(frozen=True)
class JobEnv:
    """The job's part of one rank's environment."""

    job: str
    rank: int
    nics: tuple[str, ...]  # one NIC address per rank (the head's last): the job's processes in this start
    wait_mode: str = "block"
    spin_us: float = 300.0
    send_wait: str = "none"
    memory_mb: float = 0.0
    recv_timeout_s: float | None = None

    @property
    def size(self) -> int:
        return len(self.nics)

    def to_env(self) -> dict[str, str]:
        env = {
            JOB: self.job,
            RANK: str(self.rank),
            SIZE: str(self.size),
            NICS: ",".join(self.nics),
            WAIT_MODE: self.wait_mode,
            SPIN_US: repr(float(self.spin_us)),
            SEND_WAIT: self.send_wait,
            MEMORY_MB: repr(float(self.memory_mb)),
        }
        if self.recv_timeout_s is not None:
            env[RECV_TIMEOUT_S] = repr(float(self.recv_timeout_s))
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> JobEnv:
        """The job id, rank and NICs must be there; the rest defaults as in the fields."""
        timeout = env.get(RECV_TIMEOUT_S)
        return cls(
            job=env[JOB],
            rank=int(env[RANK]),
            nics=tuple(env[NICS].split(",")),
            wait_mode=env.get(WAIT_MODE, "block"),
            spin_us=float(env.get(SPIN_US, "300")),
            send_wait=env.get(SEND_WAIT) or "none",
            memory_mb=float(env.get(MEMORY_MB, "0") or 0),
            recv_timeout_s=float(timeout) if timeout else None,
        )


@dataclass(frozen=True)
class NodeEnv:
    """The node's part of a worker's environment: the same for every worker of the node."""

    clock: RunClock
    run_id: str | None = None
    node: int | None = None
    node_nic: str | None = None  # the worker's own NIC (None: the one its rank has in the job's NICs)
    io_dir: str | None = None  # absolute: the node's folder for real I/O files
    key: str | None = None  # the run's key, which a NIC asks of every connection (apps/wire.py with_key)
    link_latency_s: float = 0.0  # the emulated link into the node (emulated s, bytes/s; None: unlimited)
    link_bandwidth_Bps: float | None = None
    max_frame_body: int | None = None  # None: apps/wire.py's MAX_FRAME_BODY

    def to_env(self) -> dict[str, str]:
        env = self.clock.to_env()
        for name, value in ((RUN_ID, self.run_id), (NODE, self.node), (NODE_NIC, self.node_nic),
                            (IO_DIR, self.io_dir), (KEY, self.key),
                            (MAX_FRAME_BODY, self.max_frame_body)):  # fmt: skip
            if value is not None:
                env[name] = str(value)
        env[LINK_LATENCY_S] = repr(self.link_latency_s)
        env[LINK_BANDWIDTH_BPS] = "" if self.link_bandwidth_Bps is None else repr(self.link_bandwidth_Bps)
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> NodeEnv:
        """Nothing is required: a name not set (or empty) is None, the clock as :meth:`RunClock.from_env`."""
        node = env.get(NODE)
        return cls(
            clock=RunClock.from_env(env),
            run_id=env.get(RUN_ID) or None,
            node=int(node) if node else None,
            node_nic=env.get(NODE_NIC) or None,
            io_dir=env.get(IO_DIR) or None,
            key=env.get(KEY) or None,
            link_latency_s=float(env.get(LINK_LATENCY_S) or 0),
            link_bandwidth_Bps=float(env[LINK_BANDWIDTH_BPS]) if env.get(LINK_BANDWIDTH_BPS) else None,
            max_frame_body=int(env[MAX_FRAME_BODY]) if env.get(MAX_FRAME_BODY) else None,
        )


def start_env(started_s: float) -> dict[str, str]:
    """When the policy started the job (emulated seconds), for its processes."""
    return {START_S: repr(started_s)}


def start_s(env: Mapping[str, str]) -> float | None:
    """When the policy started the job, if the environment says (the Ray backend's coordinator does)."""
    value = env.get(START_S)
    return float(value) if value else None


def leftover_marks(run_id: str, node: int, job: str, rank: int) -> dict[str, str]:
    """What every process of rank ``rank`` of ``job`` on ``node`` carries in its environment, a worker
    started by exec and whatever it starts: the names and values the node agent looks for in /proc to
    kill what such a worker left behind."""
    return {MARK_RUN_ID: run_id, NODE: str(node), JOB: job, RANK: str(rank)}
