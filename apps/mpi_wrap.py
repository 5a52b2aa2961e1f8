"""What the mpi kind puts around a user's mpi4py program, without changing it (docs/architecture.md, "MPI
programs"): every MPI message and collective of ``COMM_WORLD`` is mirrored by tbcomm, so that

* it takes the scenario's link (latency, bandwidth) between emulated nodes: a send first sends a
  tbcomm message to the receiver's NIC that declares the MPI message's size and carries none of its bytes
  (``Comm.send_sized``: the link transmits that many; MPI moves the data, so copying zeros through the
  relay would charge the ranks CPU that a real cluster's NIC spends instead), and a receive first waits
  for that message, so it completes no earlier than the emulated link delivers it;
* the node sees what the coscheduling schemes act on: each arrival, each receiver waiting (in the job's
  wait mode: spin, block, spin-block, as tbcomm waits) and each collective entered and left (HYBRID).

Mirroring is on where the run needs it: an emulated link (``cluster.network``), a node whose policy
acts on message events (the coscheduling family), or a job that waits by blocking (the default wait
mode): MPICH's waits poll, and under a node's CPU quota polling spends the quota the rank would compute
with. A job that spins (``wait_mode: spin``) on an ideal network under a policy that ignores messages
runs MPI direct, at its own speed, and only its collectives are counted. Then the real MPI call runs, and
moves the real data (MPICH's network module, between processes of this
host). A collective is a tbcomm barrier among the job's ranks (linear through rank 0: two link hops, as
tbcomm's own collectives), named after the MPI operation, then the MPI collective; the node hears that
the rank left it once MPI has returned, so a boost for the collective (HYBRID) covers MPI's work on the
data too.

Mechanism: ``mpi4py.MPI.COMM_WORLD`` is replaced, as the program imports ``mpi4py.MPI`` (an import hook:
MPI_Init runs then, with the program's own ``mpi4py.rc`` settings), by an instance of a Python
subclass of ``MPI.Intracomm`` on the same communicator, whose methods mirror then call the real ones
(``from mpi4py import MPI; MPI.COMM_WORLD`` and ``from mpi4py.MPI import COMM_WORLD`` both get it; its
``Dup`` returns the same subclass). Mirrored: the blocking point-to-point calls and ``Isend``, and the
blocking collectives (``_COLLECTIVES``). Not mirrored: communicators that are not congruent with
COMM_WORLD (``Split``, ``Create``: rank numbers differ), and every other call that moves data
(``_communicates``: nonblocking receives and collectives, persistent, buffered and ready sends, probes).
On an ideal network (no ``cluster.network``) these go straight to MPI; on an emulated link they fail the
rank with one line (:class:`NotOnTheLink`) rather than run on the host's ideal network. One-sided
operations are not checked.
"""

from __future__ import annotations

import os
import pickle
import statistics
import sys
import time

from testbed.apps.environ import NodeEnv
from testbed.apps.reports import COMPUTE_UNIT, MPI_CPU_UNIT, SPIN_CPU_UNIT

#: mpi4py's MPI.ANY_SOURCE / ANY_TAG are -1 / -1 in MPICH: the same as tbcomm's ANY.
ANY = -1
#: The MPI receive after its mirror's, on this host: 7.6-9 us a message (median; 1-byte ping-pong, 2 nodes,
#: `latency_us: 100`, docs/measurements.md "MPI over an emulated link"). The link's deliveries are made
#: early by its median over this many receives, at most MAX_EARLY_S (a receive that also waited for MPI's
#: data, a rendezvous, is not the wrapper's cost).
EARLY_WINDOW = 15
MAX_EARLY_S = 15e-6
#: tbcomm's barrier tag (negative: never matches a user tag).
_TAG_BARRIER = -2
#: MPI tags map to tbcomm tags one to one (both >= 0); MPI_ANY_TAG to tbcomm's ANY.

_state: dict = {}


def _nbytes(buf) -> int:
    """The bytes a buffer-spec send moves: ``buf``, ``[buf, type]``, ``[buf, count, type]``..."""
    if isinstance(buf, list | tuple):
        buf = buf[0] if buf else b""
    try:
        return memoryview(buf).nbytes
    except TypeError:
        return 0


def _pickled(obj) -> int:
    try:
        return len(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))
    except Exception:  # noqa: BLE001 - mpi4py will say what is wrong with it; the mirror is a header
        return 0


class ComputeClock:
    """A rank's main-thread CPU between its MPI calls: what a measured model records as the rank's compute
    (apps/mpi_trace.py), on the thread's own clock (the host's other load, and the time a node's quota
    holds the rank, do not count), from the clock's start to its last :meth:`lap`."""

    def __init__(self) -> None:
        self.mark = time.thread_time()  # when the previous call returned, or the call's last part began
        self.total = 0.0
        self.inside = 0.0  # CPU inside the calls, every part of each
        self.in_call = False  # lapped, not yet resumed

    def lap(self) -> float:
        """A call begins: the CPU since the previous one returned. A call noted in two parts (Sendrecv: its
        send, then its receive) counts the CPU before it once, and the CPU of its first part as inside
        the call: the mirror's relay of the send, or its wait for the send's acknowledgement, is not the
        program's. (The first part used to count as compute: NAS CG's ranks then reported their sends'
        relay, and under acked sends their spinning, as compute. Before that the CPU before the call
        counted twice: CG's model had 1.2-1.3 s per rank, 0.87-0.97 s measured whole.)"""
        now = time.thread_time()
        spent = now - self.mark
        self.mark = now
        if spent <= 0:
            return 0.0
        if self.in_call:
            self.inside += spent
            return 0.0
        self.in_call = True
        self.total += spent
        return spent

    def resume(self) -> None:
        """The call returned: MPI's CPU inside it is not compute (it is :attr:`inside`)."""
        now = time.thread_time()
        if self.in_call:
            self.inside += max(0.0, now - self.mark)
        self.in_call = False
        self.mark = now


class _Mirror:
    """The tbcomm side of one rank: ``tb`` is its tbcomm endpoint (ranks 0..n-1 are the MPI ranks, n the
    head), ``n`` the MPI world size, ``clock`` its compute (reported at the end, :meth:`flush`)."""

    def __init__(self, tb, n: int, clock: ComputeClock) -> None:
        self.tb = tb
        self.n = n
        self.clock = clock
        # Mirroring costs each message tbcomm's relay (tens of us against MPICH's few). It is needed for an
        # emulated link, for a node whose policy acts on message events (the NIC then says so at GO: its
        # receives are not standing ones, apps/tbcomm.py), and for a job that waits by blocking: MPICH
        # only polls, and a polling rank burns its node's CPU quota while it waits, so a message that
        # comes after the quota is spent waits for the next CFS period (NAS CG, class A, 4 ranks: 22x
        # the simulator's time direct, 0.6x mirrored). Only a job that spins runs MPI direct.
        self.active = bool(link_note()) or not tb._standing or tb.mode != "spin"
        self.wants_bytes = False  # a collective's data is MPI's to move; the recorder notes its size
        self.collectives = 0  # completed, reported to the node as the unit "collectives"
        self.reported = 0
        self.next_report = 0.0
        self.mirrored_at = 0.0  # when the last receive's mirror message came (recv)
        self.costs: list[float] = []  # MPI's part of the last receives, after their mirror's (matched)

    def done(self) -> None:
        self.clock.resume()

    def send(self, dest: int, tag: int, nbytes: int, sent_at: float) -> None:
        """``sent_at``: when the program's send began (before MPI's part), from which the link counts."""
        self.clock.lap()
        if self.active and 0 <= dest < self.n:
            self.tb.send_sized(dest, nbytes, max(0, tag), sent_at)

    def recv(self, source: int, tag: int) -> tuple[int, int]:
        self.clock.lap()
        if not self.active:
            return source, tag
        src, t, _ = self.tb.recv_msg(source if source >= 0 else ANY, tag if tag >= 0 else ANY)
        self.mirrored_at = time.monotonic()
        return src, t

    def matched(self, status) -> None:
        """MPI's receive is done: what it took after the mirror's is taken off the link's next deliveries
        (tbcomm's ``early_s``, the median of EARLY_WINDOW receives, at most MAX_EARLY_S), so that the
        program gets a message when the link delivers it, not that much later. An emulated link only:
        an ideal one has nothing to take it off."""
        if not (self.active and self.tb.stamped):
            return
        costs = self.costs
        costs.append(time.monotonic() - self.mirrored_at)
        if len(costs) == EARLY_WINDOW:
            self.tb.early_s = min(MAX_EARLY_S, statistics.median(costs))
            costs.clear()

    def collective(self, op: str, nbytes: int = 0) -> None:
        """The collective ``op`` entered (announced to the node), then a barrier among the n MPI ranks
        through tbcomm (not the head). ``nbytes`` (the data the rank hands MPI) is not needed: MPI moves
        the data itself, after; :meth:`collective_left` once it has."""
        from testbed.apps.tbcomm import COLL_ENTER

        tb = self.tb
        self.clock.lap()
        if not self.active:
            self._count()
            return
        tb._notice(COLL_ENTER, op)
        if self.n > 1:
            if tb.rank == 0:
                for _ in range(self.n - 1):
                    tb._recv(ANY, _TAG_BARRIER, None)
                for r in range(1, self.n):
                    tb._send(r, b"", _TAG_BARRIER)
            else:
                tb._send(0, b"", _TAG_BARRIER)
                tb._recv(0, _TAG_BARRIER, None)

    def collective_left(self, op: str) -> None:
        """MPI's collective returned, its data moved: the node is told the rank left it. A policy that
        boosts a collective (HYBRID: paper 003 raises a process's priority from its entry to its exit)
        boosts MPI's work on the data too, which for an all-to-all is most of the collective's CPU."""
        from testbed.apps.tbcomm import COLL_LEAVE

        if self.active:
            self.tb._notice(COLL_LEAVE, op)
            self._count()

    def _count(self) -> None:
        """One more collective done; reported at most every REPORT_EVERY_S (a report is a frame to the
        node's NIC and an event there: one per Barrier tripled a 2-rank Barrier's time), and by
        :meth:`flush` at the end."""
        self.collectives += 1
        now = time.monotonic()
        if now >= self.next_report:
            self.next_report = now + REPORT_EVERY_S
            self.tb.progress("collectives", self.collectives)
            self.reported = self.collectives

    def flush(self) -> None:
        """The program returned: the last reports."""
        if self.collectives != self.reported:
            self.tb.progress("collectives", self.collectives)
            self.reported = self.collectives
        self.clock.lap()
        if self.active:
            # Direct (not active), point-to-point calls are MPI's own and no lap marks them: the clock
            # would count their polling as compute, so it is not reported.
            self.tb.progress(COMPUTE_UNIT, round(self.clock.total, 6))
            # Its calls' CPU but the spins: what the replay charges as the messages' and collectives' CPU.
            self.tb.progress(MPI_CPU_UNIT, round(max(0.0, self.clock.inside - self.tb.spin_cpu_s), 6))
            self.tb.progress(SPIN_CPU_UNIT, round(self.tb.spin_cpu_s, 6))


def preload_mpi() -> None:
    """Loads mpi4py's MPI extension (libmpi and UCX: about 48 ms of CPU here) without initialising MPI, in
    a node's fork server, so that no rank pays for it: the ranks are forked with it loaded, and
    :func:`install` initialises MPI when the program imports it. Loading it starts no thread and opens
    no descriptor (checked: a forked child initialises and talks at full speed)."""
    import mpi4py

    mpi4py.rc.initialize = False
    try:
        import mpi4py.MPI  # noqa: F401
    finally:
        mpi4py.rc.initialize = True


#: mpi4py's rc.thread_level names -> MPI's constants' names.
_LEVELS = {
    "single": "THREAD_SINGLE",
    "funneled": "THREAD_FUNNELED",
    "serialized": "THREAD_SERIALIZED",
    "multiple": "THREAD_MULTIPLE",
}


class _Loader:
    """Gives the program the MPI module loaded ahead (:func:`preload_mpi`), initialising MPI as mpi4py's
    own import would (``rc.initialize``, ``rc.thread_level``)."""

    def __init__(self, module, run) -> None:
        self.module = module
        self.run = run

    def create_module(self, spec):
        return self.module

    def exec_module(self, module) -> None:
        import mpi4py

        def init(MPI):
            rc = mpi4py.rc
            if rc.initialize and not MPI.Is_initialized():
                MPI.Init_thread(getattr(MPI, _LEVELS.get(str(rc.thread_level), "THREAD_MULTIPLE")))

        self.run(module, init)


class _ImportHook:
    """Finds ``mpi4py.MPI`` for the program and patches the module right after MPI_Init (which runs as the
    module loads, with the program's own ``mpi4py.rc`` settings), before the program sees it."""

    def __init__(self, patch, before=None, preloaded=None) -> None:
        self.patch = patch
        self.before = before
        self.preloaded = preloaded

    def _run(self, module, load) -> None:
        if self.before is not None:
            self.before()
        load(module)
        unlink_init_shm()
        self.patch(module)

    def find_spec(self, name, path, target=None):
        if name != "mpi4py.MPI":
            return None
        import importlib.util

        sys.meta_path.remove(self)
        if self.preloaded is not None:
            return importlib.util.spec_from_loader(name, _Loader(self.preloaded, self._run))
        # The finders after this one (mpi4py installs its own at import: it picks the MPICH build of
        # its extension) find it, as they would without the hook.
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module
        spec.loader.exec_module = lambda module: self._run(module, load)
        return spec


#: Where MPICH keeps the segment a rank maps at MPI_Init (one per rank here, MPIR_CVAR_NOLOCAL).
_SHM_PREFIX = "/dev/shm/mpich_shm_"


def unlink_init_shm(maps: str = "/proc/self/maps") -> list[str]:
    """Unlinks the /dev/shm segments MPI_Init left this process mapped; returns their paths. MPICH
    unlinks them only in MPI_Finalize, so every rank that never got there (killed with its job, a node
    killed, MPI_Abort) left 1 MiB each in /dev/shm, which is memory: 368 of them (385 MB) after a day of
    test runs here. MPI_Init returns once every process of the node has mapped it, so the name is no
    longer needed; the mapping stays, and MPI_Finalize's own unlink finds nothing, which it accepts."""
    with open(maps) as f:
        paths = {line.split()[-1] for line in f if _SHM_PREFIX in line}
    gone = []
    for path in sorted(p for p in paths if p.startswith(_SHM_PREFIX)):
        try:
            os.unlink(path)
        except FileNotFoundError:
            continue  # another rank of the node (an ideal-network run) unlinked it first
        gone.append(path)
    return gone


def install(tb, n: int, before_init=None, on_init=None, mirror=None) -> None:
    """Arranges for ``mpi4py.MPI``, when the program imports it, to have its ``COMM_WORLD`` replaced with
    the mirrored communicator; ``before_init()`` is called just before MPI_Init, ``on_init(MPI)`` once
    it has returned. The MPI module may have been loaded ahead without MPI_Init (:func:`preload_mpi`):
    it is then hidden until the program imports it."""

    if mirror is None:
        # The rank's compute counts from here, as a recording's does: the program's imports and MPI_Init
        # are its first compute (the program runs right after this call).
        mirror = _Mirror(tb, n, ComputeClock())

    def patch(MPI) -> None:
        _patch(MPI, mirror, n)
        if on_init is not None:
            on_init(MPI)

    preloaded = sys.modules.pop("mpi4py.MPI", None)
    if preloaded is not None:
        if preloaded.Is_initialized():
            raise RuntimeError("MPI was initialised before the program: outside the rank's control")
        mpi4py = sys.modules["mpi4py"]
        if getattr(mpi4py, "MPI", None) is preloaded:
            del mpi4py.MPI
    sys.meta_path.insert(0, _ImportHook(patch, before_init, preloaded))


#: Real seconds between two reports of the collectives count.
REPORT_EVERY_S = 0.05

#: The point-to-point methods the mirror wraps (lowercase and uppercase forms).
_P2P = {"send", "ssend", "isend", "recv", "sendrecv"}
#: COMM_WORLD's collectives the mirror carries: each a tbcomm barrier among the ranks announced by the
#: operation's name, then MPI's own call.
_COLLECTIVES = (
    "Barrier", "barrier", "Bcast", "bcast", "Allreduce", "allreduce", "Reduce", "reduce", "Gather", "gather",
    "Gatherv", "Scatter", "scatter", "Scatterv", "Allgather", "allgather", "Allgatherv", "Alltoall",
    "alltoall", "Alltoallv", "Alltoallw", "Reduce_scatter", "Reduce_scatter_block", "Scan", "scan",
    "Exscan", "exscan",
)  # fmt: skip
#: The names (lower case, without a nonblocking "i" or a persistent "_init") of the calls that move data
#: between ranks: any of them not mirrored would bypass the emulated link.
_MOVES_DATA = (
    "send", "ssend", "bsend", "rsend", "recv", "sendrecv", "probe", "mprobe", "psend", "precv", "barrier",
    "bcast", "gather", "scatter", "allgather", "alltoall", "reduce", "allreduce", "scan", "exscan",
)  # fmt: skip


def _communicates(name: str) -> bool:
    n = name.lower().removesuffix("_init")
    return any(n.startswith(r) or (n[:1] == "i" and n[1:].startswith(r)) for r in _MOVES_DATA)


#: The arguments by which mpi4py's collectives take the data a rank contributes (or, IN_PLACE aside,
#: receives), in the order they are looked for.
_DATA_ARGS = ("sendbuf", "buf", "sendobj", "obj", "recvbuf")


def _collective_bytes(args: tuple, kwargs: dict, buffers: bool) -> int:
    """The bytes of the data a rank hands a collective: its first buffer (or object, pickled) that holds
    any, which is the send buffer, or the receive buffer of an IN_PLACE call or of a Bcast. Barrier: 0."""
    for data in (*args[:2], *(kwargs.get(k) for k in _DATA_ARGS)):
        if data is None:
            continue
        nbytes = _nbytes(data) if buffers else _pickled(data)
        if nbytes:
            return nbytes
    return 0


def _collective(plain, nonblocking, mirror):
    """MPI's collective ``plain``, after the mirror's barrier named after it: as its nonblocking form
    ``nonblocking`` completed by :func:`_await` where there is one and the mirror is on (its ranks then
    left the barrier together, and a rank that MPI keeps waiting for a throttled peer sleeps)."""
    op = plain.__name__.lower()
    buffers = plain.__name__[0].isupper()  # the uppercase forms take buffers, the lowercase objects

    def call(self, *args, **kwargs):
        nbytes = _collective_bytes(args, kwargs, buffers) if mirror.wants_bytes else 0
        mirror.collective(op, nbytes)
        if nonblocking is None or not getattr(mirror, "active", True):
            result = plain(self, *args, **kwargs)
        else:
            result = _await(nonblocking(self, *args, **kwargs))
        mirror.collective_left(op)
        return result

    call.__name__ = plain.__name__
    return call


#: How :func:`_await` waits for MPI: a node's rank polls MPI (its progress engine moves the data only
#: inside calls), first without pause for SPIN_S (data already there), then with pauses from FIRST_PAUSE_S
#: doubling to MAX_PAUSE_S. MPICH's own blocking calls poll without pause, and under the node's CPU quota
#: a rank polling for a throttled peer spends the quota its compute needed: NAS CG, class A, 4 ranks,
#: used 0.82-1.45 CPU-s per rank against its model's 0.70, more the higher the TDF (docs/measurements.md,
#: "MPI waits that poll"). The longest pause bounds what it adds to a transfer that needs many rounds.
SPIN_S = 20e-6
FIRST_PAUSE_S = 20e-6
MAX_PAUSE_S = 200e-6


def _await(req, status=None) -> None:
    """Completes the MPI request ``req`` (into ``status``) without spinning on the CPU while it waits."""
    if req.Test(status):
        return
    spin_until = time.monotonic() + SPIN_S
    while time.monotonic() < spin_until:
        if req.Test(status):
            return
    pause = FIRST_PAUSE_S
    while not req.Test(status):
        time.sleep(pause)
        pause = min(2 * pause, MAX_PAUSE_S)


def _refused(name: str, link: str):
    def call(self, *args, **kwargs):
        raise NotOnTheLink(f"{name}{link}")

    call.__name__ = name
    return call


class NotOnTheLink(RuntimeError):
    """An MPI call the testbed cannot carry over the scenario's emulated link (not mirrored)."""


def link_note(env=os.environ) -> str:
    """Empty on an ideal network; else the tail of the one-line refusal of an unmirrored call."""
    node = NodeEnv.from_env(env)
    if node.link_latency_s <= 0 and node.link_bandwidth_Bps is None:
        return ""
    return (
        " is not carried over the emulated link (cluster.network is set), and would run on the host's ideal"
        " network; use COMM_WORLD's blocking calls (or Isend), or unset cluster.network"
    )


def _point_to_point(MPI, mirror):
    """A subclass of MPI.Intracomm whose point-to-point calls tell ``mirror`` (see :func:`_patch`)."""

    class TestbedComm(MPI.Intracomm):
        """COMM_WORLD with each message and collective mirrored through the emulated links."""

        # -- point to point -----------------------------------------------------------------------------
        # Sends go to MPI first and are mirrored after, so that a receiver woken by the mirror finds the data
        # there: mirrored first, a sender throttled between the two left its receiver polling in MPI.
        def _sent(self, isend, msg, dest, tag, nbytes):
            """MPI's nonblocking send ``isend`` of ``msg``, then its mirror, which the link counts from
            the call's start."""
            t0 = time.monotonic()
            req = isend(msg, dest, tag)
            mirror.send(dest, tag, nbytes, t0)
            return req

        def Send(self, buf, dest, tag=0):
            _await(self._sent(super().Isend, buf, dest, tag, _nbytes(buf)))

        def Ssend(self, buf, dest, tag=0):
            _await(self._sent(super().Issend, buf, dest, tag, _nbytes(buf)))

        def send(self, obj, dest, tag=0):
            _await(self._sent(super().isend, obj, dest, tag, _pickled(obj)))

        def ssend(self, obj, dest, tag=0):
            _await(self._sent(super().issend, obj, dest, tag, _pickled(obj)))

        def Isend(self, buf, dest, tag=0):
            return self._sent(super().Isend, buf, dest, tag, _nbytes(buf))

        def isend(self, obj, dest, tag=0):
            return self._sent(super().isend, obj, dest, tag, _pickled(obj))

        def Recv(self, buf, source=ANY, tag=ANY, status=None):
            if source == MPI.PROC_NULL:
                return super().Recv(buf, source, tag, status)
            source, tag = mirror.recv(source, tag)
            st = status if status is not None else MPI.Status()
            _await(super().Irecv(buf, source, tag), st)
            mirror.matched(st)

        def recv(self, buf=None, source=ANY, tag=ANY, status=None):
            if source == MPI.PROC_NULL:
                return super().recv(buf, source, tag, status)
            source, tag = mirror.recv(source, tag)
            st = status if status is not None else MPI.Status()
            # Blocking: mpi4py's irecv needs a buffer as large as the pickle; the data is there already.
            out = super().recv(buf, source, tag, st)
            mirror.matched(st)
            return out

        def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=ANY, recvtag=ANY, status=None):
            # To PROC_NULL: complete at once.
            req = self._sent(super().Isend, sendbuf, dest, sendtag, _nbytes(sendbuf))
            if source != MPI.PROC_NULL:
                source, recvtag = mirror.recv(source, recvtag)
            st = status if status is not None else MPI.Status()
            _await(super().Irecv(recvbuf, source, recvtag), st)
            if source != MPI.PROC_NULL:
                mirror.matched(st)
            _await(req)

        def sendrecv(self, sendobj, dest, sendtag=0, recvbuf=None, source=ANY, recvtag=ANY, status=None):
            req = self._sent(super().isend, sendobj, dest, sendtag, _pickled(sendobj))
            if source != MPI.PROC_NULL:
                source, recvtag = mirror.recv(source, recvtag)
            st = status if status is not None else MPI.Status()
            out = super().recv(recvbuf, source, recvtag, st)
            if source != MPI.PROC_NULL:
                mirror.matched(st)
            _await(req)
            return out

    return TestbedComm


def _patch(MPI, mirror, n: int) -> None:
    """``mirror`` is told of each call before it runs (``send``, ``recv``, ``collective``), of the message
    a receive matched (``matched``, its status) and that the call returned (``done``): a :class:`_Mirror`,
    or apps/mpi_trace.py's recorder."""
    link = link_note()
    _state["mirror"] = mirror

    def congruent(comm) -> bool:
        return comm.Get_size() == n and MPI.Comm.Compare(comm, MPI.COMM_WORLD) in (MPI.IDENT, MPI.CONGRUENT)

    TestbedComm = _point_to_point(MPI, mirror)
    for name in _COLLECTIVES:
        nonblocking = getattr(MPI.Intracomm, "I" + name, None) if name[0].isupper() else None
        setattr(TestbedComm, name, _collective(getattr(MPI.Intracomm, name), nonblocking, mirror))
    if link:
        # What moves data but is not mirrored (nonblocking receives and collectives, persistent, buffered
        # and ready sends, probes) would run on the host's ideal network: refused, with one line.
        for name in dir(MPI.Intracomm):
            if _communicates(name) and name not in vars(TestbedComm):
                setattr(TestbedComm, name, _refused(name, link))

    if not getattr(mirror, "active", True):
        # Direct: point-to-point calls are MPI's own (not even a Python frame in between); collectives
        # are still counted.
        for name in [n_ for n_ in vars(TestbedComm) if n_[0].lower() in "sri" and not n_.startswith("_")]:
            if name.lower() in _P2P:
                delattr(TestbedComm, name)
    # Calls on a communicator that is not COMM_WORLD's group in COMM_WORLD's order go straight to MPI: its
    # rank numbers are not the tbcomm ranks (``Split``, ``Create`` return the subclass too). On an
    # emulated link they are refused: they would run on the host's ideal network, silently.
    for name in [n_ for n_, v in vars(TestbedComm).items() if callable(v) and not n_.startswith("_")]:
        mirrored = vars(TestbedComm)[name]
        plain = getattr(MPI.Intracomm, name)

        def guard(self, *a, __m=mirrored, __p=plain, __name=name, **k):
            if self._tb_congruent is None:
                self._tb_congruent = congruent(self)
            if self._tb_congruent:
                result = __m(self, *a, **k)
                mirror.done()
                return result
            if link:
                raise NotOnTheLink(f"{__name} on a communicator whose ranks are not COMM_WORLD's{link}")
            return __p(self, *a, **k)

        guard.__name__ = name
        setattr(TestbedComm, name, guard)
    TestbedComm._tb_congruent = None

    world = TestbedComm(MPI.COMM_WORLD)
    world._tb_congruent = True
    MPI.COMM_WORLD = world
