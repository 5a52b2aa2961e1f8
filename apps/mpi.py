"""The ``mpi`` program kind: a user's own, unmodified mpi4py program on the emulated cluster
(docs/architecture.md, "MPI programs").

``app: {kind: mpi, program: path/to/prog.py, args: [...]}``: one MPI rank per allocated node (the job's
``size``), plus the job's head process on the head node: the job's process manager (apps/mpi_pmi.py).

A rank is an ordinary worker: the node agent forks it from the node's fork server inside the node's
envelope, so it is there from its first instruction, and it is the agent's own child, under its control
like any worker (stop and continue, nice, CPU from the kernel, exit report, kill). The worker body
(:func:`_rank`) joins tbcomm, gets the PMI server's address from the head, connects to it, hands the
connection to MPICH (``PMI_FD``, ``PMI_RANK``, ``PMI_SIZE``), arranges for MPI, once the program
initialises it, to mirror its messages on the emulated links (apps/mpi_wrap.py), then runs the program
as ``__main__`` with ``sys.argv`` = ``[program, *args]``.

Failures, each one line naming the rank: the program raises (its exception), exits non-zero, or calls
MPI_Abort (the head names the rank, code and message); a rank that never reaches MPI_Init within
``init_timeout_s`` (the head says which); a rank that dies (the agent's exit report; the others fail as
peers of it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from testbed.apps import speed
from testbed.apps.base import (
    TAG_BARRIER,
    Collective,
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
from testbed.apps.environ import MPICH_NO_LOCAL, JobEnv, NodeEnv
from testbed.apps.reports import COMPUTE_UNIT, MPI_CPU_UNIT, SPIN_CPU_UNIT
from testbed.schedulers.inputs import cut_path

if getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", "").endswith(
    "mechanism.forkserver"
):
    # Imported by a node's fork server (it preloads the run's kinds): MPI's library is loaded there once,
    # not by every rank (apps/mpi_wrap.py, preload_mpi).
    from testbed.apps.mpi_wrap import preload_mpi

    preload_mpi()

#: The tbcomm tag of the head's message telling each rank where the PMI server listens.
TAG_PMI = 0
#: Each rank's running count of the collectives of COMM_WORLD it has completed (apps/mpi_wrap.py), as
#: barriers are the synthetic program's; the first report, 0, is sent when MPI_Init has returned (its
#: PROGRESS event's time marks the end of the job's start-up: benchmarks/mpi_bench.py, "start").
COLLECTIVES_UNIT = "collectives"


#: CPU a rank spends on each message the mirror carries (apps/mpi_wrap.py), beyond what its trace records
#: (the CPU between MPI calls): LogGP's overhead o, which the replay charges per send and per receive, with
#: a part per byte on the send. Measured by ``python benchmarks/mpi_bench.py --only msgcpu --rounds 1000``
#: (2 nodes, TDF 1, ideal link, 2-core host, quiet): 24.5, 31.2 and 61.7 us per message sent or received
#: at 1 B, 24 KB and 160 KB. Each message is a send and a receive, so the per-byte part is the slope
#: twice, on the send.
MESSAGE_CPU_S = 24e-6
MESSAGE_CPU_PER_BYTE_S = 0.46e-9
#: CPU a rank spends inside an MPI collective per byte of the data it hands it (the trace's ``nbytes``),
#: beyond the mirror's barrier: MPI moving (and reducing) the data, which the trace's CPU between calls
#: leaves out. Measured by ``python benchmarks/mpi_bench.py --only collcpu`` (plain ``mpiexec -n 2``, 1, 4
#: and 16 MB, median over the sizes of 3 runs; host loaded): Alltoall 0.115 ns/B, Allreduce 0.216 ns/B,
#: against 0.03-0.10 ns/B for a plain copy of the same bytes. NAS FT.A on 4 ranks hands its 8 Alltoalls
#: 32 MB each a rank: 31 ms of a rank's 0.62 s.
COLLECTIVE_CPU_PER_BYTE_S = 0.115e-9
REDUCTION_CPU_PER_BYTE_S = 0.216e-9


def collective_cpu_s(op: str, nbytes: int) -> float:
    """The CPU the replay charges a collective ``op`` (mpi4py's name, lower case) handed ``nbytes``."""
    reduces = "reduce" in op or "scan" in op
    return nbytes * (REDUCTION_CPU_PER_BYTE_S if reduces else COLLECTIVE_CPU_PER_BYTE_S)


def message_cpu_s(sent_bytes: int | None = None) -> float:
    """The CPU the replay charges a send of ``sent_bytes`` (None: a receive)."""
    return MESSAGE_CPU_S + (sent_bytes or 0) * MESSAGE_CPU_PER_BYTE_S


class ModelConfig(MessagingConfig):
    """A program the simulator replays from a measured model: a user's traced program or a NAS kernel."""

    compute_scale: float = Field(
        1.0,
        gt=0,
        le=100,  # a calibration of the same program on another host, not another program
        description="the simulator replays the model's CPU between MPI calls times this (1: as recorded, "
        "or as cluster.host_speed_s scales it): a calibration for a host whose program runs at another "
        "speed than the host speed figure says; real processes and the job's estimate ignore it",
    )
    mpi_cpu_scale: float = Field(
        1.0,
        gt=0,
        le=1000,  # paper003's runs: 1.5-2.4 for CG's messages, up to 35 for EP's few collectives
        description="the simulator charges the CPU of each message and collective (the MPI mirror's and "
        "MPI's own, measured apart: apps/mpi.py MESSAGE_CPU_S) times this: a calibration for runs whose "
        "ranks spent another amount on them (their mpi_cpu_s reports); real processes ignore it",
    )


class MpiConfig(ModelConfig):
    kind: Literal["mpi"] = "mpi"
    program: str = Field(..., description="the mpi4py program (.py); relative to the scenario file's folder")
    args: tuple[str, ...] = Field((), description="its command-line arguments (sys.argv[1:])")
    estimate_s: float = Field(
        60.0, gt=0, description="emulated seconds the job takes alone (what batch policies backfill with)"
    )
    init_timeout_s: float = Field(
        120.0,
        gt=0,
        description="emulated s every rank has to reach MPI_Init once the job starts; else the job fails",
    )

    @field_validator("args", mode="before")
    @classmethod
    def _strings(cls, v):
        if isinstance(v, list | tuple):
            return tuple(str(a) for a in v)
        return v


class Mpi(ProgramKind):
    name = "mpi"
    summary = "a user's own mpi4py program (MPICH): one rank per node, each under its node's control"
    Config = MpiConfig
    #: The head (on the head node, outside every policy's view) is the job's PMI server.
    head = True
    measured_model = True
    reports = Reports((COLLECTIVES_UNIT, COMPUTE_UNIT, MPI_CPU_UNIT, SPIN_CPU_UNIT))

    @classmethod
    def largest_message(cls, cfg: MpiConfig, size: int) -> int | None:
        return None  # the program's own: known only once it runs

    @classmethod
    def ideal_runtime(cls, cfg: MpiConfig, cpu_rate: float = 1.0) -> float:
        return cfg.estimate_s

    @classmethod
    def problems(cls, cfg: MpiConfig, nodes: int, cpu_rate: float) -> list[tuple[str, str]]:
        p = Path(cfg.program)
        try:
            found = p.is_file()
        except OSError as exc:
            # A path the OS cannot look up (longer than it allows): one line, not a traceback.
            why = (exc.strerror or str(exc)).lower()
            return [("program", f"the system refuses the path: {why}; give the path of your mpi4py program")]
        if not found:
            return [
                (
                    "program",
                    f"no file {cut_path(str(p))}; give the path of your mpi4py program (.py)",
                )
            ]
        return []

    # -- real processes --------------------------------------------------------------------------------

    @classmethod
    def run(cls, cfg: MpiConfig, ctx) -> None:
        if ctx.rank == ctx.size - 1:
            _head(cfg, ctx)
        else:
            _rank(cfg, ctx)

    # -- simulator -------------------------------------------------------------------------------------

    @classmethod
    def model(cls, cfg: MpiConfig, ctx: SimContext) -> Iterator[Op]:
        """The program's trace, recorded on real processes the first time (apps/mpi_trace.py), replayed:
        computes, sends and receives (a receive matches the source and tag it matched when recorded:
        both are in the simulator's tag), and each collective as a barrier through rank 0 then the CPU
        that MPI spends on its data (:func:`collective_cpu_s`), between its enter and leave notices, as
        the mirrored run does (apps/mpi_wrap.py). Each send and receive, the barriers' too, also costs
        the CPU the mirror spends on it (:func:`message_cpu_s`)."""
        n = ctx.size - 1
        if ctx.rank == n:
            return  # the head: the process manager does nothing the simulator models
        ranks = cls.trace(cfg, n)
        # Every CPU figure here is this host's at the recording (the message costs too): another host's,
        # where the simulator is told its speed and the trace was stamped with its own (apps/speed.py).
        f = speed.scale(ctx.host_speed_s, cls.trace_speed(cfg, n))
        # A calibration of the program's own compute (what its ranks report as compute_s) moves that alone;
        # one of its calls' CPU (what they report as mpi_cpu_s) moves the messages' and collectives'.
        yield from _replay(ranks[ctx.rank], ctx.rank, n, f * cfg.compute_scale, f * cfg.mpi_cpu_scale)

    @classmethod
    def trace(cls, cfg: MpiConfig, size: int) -> list[list]:
        """Each rank's operations, as apps/mpi_trace.py records them, for ``size`` ranks."""
        from testbed.apps.mpi_trace import load_or_record

        return load_or_record(cfg.program, cfg.args, size)

    @classmethod
    def trace_speed(cls, cfg: MpiConfig, size: int) -> float | None:
        """The host's speed (apps/speed.py) when :meth:`trace` was recorded, or None if not stamped."""
        from testbed.apps.mpi_trace import recorded_speed

        return recorded_speed(cfg.program, cfg.args, size)


def _replay(ops: list[list], rank: int, n: int, fc: float, fm: float) -> Iterator[Op]:
    """Rank ``rank`` of ``n``'s recorded ``ops`` as the simulator's operations, its compute times ``fc``
    and the CPU of its messages and collectives (:func:`message_cpu_s`, :func:`collective_cpu_s`) times
    ``fm``."""
    done = 0
    for op in ops:
        what = op[0]
        if what == "c":
            yield Compute(op[1] * fc)
        elif what == "s":
            yield Compute(message_cpu_s(op[2]) * fm)
            yield Send((op[1],), op[2], _sim_tag(rank, op[3]))
        elif what == "r":
            yield Recv(1, _sim_tag(op[1], op[2]))
            yield Compute(message_cpu_s() * fm)
        elif what == "k":
            yield Collective(op[1], True)
            if n > 1:
                yield from _barrier(rank, n, fm)
            yield Compute(collective_cpu_s(op[1], op[2]) * fm)  # inside: MPI's work on the data
            yield Collective(op[1], False)
            done += 1
            yield Progress(COLLECTIVES_UNIT, done)


def mpi_cpu_s(ops: list[list], rank: int, n: int) -> float:
    """The CPU the replay charges rank ``rank`` of ``n`` for its recorded ``ops``' messages and
    collectives, at the recording host's speed: what the rank's ``mpi_cpu_s`` report stands beside."""
    return sum(op.cpu_s for op in _replay(ops, rank, n, 0.0, 1.0) if type(op) is Compute)


def _barrier(rank: int, n: int, f: float = 1.0) -> Iterator[Op]:
    """The mirror's barrier among ``n`` ranks, linear through rank 0, with each message's CPU (times
    ``f``, the host's speed against the recording's)."""
    if rank == 0:
        yield Recv(n - 1, TAG_BARRIER)
        yield Compute((n - 1) * (message_cpu_s() + message_cpu_s(0)) * f)  # n - 1 arrivals and releases
        yield Send(tuple(range(1, n)), 0, TAG_BARRIER)
    else:
        yield Compute(message_cpu_s(0) * f)
        yield Send((0,), 0, TAG_BARRIER)
        yield Recv(1, TAG_BARRIER)
        yield Compute(message_cpu_s() * f)


#: A simulated message's tag says its source too: the simulator's receives match by tag alone.
_TAG_SPAN = 1 << 20


def _sim_tag(src: int, tag: int) -> int:
    return src * _TAG_SPAN + (tag % _TAG_SPAN)


def _head(cfg: MpiConfig, ctx) -> None:
    """The job's process manager: tells every rank where it listens, then serves PMI until each rank has
    finalised."""
    from testbed.apps.mpi_pmi import PmiFailure, PmiServer
    from testbed.apps.tbcomm import PeerGone
    from testbed.apps.worker import WorkerError

    n = ctx.size - 1
    host = (NodeEnv.from_env().node_nic or "127.0.0.1:0").rpartition(":")[0] or "127.0.0.1"
    server = PmiServer(n, host, cfg.init_timeout_s * ctx.tdf, kvsname=f"tb-{ctx.job}-{os.getpid()}")
    try:
        comm = ctx.connect()
        for r in range(n):
            comm.send(r, server.address.encode(), TAG_PMI)
        try:
            server.serve()
        except PmiFailure as exc:
            if exc.peer:
                raise PeerGone(str(exc)) from None
            raise WorkerError(str(exc)) from None
    finally:
        server.close()


#: The PMI socket must live as long as the process: MPICH holds its descriptor.
_PMI_SOCKET = []


def _rank(cfg: MpiConfig, ctx) -> None:
    import runpy
    import socket

    from testbed.apps import mpi_wrap
    from testbed.apps.tbcomm import PeerGone
    from testbed.apps.worker import EXIT_PEER_GONE

    comm = ctx.connect()  # returns at GO: what comes before is start-up
    head = ctx.size - 1
    host, _, port = comm.recv(head, TAG_PMI).decode().rpartition(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.set_inheritable(False)
    sock.sendall(f"cmd=tb_hello rank={ctx.rank}\n".encode())
    _PMI_SOCKET.append(sock)
    os.environ.update(PMI_FD=str(sock.fileno()), PMI_RANK=str(ctx.rank), PMI_SIZE=str(head))
    # Every rank is on a node of its own (PMI_process_mapping): MPICH needs no shared memory between
    # them, and the segments it makes anyway (/dev/shm/mpich_shm_*) outlive a rank that is killed.
    os.environ.setdefault(MPICH_NO_LOCAL, "1")
    if (mpi_wrap.link_note() or not comm._standing) and JobEnv.from_env().wait_mode in (
        "block",
        "spin-block",
    ):
        # The job waits by blocking (its scheme's wait mode) and its waits are tbcomm's (mirrored): what is
        # left inside MPI's own calls yields the CPU instead of busy-polling it (MPICH's ch4 polls
        # without pause by default: docs/measurements.md, "MPI"), as the scheme means the CPU to go to
        # others. Not where MPI runs direct: it costs a one-way message ~70 us here under load. Not
        # MPICH's "heavy" yield either (a sleep, not sched_yield): it added 70-100 us to every mirrored
        # message on an emulated link, whose data the mirror has already waited for.
        os.environ.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")
    mpi_wrap.install(
        comm,
        head,
        before_init=lambda: _ready(ctx, sock),
        on_init=lambda MPI: ctx.progress(COLLECTIVES_UNIT, 0),
    )
    sys.argv = [cfg.program, *cfg.args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(cfg.program)))
    try:
        runpy.run_path(cfg.program, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code not in (None, 0):
            _die(ctx, f"the program exited with {code!r}")
    except PeerGone as exc:
        # The mirror's send or receive found another node's NIC gone: a consequence of that node's end,
        # whose cause the coordinator names (an exit 1 here was taken for the cause, and a killed node's
        # job failed naming this rank's broken pipe instead of the node).
        _die(ctx, f"PeerGone: {' '.join(str(exc).split())}", EXIT_PEER_GONE)
    except BaseException as exc:  # noqa: BLE001 - the job's one-line reason, then out
        _die(ctx, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    # mpi4py finalises MPI when the interpreter finalises (Py_AtExit), which a forked worker skips (it
    # ends with os._exit, testbed/mechanism/forkserver.py): finalise here, as `python prog.py` would.
    mirror = mpi_wrap._state.get("mirror")
    if mirror is not None:
        mirror.flush()
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and not MPI.Is_finalized():
        MPI.Finalize()
    # MPICH 5 finalises with a PMI barrier but sends no PMI "finalize": tell the head this rank is done
    # (MPICH no longer uses the connection), so that its end is not taken for a crash.
    sock.sendall(b"cmd=tb_finalized\n")


def _ready(ctx, sock) -> None:
    """Just before MPI_Init: waits until every rank of the job is there (apps/mpi_pmi.py says why)."""
    from testbed.apps.mpi_pmi import parse
    from testbed.apps.worker import EXIT_PEER_GONE

    sock.sendall(b"cmd=tb_ready\n")
    buf = b""
    while not buf.endswith(b"\n"):
        got = sock.recv(4096)
        if not got:
            _die(ctx, "the job's process manager went away before MPI_Init", EXIT_PEER_GONE)
        buf += got
    d = parse(buf.decode(errors="replace").strip())
    if d.get("cmd") != "tb_go":
        _die(
            ctx,
            f"the job failed before MPI_Init: {d.get('reason', buf.decode(errors='replace'))}",
            EXIT_PEER_GONE,
        )


def _die(ctx, reason: str, code: int = 1) -> None:
    """Fails this rank now with its one-line reason, without MPI_Finalize: finalising waits for every
    other rank (a PMI barrier), which wait for this one's messages, and the job would hang instead of
    failing."""
    print(f"mpi: job {ctx.job} rank {ctx.rank}: {reason}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    if ctx.comm is not None:
        ctx.comm.abort()
    os._exit(code)


__all__ = ["ModelConfig", "Mpi", "MpiConfig"]
