"""The mpi kind's process manager: a PMI-1 server in the job's head process (docs/architecture.md, "MPI
programs").

MPICH's ranks find each other through a process manager speaking PMI, its "simple" wire protocol v1:
one line of ``key=value`` words per command, over the descriptor named by ``PMI_FD`` (with ``PMI_RANK``
and ``PMI_SIZE`` in the environment; MPICH's src/pmi/src/pmi_v1.c, the Flux RFC 13 "Simple Process
Manager Interface v1"). Hydra's ``hydra_pmi_proxy`` is such a server, and it is every rank's parent;
here the node agent must be every rank's parent (stop/continue, nice, CPU, exit reports), so the testbed
serves PMI itself: each rank, started by its node's agent like any worker, connects to this server over
TCP, says which rank it is (``cmd=tb_hello rank=R``; ours, as is ``cmd=tb_finalized``, sent once
MPI_Finalize has returned), and hands the socket to
MPICH as ``PMI_FD``.

The commands MPICH 4-5 sends over PMI-1 and what they get: init, get_maxes, get_appnum,
get_my_kvsname, get_universe_size, put / get (one key-value space per job; ``PMI_process_mapping`` is
preset: every rank on a node of its own, as the emulated cluster places them), barrier_in (answered once
every rank entered), finalize, abort (the job fails naming the rank, its exit code and message).

The server also watches the job's start. Each rank, as the program imports ``mpi4py.MPI`` and before
MPI_Init runs, says ``cmd=tb_ready`` and waits for ``cmd=tb_go``, sent once every rank is ready: a rank
that is not ready within ``init_timeout_s`` fails the job with one line naming it (Hydra, whose proxies
never start, waits for ever), and the ranks that were ready get ``cmd=tb_fail reason=...`` and exit as
its consequence. Why before MPI_Init and not inside it: MPI_Init holds the GIL in mpi4py and MPICH
crashes (SIGSEGV, or an abort naming an unreachable peer) when its PMI connection ends mid-barrier, so a
rank waiting there could neither be told why nor fail as a consequence. And a
rank whose connection ends before MPI_Finalize ends the job as a peer's failure (the rank's own exit
report names the cause).
"""

from __future__ import annotations

import os
import selectors
import socket
import sys
import time
from dataclasses import dataclass, field

from testbed.apps.environ import PMI_DEBUG

#: TB_PMI_DEBUG=1 (environ.PMI_DEBUG) in the run's environment: every PMI command to the head's stderr
#: (the job's log).
_DEBUG = os.environ.get(PMI_DEBUG) == "1"


#: The longest one wait of the PMI server's loop, real seconds (it re-checks its deadline after it).
MAX_SELECT_S = 3600.0


class PmiFailure(RuntimeError):
    """The job cannot go on; the message is its one-line reason. ``peer`` marks a consequence (a rank
    went away: its own exit report is the cause)."""

    def __init__(self, message: str, peer: bool = False) -> None:
        super().__init__(message)
        self.peer = peer


@dataclass
class _Conn:
    sock: socket.socket
    rank: int | None = None
    buf: bytearray = field(default_factory=bytearray)
    finalized: bool = False


def parse(line: str) -> dict[str, str]:
    """``cmd=put kvsname=k key=a value=b`` -> {cmd: put, ...}. A value runs to the next space (PMI-1 values
    have no spaces; an abort's message and our tb_fail's reason are the exceptions: they run to the end of
    the line)."""
    out: dict[str, str] = {}
    words = line.split(" ")
    for i, w in enumerate(words):
        key, eq, value = w.partition("=")
        if not eq:
            continue
        if key in ("error_msg", "reason"):  # the rest of the line, spaces included
            out[key] = " ".join([value, *words[i + 1 :]]).strip()
            break
        out[key] = value
    return out


class PmiServer:
    """Serves one job's ``size`` ranks until every rank has called MPI_Finalize (:meth:`serve` returns)
    or the job fails (:class:`PmiFailure`)."""

    def __init__(self, size: int, host: str, init_timeout_real_s: float, kvsname: str) -> None:
        """``kvsname``: the job's key-value space, unique on the host: MPICH names its shared memory
        segments after it and the rank (``/dev/shm/mpich_shm_<hash>_<rank>``), so two jobs of one name
        running at once share rank k's segment and crash (SIGSEGV, NLS on real processes)."""
        self.size = size
        self.kvsname = kvsname
        # Every rank on a node of its own: MPICH then uses its network module between them, as between
        # the hosts of a real cluster, not shared memory (format: PMI's "vector" of (node, count, ppn)).
        self.kvs: dict[str, str] = {"PMI_process_mapping": f"(vector,(0,{size},1))"}
        self.init_timeout_real_s = init_timeout_real_s
        self.listener = socket.create_server((host, 0), backlog=max(16, size))
        self.address = f"{host}:{self.listener.getsockname()[1]}"
        self.conns: dict[int, _Conn] = {}
        self.barrier_waiting: list[_Conn] = []
        self.barriers_done = 0
        self.finalized = 0
        self.ready: list[_Conn] = []  # ranks about to call MPI_Init, waiting for GO
        self.went = False

    def close(self) -> None:
        for c in list(self.conns.values()):
            c.sock.close()
        self.listener.close()

    def serve(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.listener, selectors.EVENT_READ, None)
        start = time.monotonic()
        try:
            while self.finalized < self.size:
                timeout = None
                if not self.went:
                    timeout = start + self.init_timeout_real_s - time.monotonic()
                    if timeout <= 0:
                        why = self._late()
                        # The ranks waiting for GO exit as the consequence they are, with this reason.
                        for c in self.ready:
                            self._reply(c, f"cmd=tb_fail reason={why}")
                        raise PmiFailure(why)
                # An hour at most each time round: epoll takes at most 2^31 ms, and a longer
                # init_timeout_s x TDF (1e9 s) raised OverflowError in the head.
                for key, _ in sel.select(None if timeout is None else min(timeout, MAX_SELECT_S)):
                    if key.data is None:
                        sock, _ = self.listener.accept()
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                        conn = _Conn(sock)
                        self.conns[sock.fileno()] = conn
                        sel.register(sock, selectors.EVENT_READ, conn)
                    else:
                        self._read(key.data, sel)
        finally:
            sel.close()

    def _late(self) -> str:
        seen = {c.rank for c in self.conns.values() if c.rank is not None}
        inside = {c.rank for c in self.ready}
        missing = [r for r in range(self.size) if r not in inside]
        never = [r for r in missing if r not in seen]
        what = f"rank(s) {', '.join(map(str, missing))} did not reach MPI_Init"
        if never:
            what += f" ({', '.join(map(str, never))} never connected to the job's process manager)"
        return f"{what} within init_timeout_s; the other ranks wait there for ever (raise init_timeout_s?)"

    def _read(self, conn: _Conn, sel: selectors.BaseSelector) -> None:
        try:
            data = conn.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            sel.unregister(conn.sock)
            self.conns.pop(conn.sock.fileno(), None)
            conn.sock.close()
            if not conn.finalized:
                who = "a rank" if conn.rank is None else f"rank {conn.rank}"
                raise PmiFailure(f"{who}'s process ended before MPI_Finalize", peer=True)
            return
        conn.buf += data
        while True:
            nl = conn.buf.find(b"\n")
            if nl < 0:
                break
            line = conn.buf[:nl].decode(errors="replace").strip()
            del conn.buf[: nl + 1]
            if line:
                if _DEBUG:
                    print(f"pmi: rank {conn.rank}: {line[:200]}", file=sys.stderr, flush=True)
                self._command(conn, parse(line))

    def _reply(self, conn: _Conn, text: str) -> None:
        try:
            conn.sock.sendall(text.encode() + b"\n")
        except OSError:
            pass  # its end is seen by the reader

    def _command(self, conn: _Conn, d: dict[str, str]) -> None:
        cmd = d.get("cmd")
        if cmd == "tb_hello":
            conn.rank = int(d["rank"])
        elif cmd == "tb_ready":
            self.ready.append(conn)
            if len(self.ready) == self.size:
                self.went = True
                for c in self.ready:
                    self._reply(c, "cmd=tb_go")
        elif cmd == "init":
            self._reply(conn, "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
        elif cmd == "get_maxes":
            self._reply(conn, "cmd=maxes kvsname_max=256 keylen_max=256 vallen_max=1024 rc=0")
        elif cmd == "get_appnum":
            self._reply(conn, "cmd=appnum appnum=0 rc=0")
        elif cmd == "get_my_kvsname":
            self._reply(conn, f"cmd=my_kvsname kvsname={self.kvsname} rc=0")
        elif cmd == "get_universe_size":
            self._reply(conn, f"cmd=universe_size size={self.size} rc=0")
        elif cmd == "put":
            self.kvs[d.get("key", "")] = d.get("value", "")
            self._reply(conn, "cmd=put_result rc=0")
        elif cmd == "get":
            value = self.kvs.get(d.get("key", ""))
            if value is None:
                self._reply(conn, "cmd=get_result rc=-1 msg=key_not_found")
            else:
                self._reply(conn, f"cmd=get_result value={value} rc=0")
        elif cmd == "barrier_in":
            self.barrier_waiting.append(conn)
            if len(self.barrier_waiting) == self.size:
                waiting, self.barrier_waiting = self.barrier_waiting, []
                self.barriers_done += 1
                for c in waiting:
                    self._reply(c, "cmd=barrier_out rc=0")
        elif cmd == "finalize":
            self._reply(conn, "cmd=finalize_ack rc=0")
        elif cmd == "tb_finalized":  # ours, after MPI_Finalize returned (MPICH 5 sends no "finalize")
            if not conn.finalized:
                conn.finalized = True
                self.finalized += 1
        elif cmd == "abort":
            who = "a rank" if conn.rank is None else f"rank {conn.rank}"
            msg = " ".join(d.get("error_msg", "").split())
            raise PmiFailure(
                f"{who} called MPI_Abort (exit code {d.get('exitcode', '?')})" + (f": {msg}" if msg else "")
            )
        else:
            # An unknown command gets a failure answer rather than silence (MPICH would wait for ever).
            self._reply(conn, f"cmd={cmd}_result rc=-1 msg=unsupported_by_the_testbed")
