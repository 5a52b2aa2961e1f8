"""tbcomm, the testbed's own messaging: the worker side (docs/architecture.md, "Messages"; NIC side:
testbed/emulator/nic.py).

A message goes sender -> NIC of the receiver's node -> receiver. The receiver asks its own NIC for each
message (RECV), so the NIC sees arrivals, waiting receivers and unconsumed messages. Wait modes, per recv:

* ``block``: a blocking socket read;
* ``spin``: non-blocking polls of the socket in a loop (burns CPU, like a spinning MPI receive);
* ``spin-block``: spin for ``spin_us`` emulated microseconds, then tell the NIC (BLOCKED) and block.

Where the node agent gives the worker its node's quota (``TB_SPIN_GUARD``), a spin stops polling once the
node has spent all but a reserve of the CFS period's quota, and waits blocked for its message or the next
period, so that it does not throttle its node while its message is on the way
(apps/spinguard.py); for the NIC and the policy it is still spinning.

When the NIC does not report message events to a policy, its GO says so and the receive is a standing
one instead: the NIC pushes each message as it arrives, this side keeps the ones no recv has asked for
yet and matches source and tag itself, and acknowledges what it consumed in the reserved header field
of its next frame to its own NIC (testbed/emulator/nic.py explains both modes). The wait modes are the same.

A send returns once its frame is handed over, unless the job's ``send_wait`` (CC's sender, paper 003
table 1) asks it to wait for the delivery acknowledgement: the DATA frame then says so (mode bit WANT_ACK),
the NIC that gets the message acknowledges it once the message is in its buffer (after the emulated
link), through the sender's own NIC, which hands the DELIVERED frame to the sender (and so can wake and
boost a blocked sender, as it does a blocked receiver). The sender waits for it on its own-NIC socket
as a receive waits for a message: ``spin``, ``block``, or ``spin-block`` (spin ``spin_us`` emulated
microseconds, then tell the own NIC (SEND_BLOCKED) and block). Default ``none``: no acknowledgement,
no wait, nothing extra on the wire.

Collectives (barrier, bcast, allreduce) are point-to-point underneath, linear through the root (paper 002,
fig. 6: all send to rank 0, rank 0 replies after hearing from all); each tells the own NIC when it enters
and leaves so a policy such as HYBRID can boost the process.

Deliberately plain blocking sockets and standard library only: 16+ workers start at once on two cores, so
import time matters (no asyncio, no numpy unless the caller already passes numpy arrays).
"""

from __future__ import annotations

import math
import os
import select
import socket
import struct
import time

from testbed.apps.environ import JobEnv, NodeEnv
from testbed.apps.spinguard import GuardSpec, SpinGuard
from testbed.apps.wire import (
    ACK,
    ANY,
    BLOCKED,
    BYE,
    COLL_ENTER,
    COLL_LEAVE,
    DATA,
    DELIVERED,
    ERROR,
    GO,
    HEADER,
    HELLO,
    MAX_ACKS,
    MAX_FRAME_BODY,
    PEER,
    PROGRESS,
    PROGRESS_VALUE,
    RECV,
    SEND_BLOCKED,
    SEND_WAITS,
    SIZE,
    SIZED,
    SPIN,
    SPIN_BLOCK,
    STAMP,
    STAMPED,
    WAIT_MODES,
    WANT_ACK,
    local_socket_name,
    matches,
    split_address,
    with_key,
)

_F64 = struct.Struct("!d")

# Negative tags are the collectives' own, so a user's ANY-tag receive never takes one of their messages.
TAG_BARRIER = -2
TAG_BCAST = -3
TAG_REDUCE = -4

_HSIZE = HEADER.size
_DONTWAIT = socket.MSG_DONTWAIT


class CommError(RuntimeError):
    """The job cannot go on: a peer died, the NIC went away, or the protocol was violated."""


class PeerGone(CommError):
    """The NIC says the job has already failed: a peer went away. This rank's failure is a consequence,
    not the cause (the worker exits with its own code for it, so the cause can be told apart)."""


def _connect(addr: str, timeout: float) -> socket.socket:
    # A plain connect to the numeric address: create_connection would resolve it with getaddrinfo, whose
    # first call in a process loads the resolver's libraries (milliseconds of a worker's start-up).
    name = local_socket_name(addr)
    if name is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target = name
    else:
        host, port = split_address(addr)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        target = (host, port)
    try:
        sock.settimeout(timeout)
        sock.connect(target)
    except OSError as exc:
        sock.close()
        raise CommError(f"cannot connect to NIC {addr}: {exc}") from exc
    sock.settimeout(None)
    if name is None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _data_body(buf, start: int, end: int, mode: int, early: float) -> bytes:
    """The payload of a STAMPED or SIZED message the NIC handed over (apps/wire.py, STAMP and SIZE): a
    stamped one is returned when it is due less ``early`` (the NIC hands it over up to its lead early, and
    the receiver spins the rest, because a wake-up from sleep takes longer than that lead); a sized one
    carries no payload, only its count, and gives an empty one."""
    if mode & SIZED:
        body = b""
    else:
        body = bytes(buf[start + STAMP.size : end])
    if mode & STAMPED:
        (due,) = STAMP.unpack_from(buf, start)
        due -= early
        now = time.monotonic
        while now() < due:
            pass
    return body


class Comm:
    """One rank's endpoint. Build it with :meth:`from_env`, which returns only once the NIC says GO."""

    def __init__(
        self,
        job: str,
        rank: int,
        nics: list[str],
        node_nic: str,
        *,
        tdf: float = 1.0,
        mode: str = "block",
        spin_us: float = 300.0,
        send_wait: str = "none",
        recv_timeout_s: float | None = None,
        connect_timeout_s: float = 10.0,
        node: int | None = None,
        key: str | None = None,
        stamped: bool = False,
        max_frame_body: int = MAX_FRAME_BODY,
        spin_guard: GuardSpec | None = None,
    ) -> None:
        """``key``: the run's key, which every NIC of the run asks of a connection (None: a NIC without
        one, in tests). ``stamped``: the links between nodes are emulated, so each message to another
        node carries its send time (apps/wire.py, STAMP). ``max_frame_body``: the run's bound, which the
        NICs close a connection for (apps/wire.py frame_bound): a send beyond it is refused here.
        ``spin_guard``: the node's quota, which a spinning wait then leaves unspent by its reserve
        (apps/spinguard.py; None: spins poll throughout)."""
        if not 0 <= rank < len(nics):
            raise CommError(f"rank {rank} out of range for {len(nics)} NIC addresses")
        if mode not in WAIT_MODES:
            raise CommError(f"unknown wait mode {mode!r}; use one of {', '.join(WAIT_MODES)}")
        if send_wait not in SEND_WAITS:
            raise CommError(f"unknown send wait {send_wait!r}; use one of {', '.join(SEND_WAITS)}")
        self.job = job
        self.rank = rank
        self.size = len(nics)
        self.nics = list(nics)
        self.node_nic = node_nic
        self.tdf = tdf
        self.mode = mode
        self.spin_us = spin_us
        #: how a send waits for the receiving NIC's acknowledgement ("none": it does not ask for one)
        self.send_wait = send_wait
        self.stamped = stamped
        #: Real seconds before a stamped message is due that a receive returns it: what its caller still
        #: spends before the program has the message, which the caller measures and sets (the MPI mirror:
        #: MPI's own receive after the mirror's, apps/mpi_wrap.py), so that the program sees the message
        #: when the link delivers it. 0: returned when due.
        self.early_s = 0.0
        self.max_message = max_frame_body - STAMP.size
        self._sent_acked = 0  # sends that asked for an acknowledgement (numbers SEND_BLOCKED frames)
        #: real seconds a recv may wait before giving up; None waits for ever. Off by default because a
        #: descheduled (stopped) peer is normal; dead peers are reported by the NIC instead.
        self.recv_timeout_s = recv_timeout_s
        self._guard = SpinGuard(spin_guard) if spin_guard is not None else None
        #: CPU seconds this thread spent spinning for messages (:meth:`_spin`): a rank's wait, not its work.
        self.spin_cpu_s = 0.0
        self._buf = bytearray()  # received, not yet parsed
        # recv_into a buffer kept for the whole run: recv(65536) would allocate 64 KiB per message.
        self._rbuf = bytearray(65536)
        self._rview = memoryview(self._rbuf)
        self._closed = False
        self._standing = False  # set by GO: the NIC pushes messages (no RECV, no BLOCKED)
        self._inbox: list[tuple[int, int, bytes]] = []  # standing receive: pushed, not yet asked for
        self._acks = 0  # standing receive: consumed, not yet acknowledged to the own NIC
        self._error: str | None = None  # standing receive: the NIC said the job failed
        self._open_links(key, node, connect_timeout_s)

    def _open_links(self, key: str | None, node: int | None, timeout_s: float) -> None:
        """Opens one socket per distinct NIC, says HELLO to the own NIC and PEER to the others, and waits for
        the own NIC's GO. All of them now, so that a worker that dies later shows up as an EOF at every NIC
        of its job (which then fails the job's waiting receivers instead of leaving them hung)."""
        job_b = self.job.encode()
        self._local = _connect(self.node_nic, timeout_s)
        self._socks: dict[str, socket.socket] = {self.node_nic: self._local}
        hello = with_key(key, job_b)
        self._local.sendall(HEADER.pack(len(hello), HELLO, 0, 0, self.rank, os.getpid(), 0) + hello)
        peer_body = with_key(key, job_b + b"\n" + self.node_nic.encode())
        for addr in self.nics:
            if addr not in self._socks:
                sock = _connect(addr, timeout_s)
                # The node travels so that a NIC can say where a peer that died was.
                node_id = node + 1 if node is not None else 0
                sock.sendall(HEADER.pack(len(peer_body), PEER, 0, 0, self.rank, node_id, 0) + peer_body)
                self._socks[addr] = sock
        self._by_rank = [self._socks[addr] for addr in self.nics]
        ftype, *_, gmode = self._read_frame(self._local)
        if ftype != GO:
            raise CommError(f"expected GO from NIC {self.node_nic}, got frame type {ftype}")
        self._standing = gmode == 1

    @classmethod
    def from_env(cls, env=os.environ) -> Comm:
        """From the job's and the node's parts of the worker's environment (apps/environ.py)."""
        try:
            job, node = JobEnv.from_env(env), NodeEnv.from_env(env)
            return cls(
                job.job,
                job.rank,
                list(job.nics),
                node.node_nic or job.nics[job.rank],
                tdf=node.clock.tdf,
                mode=job.wait_mode,
                spin_us=job.spin_us,
                send_wait=job.send_wait,
                recv_timeout_s=job.recv_timeout_s,
                node=node.node,
                key=node.key,
                stamped=node.link_latency_s > 0 or node.link_bandwidth_Bps is not None,
                max_frame_body=node.max_frame_body or MAX_FRAME_BODY,
                spin_guard=GuardSpec.from_env(env),
            )
        except KeyError as exc:
            raise CommError(f"environment variable {exc.args[0]} is not set (the agent sets it)") from None
        except ValueError as exc:
            raise CommError(f"bad tbcomm environment: {exc}") from None

    # ---------------------------------------------------------------------------------------------------
    # Point to point

    def send(self, dst: int, data: bytes, tag: int = 0) -> None:
        if not 0 <= dst < self.size:
            raise CommError(f"send to rank {dst}: out of range 0..{self.size - 1}")
        if tag < 0:
            raise CommError(f"tag {tag}: user tags must be >= 0")
        self._send(dst, data, tag)

    def send_sized(self, dst: int, nbytes: int, tag: int = 0, sent_at: float | None = None) -> None:
        """A message of ``nbytes`` bytes that carries none of them (apps/wire.py, SIZE): the emulated link
        takes as long as for ``nbytes`` bytes, and the receiver gets an empty payload. For a mirror whose
        data moves another way (apps/mpi_wrap.py: MPI moves it), so that neither the sender nor the NICs
        spend CPU on copying bytes that a real NIC would carry. The frame bound (``max_frame_body``) does
        not apply to ``nbytes``: nothing is allocated for it. ``sent_at``: when the caller's send began
        (CLOCK_MONOTONIC; None: now), from which an emulated link counts."""
        if not 0 <= dst < self.size:
            raise CommError(f"send to rank {dst}: out of range 0..{self.size - 1}")
        if tag < 0:
            raise CommError(f"tag {tag}: user tags must be >= 0")
        if not 0 <= nbytes < 2 ** (8 * SIZE.size):
            raise CommError(f"send to rank {dst}: a sized message of {nbytes} bytes")
        self._send(dst, SIZE.pack(nbytes), tag, SIZED, sent_at)

    def _take_acks(self) -> int:
        n = self._acks
        if n > MAX_ACKS:
            n = MAX_ACKS
        self._acks -= n
        return n

    def _send(self, dst: int, data, tag: int, sized: int = 0, sent_at: float | None = None) -> None:
        """``sized``: 0, or SIZED when ``data`` is a SIZE (send_sized); ``sent_at``: see send_sized."""
        n = len(data)
        if n > self.max_message:
            raise CommError(
                f"send to rank {dst}: a message of {n} bytes, over the {self.max_message} bytes a "
                "message of this run may have (the largest its jobs' programs declare, apps/wire.py "
                "frame_bound)"
            )
        sock = self._by_rank[dst]
        acks = self._take_acks() if self._acks and sock is self._local else 0
        wait = self.send_wait != "none"
        mode = (WANT_ACK if wait else 0) | sized
        if self.stamped and sock is not self._local:
            hdr = HEADER.pack(n + STAMP.size, DATA, mode | STAMPED, acks, self.rank, dst, tag)
            hdr += STAMP.pack(time.monotonic() if sent_at is None else sent_at)
        else:
            hdr = HEADER.pack(n, DATA, mode, acks, self.rank, dst, tag)
        try:
            if n <= 65536:
                sock.sendall(hdr + bytes(data))
            else:
                sock.sendall(hdr)
                sock.sendall(data)
        except OSError as exc:
            if sock is self._local:
                raise CommError(f"own NIC {self.node_nic} is gone: {exc}") from exc
            # Another node's NIC went away with its node: a consequence, whose cause the coordinator finds.
            raise PeerGone(f"send to rank {dst} via NIC {self.nics[dst]} failed: {exc}") from exc
        if wait:
            self._wait_delivered(dst)

    def _wait_delivered(self, dst: int) -> None:
        """Waits in ``send_wait`` mode for the DELIVERED frame of the send just made; it comes from the own
        NIC. With a standing receive, messages pushed meanwhile go to the inbox."""
        self._sent_acked += 1
        sock = self._local
        deadline = None if self.recv_timeout_s is None else time.monotonic() + self.recv_timeout_s
        mode = self.send_wait
        spin = mode != "block"
        spin_until = None if mode == "spin" else time.monotonic() + self.spin_us * 1e-6 * self.tdf
        if not spin:
            self._send_blocked()
        while True:
            if spin and self._spin(sock, spin_until, deadline):
                spin = False  # spun long enough: block from now on
                self._send_blocked()
            ftype, a, _, c, body, _ = self._read_frame(sock, deadline)
            if ftype == DELIVERED:
                return
            if ftype == DATA and self._standing:
                self._inbox.append((a, c, body))
            elif ftype == ERROR:
                reason = body.decode(errors="replace")
                if self._standing:
                    self._error = reason
                raise PeerGone(reason)
            else:
                raise CommError(f"waiting for the delivery to rank {dst}: unexpected frame type {ftype}")

    def _send_blocked(self) -> None:
        if self._standing:
            return  # nobody listens (no message events), as for a blocked standing receive
        try:
            self._local.sendall(HEADER.pack(0, SEND_BLOCKED, 0, 0, self._sent_acked, 0, 0))
        except OSError as exc:
            raise CommError(f"own NIC {self.node_nic} is gone: {exc}") from exc

    def recv(self, src: int = ANY, tag: int = ANY, mode: str | None = None) -> bytes:
        return self.recv_msg(src, tag, mode)[2]

    def recv_msg(self, src: int = ANY, tag: int = ANY, mode: str | None = None) -> tuple[int, int, bytes]:
        """Like :meth:`recv`, also returning the message's source rank and tag: (src, tag, data)."""
        if tag < ANY:
            raise CommError(f"tag {tag}: user tags must be >= 0 (or ANY)")
        return self._recv(src, tag, mode)

    def _recv(self, src: int, tag: int, mode: str | None) -> tuple[int, int, bytes]:
        mode = mode or self.mode
        try:
            mcode = WAIT_MODES.index(mode)
        except ValueError:
            raise CommError(f"unknown wait mode {mode!r}; use one of {', '.join(WAIT_MODES)}") from None
        if self._standing:
            return self._recv_standing(src, tag, mcode)
        sock = self._local
        try:
            sock.sendall(HEADER.pack(0, RECV, mcode, 0, src, 0, tag))
        except OSError as exc:
            raise CommError(f"own NIC {self.node_nic} is gone: {exc}") from exc
        deadline = None if self.recv_timeout_s is None else time.monotonic() + self.recv_timeout_s
        if mcode == SPIN:
            self._spin(sock, deadline)
        elif mcode == SPIN_BLOCK:
            if self._spin(sock, time.monotonic() + self.spin_us * 1e-6 * self.tdf, deadline):
                try:
                    sock.sendall(HEADER.pack(0, BLOCKED, 0, 0, 0, 0, 0))
                except OSError as exc:
                    raise CommError(f"own NIC {self.node_nic} is gone: {exc}") from exc
        ftype, a, _, c, body, _ = self._read_frame(sock, deadline)
        if ftype == DATA:
            return a, c, body
        if ftype == ERROR:
            raise PeerGone(body.decode(errors="replace"))
        raise CommError(f"unexpected frame type {ftype} from NIC {self.node_nic}")

    def _recv_standing(self, src: int, tag: int, mcode: int) -> tuple[int, int, bytes]:
        """Standing receive: take the first pushed message that matches, waiting for more as needed."""
        inbox = self._inbox
        for i, msg in enumerate(inbox):
            if matches(msg[0], msg[1], src, tag):
                del inbox[i]
                self._acks += 1
                return msg
        if self._error is not None:
            raise PeerGone(self._error)
        sock = self._local
        deadline = None if self.recv_timeout_s is None else time.monotonic() + self.recv_timeout_s
        spin_until = None
        if mcode == SPIN_BLOCK:
            spin_until = time.monotonic() + self.spin_us * 1e-6 * self.tdf
        while True:
            if mcode == SPIN:
                self._spin(sock, deadline)
            elif spin_until is not None:
                if self._spin(sock, spin_until, deadline):
                    spin_until = None  # spun long enough: block from now on (no BLOCKED: nobody listens)
            ftype, a, _, c, body, _ = self._read_frame(sock, deadline)
            if ftype == DATA:
                if matches(a, c, src, tag):
                    self._acks += 1
                    return a, c, body
                inbox.append((a, c, body))
            elif ftype == ERROR:
                self._error = body.decode(errors="replace")
                raise PeerGone(self._error)
            else:
                raise CommError(f"unexpected frame type {ftype} from NIC {self.node_nic}")

    def _spin(self, sock: socket.socket, until: float | None, hard: float | None = None) -> bool:
        """Polls without blocking until some bytes of the answer are buffered (False) or ``until`` passes
        (True: the caller blocks from now on). ``until`` None spins for ever (bounded by ``hard``)."""
        if len(self._buf) >= _HSIZE:
            return False
        cpu0 = time.thread_time()
        try:
            return self._poll(sock, until, hard)
        finally:
            self.spin_cpu_s += time.thread_time() - cpu0

    def _poll(self, sock: socket.socket, until: float | None, hard: float | None) -> bool:
        """:meth:`_spin`'s loop."""
        buf = self._buf
        view = self._rview
        now = time.monotonic
        guard = self._guard
        while True:
            try:
                n = sock.recv_into(view, 0, _DONTWAIT)
            except BlockingIOError:
                t = now()
                if until is not None and t >= until:
                    return True
                if hard is not None and t >= hard:
                    raise CommError(f"rank {self.rank}: no message within {self.recv_timeout_s} s") from None
                if guard is not None:
                    pause = guard.pause_s(t)
                    if pause > 0:
                        # The node's quota is nearly spent: wait blocked for the message or the next
                        # period instead of polling the node into throttling (apps/spinguard.py).
                        wake = min(t + pause, until or math.inf, hard or math.inf)
                        select.select((sock,), (), (), wake - t)
                continue
            except OSError as exc:
                raise CommError(f"own NIC {self.node_nic} is gone: {exc}") from exc
            if not n:
                raise CommError(f"own NIC {self.node_nic} closed the connection")
            buf += view[:n]
            return False

    def _read_frame(self, sock: socket.socket, deadline: float | None = None) -> tuple:
        buf = self._buf
        view = self._rview
        if not buf and deadline is None:
            # The common case: nothing buffered, one whole frame in one read, parsed in place.
            try:
                n = sock.recv_into(view)
            except OSError as exc:
                raise CommError(f"own NIC {self.node_nic} is gone: {exc}") from exc
            if not n:
                raise CommError(f"own NIC {self.node_nic} closed the connection")
            if n >= _HSIZE:
                blen, ftype, mode, _, a, b, c = HEADER.unpack_from(view)
                need = _HSIZE + blen
                if n >= need:
                    if n > need:
                        buf += view[need:n]
                    if ftype == DATA and mode & (STAMPED | SIZED):
                        return ftype, a, b, c, _data_body(view, _HSIZE, need, mode, self.early_s), mode
                    return ftype, a, b, c, bytes(view[_HSIZE:need]), mode
            buf += view[:n]
        while True:
            if len(buf) >= _HSIZE:
                blen, ftype, mode, _, a, b, c = HEADER.unpack_from(buf)
                need = _HSIZE + blen
                if len(buf) >= need:
                    if ftype == DATA and mode & (STAMPED | SIZED):
                        body = _data_body(buf, _HSIZE, need, mode, self.early_s)
                    else:
                        body = bytes(buf[_HSIZE:need])
                    del buf[:need]
                    return ftype, a, b, c, body, mode
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CommError(f"rank {self.rank}: no message within {self.recv_timeout_s} s")
                sock.settimeout(left)
            try:
                n = sock.recv_into(view)
            except TimeoutError:
                raise CommError(f"rank {self.rank}: no message within {self.recv_timeout_s} s") from None
            except OSError as exc:
                raise CommError(f"own NIC {self.node_nic} is gone: {exc}") from exc
            finally:
                if deadline is not None:
                    sock.settimeout(None)
            if not n:
                raise CommError(f"own NIC {self.node_nic} closed the connection")
            buf += view[:n]

    # ---------------------------------------------------------------------------------------------------
    # Collectives (linear through the root)

    def _notice(self, ftype: int, op: str) -> None:
        body = op.encode()
        try:
            self._local.sendall(HEADER.pack(len(body), ftype, 0, self._take_acks(), 0, 0, 0) + body)
        except OSError as exc:
            raise CommError(f"own NIC {self.node_nic} is gone: {exc}") from exc

    def barrier(self, mode: str | None = None) -> None:
        self._notice(COLL_ENTER, "barrier")
        if self.rank == 0:
            for _ in range(self.size - 1):
                self._recv(ANY, TAG_BARRIER, mode)
            for r in range(1, self.size):
                self._send(r, b"", TAG_BARRIER)
        else:
            self._send(0, b"", TAG_BARRIER)
            self._recv(0, TAG_BARRIER, mode)
        self._notice(COLL_LEAVE, "barrier")

    def bcast(self, data: bytes | None, root: int = 0, mode: str | None = None) -> bytes:
        self._notice(COLL_ENTER, "bcast")
        if self.rank == root:
            if data is None:
                raise CommError("bcast: the root must pass data")
            data = bytes(data)
            for r in range(self.size):
                if r != root:
                    self._send(r, data, TAG_BCAST)
        else:
            data = self._recv(root, TAG_BCAST, mode)[2]
        self._notice(COLL_LEAVE, "bcast")
        return data

    def allreduce(self, value, op: str = "sum", mode: str | None = None):
        """Reduces a float or a float64 numpy array across all ranks; every rank gets the result.

        The root combines contributions in rank order, so every run gives bit-identical results."""
        if op not in ("sum", "max", "min"):
            raise CommError(f"allreduce: unknown op {op!r}; use sum, max or min")
        self._notice(COLL_ENTER, "allreduce")
        is_array = hasattr(value, "dtype")  # numpy is imported only by callers that use it
        if is_array:
            import numpy as np

            arr = np.ascontiguousarray(value, dtype=np.float64)
            payload = arr.tobytes()
        else:
            payload = _F64.pack(float(value))
        if self.rank == 0:
            parts: list[bytes | None] = [None] * self.size
            parts[0] = payload
            for _ in range(self.size - 1):
                src, _, body = self._recv(ANY, TAG_REDUCE, mode)
                parts[src] = body
            if is_array:
                acc = arr.copy()
                fn = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
                for body in parts[1:]:
                    other = np.frombuffer(body, dtype=np.float64)
                    if other.size != acc.size:
                        raise CommError(f"allreduce: arrays of different sizes ({acc.size}, {other.size})")
                    fn(acc, other.reshape(acc.shape), out=acc)
                result_b = acc.tobytes()
            else:
                vals = [_F64.unpack(b)[0] for b in parts]
                red = {"sum": sum, "max": max, "min": min}[op]
                result_b = _F64.pack(red(vals))
            for r in range(1, self.size):
                self._send(r, result_b, TAG_BCAST)
        else:
            self._send(0, payload, TAG_REDUCE)
            result_b = self._recv(0, TAG_BCAST, mode)[2]
        self._notice(COLL_LEAVE, "allreduce")
        if is_array:
            return np.frombuffer(result_b, dtype=np.float64).reshape(arr.shape).copy()
        return _F64.unpack(result_b)[0]

    # ---------------------------------------------------------------------------------------------------

    def progress(self, unit: str, value: float) -> None:
        body = PROGRESS_VALUE.pack(float(value)) + unit.encode()
        try:
            self._local.sendall(HEADER.pack(len(body), PROGRESS, 0, self._take_acks(), 0, 0, 0) + body)
        except OSError as exc:
            raise CommError(f"own NIC {self.node_nic} is gone: {exc}") from exc

    def close(self) -> None:
        """Clean close: each NIC sees BYE before EOF, so it does not take this rank for dead."""
        if self._closed:
            return
        self._closed = True
        bye = HEADER.pack(0, BYE, 0, 0, 0, 0, 0)
        for sock in self._socks.values():
            try:
                if sock is self._local:
                    while self._acks > MAX_ACKS:
                        sock.sendall(HEADER.pack(0, ACK, 0, self._take_acks(), 0, 0, 0))
                    sock.sendall(HEADER.pack(0, BYE, 0, self._take_acks(), 0, 0, 0))
                    continue
                sock.sendall(bye)
            except OSError:
                pass
            sock.close()

    def __enter__(self) -> Comm:
        return self

    def abort(self) -> None:
        """Close without BYE: the NICs take this rank for dead and fail its job's waiting receivers."""
        if self._closed:
            return
        self._closed = True
        for sock in self._socks.values():
            sock.close()

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:
            self.abort()
