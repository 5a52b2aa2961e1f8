"""The emulated NIC of one node: the receiving end of every ``tbcomm`` message (docs/architecture.md,
"Messages").

A worker sends each message straight to the NIC of the destination rank's node; that NIC holds it until
the receiver asks for it with a RECV frame, then hands it over. Because receiving is request/response, the
NIC sees every arrival, every waiting (and blocked) receiver and every unconsumed message, which is what
the coscheduling policies need (paper 003's NIC firmware). Skipping a sender-side relay halves the relay
cost (docs/measurements.md, "Messaging costs": each Python hop adds a few microseconds pinned, far more
unpinned).

Two delivery modes, fixed per NIC and told to each worker in its GO frame:

* ``report_messages=True`` (a policy wants message events): request/response as above, so every
  MessageArrived / ReceiverWaiting / ReceiverBlocked / MessageConsumed is exact when it is reported.
* ``report_messages=False`` (nobody looks at the events): a standing receive. Once GO is sent, the NIC
  pushes every message for the worker as it arrives, without waiting for a RECV frame, and the worker
  matches source and tag itself. This saves one frame, and one wake-up of the NIC, per message (the
  largest single cost, see benchmarks/tbcomm_latency.py). The NIC still counts every arrival; a pushed
  message counts as unconsumed until the worker acknowledges it. Acknowledgements are lazy: the
  reserved header field of every frame the worker sends to its own NIC carries the number of pushed
  messages it consumed since its previous frame (an ACK frame only if that would overflow 16 bits), so
  between two frames :meth:`Nic.unconsumed` may still count messages the worker has already taken; it
  is exact again at the worker's next frame to its own NIC, and at its BYE.

Delivery acknowledgements (CC's sender, paper 003 table 1): a DATA frame with mode bit WANT_ACK asks for one.
The NIC that gets it acknowledges the message once it is in its buffer (after the emulated link into
its node), to the sender's own NIC (NIC_ACK over a NIC-to-NIC connection, opened on first use; on the
same node, at once). The sender's NIC receives the acknowledgement like a message, through its own
emulated link from the acknowledging node (a header only: latency, no transmission time), and hands a
DELIVERED frame to the sender, which waits for it (apps/tbcomm.py). So a send that waits for its
acknowledgement takes a round trip, and the sender's node sees the acknowledgement come: a sender that
said it blocks (SEND_BLOCKED) is reported woken (SenderWoken) for a policy to boost. Without mode 1,
nothing of this happens.

The data path runs on a thread of its own, outside asyncio: one epoll loop over the NIC's sockets, a
timerfd for the emulated links, plain non-blocking sends (a frame a worker cannot take yet waits in
that connection's output buffer). asyncio's loop cost more per message than the rest of the relay
(``benchmarks/tbcomm_latency.py``: 5.8x raw loopback TCP one way through the asyncio relay). What the
node agent must hear (hello, message events for its policy, progress, disconnects) is handed to the
asyncio loop that called :meth:`Nic.start` (the agent's), in order, in batches. :meth:`Nic.go` and
:meth:`Nic.drop_job` may be called from any thread; :meth:`Nic.stats` and :meth:`Nic.unconsumed` read a
snapshot; :meth:`Nic.start` and :meth:`Nic.close` are coroutines for that loop.

Wire format: apps/wire.py, the one definition this NIC and :mod:`testbed.apps.tbcomm` share (each frame
a 20-byte header ``struct "!IBBHiii"`` = (body length, frame type, mode, reserved, a, b, c), then the body).
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import heapq
import hmac
import itertools
import logging
import os
import select
import socket
import threading
import time
import typing
from collections import deque
from dataclasses import dataclass, field

from testbed.apps.wire import (
    ACK,
    BLOCKED,
    BYE,
    COLL_ENTER,
    COLL_LEAVE,
    COOP,
    DATA,
    DELIVERED,
    ERROR,
    GO,
    HEADER,
    HELLO,
    MAX_FRAME_BODY,
    NIC_ACK,
    NIC_HELLO,
    PEER,
    PROGRESS,
    PROGRESS_VALUE,
    RECV,
    SEND_BLOCKED,
    SIZE,
    SIZED,
    STAMP,
    STAMPED,
    WAIT_MODES,
    WANT_ACK,
    local_socket_name,
    matches,
    same_clock,
    split_address,
    with_key,
)
from testbed.core.clock import Clock
from testbed.emulator.mechanism.priority import raise_thread_priority
from testbed.schedulers.base import (
    CollectiveEnter,
    CollectiveLeave,
    MessageArrived,
    MessageConsumed,
    Proc,
    ReceiverBlocked,
    ReceiverWaiting,
    SenderBlocked,
    SenderWoken,
)

log = logging.getLogger(__name__)

_DELIVERED = HEADER.pack(0, DELIVERED, 0, 0, 0, 0, 0)
_RBUF = 65536  # receive buffer per connection; grows for a bigger frame, then shrinks back
#: Real seconds before a stamped message is due that the NIC hands it to its receiver, which holds it
#: until then (apps/wire.py, STAMP). It covers the hand-over: the timer's wake-up here, the write and the
#: receiver's wake-up and read, 50-90 us on this kind of host under load; 60 us left a 100 us link's
#: messages 115-120 us late, 100 us and 150 us gave 105-108 (docs/measurements.md,
#: "MPI over an emulated link"). The price: a receiver spins up to this long per message, and the node's
#: policy hears of the arrival up to this much early.
DELIVERY_LEAD_S = 100e-6
#: Real seconds between a worker's connection dropping without BYE and its job's receivers here failing.
DEAD_PEER_GRACE_S = 0.1


# timerfd through libc (os.timerfd_* is Python 3.13+): the emulated links' delays need microseconds.
# PyDLL: the calls keep the GIL (they never block). A CDLL call releases and retakes it, and where several
# agents share a process each release was a hand-over to another agent's loop and back, twice a delayed
# message (issue 25: 7 of the 9 wake-ups of an agent's loop per message were for the GIL).
_libc = ctypes.PyDLL(None, use_errno=True)
_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_TFD_FLAGS = os.O_NONBLOCK | os.O_CLOEXEC  # TFD_NONBLOCK, TFD_CLOEXEC have these values


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _timerfd_create() -> int:
    fd = _libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_FLAGS)
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"timerfd_create: {os.strerror(e)}")
    return fd


def _timerfd_set(fd: int, deadline: float) -> None:
    """Fire at CLOCK_MONOTONIC ``deadline`` (0: disarm); a deadline already past fires at once."""
    ns = max(1, round(deadline * 1e9)) if deadline > 0 else 0
    spec = _Itimerspec(_Timespec(0, 0), _Timespec(ns // 1_000_000_000, ns % 1_000_000_000))
    if _libc.timerfd_settime(fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"timerfd_settime: {os.strerror(e)}")


class NicHooks(typing.Protocol):
    def on_hello(self, proc: Proc, pid: int) -> None: ...

    def on_local_event(self, event) -> None: ...

    def on_progress(self, proc: Proc, unit: str, value: float) -> None: ...

    def on_disconnect(self, proc: Proc) -> None: ...

    def on_coop(self, body: bytes) -> None: ...


@dataclass(eq=False)
class _Rx:
    """One local receiver (job, rank): its unconsumed messages and its pending RECV, if any."""

    proc: Proc
    queue: deque = field(default_factory=deque)  # (src, tag, raw DATA frame)
    want: tuple[int, int, int] | None = None  # (src, tag, mode)
    conn: _Conn | None = None
    go: bool = False  # the agent said go (possibly before HELLO arrived)
    ahead: int = 0  # standing receive: messages pushed to the worker that it has not acknowledged yet
    delivered: int = 0  # DELIVERED frames handed to the worker (its sends' acknowledgements)
    send_blocked: bool = False  # SEND_BLOCKED came and its DELIVERED has not


@dataclass(eq=False)
class _Link:
    """Messages from one source node in flight on the emulated link to this node, in order."""

    free_at: float = 0.0
    # (deliverable_at, rx, msg, ack): msg None is an acknowledgement for the sender rx; ack, the
    # acknowledgement the message asks for once it is here (job, sender rank, sender's NIC or None).
    queue: deque = field(default_factory=deque)
    armed: bool = False  # a drain of this link is in the timer heap


class _Conn:
    """One connection: a worker's, another NIC's, or one this NIC opened to another NIC. Driven by the
    NIC's data thread: :meth:`readable` reads and parses what arrived; :meth:`write` sends at once, or
    keeps what the peer cannot take yet until the socket is writable again."""

    __slots__ = (
        "nic", "sock", "fd", "rx", "buf", "view", "start", "end", "out", "job", "rank", "local",
        "src_link", "ack_to", "peer_node", "nic_peer", "out_to", "bye", "closed", "connecting", "same_clock",
    )  # fmt: skip

    def __init__(self, nic: Nic, sock: socket.socket) -> None:
        self.nic = nic
        self.sock = sock
        self.fd = sock.fileno()
        self.rx: _Rx | None = None  # own-node connection: its receiver
        self.buf = bytearray(_RBUF)
        self.view = memoryview(self.buf)
        self.start = 0  # first byte not yet parsed
        self.end = 0  # first free byte
        self.out: bytearray | None = None  # written, not yet taken by the socket
        self.job: str | None = None
        self.rank = -1
        self.local = False  # the worker's own-node connection (HELLO), which carries RECVs
        self.src_link: str | None = None  # source node NIC address for link emulation; None = this node
        self.ack_to: str | None = None  # PEER: the worker's own NIC, where acknowledgements go
        self.same_clock = False  # PEER: the worker's NIC is on this host, so its send stamps mean time here
        self.peer_node: int | None = None  # PEER: the worker's node, when it says (failure reasons)
        self.nic_peer: str | None = None  # a connection from another NIC (NIC_HELLO): its address
        self.out_to: str | None = None  # a connection to another NIC, opened by this one: its address
        self.bye = False
        self.closed = False
        self.connecting: _Out | None = None  # a connection to another NIC, until connect() completes

    def write(self, data) -> None:
        if self.closed:
            return
        if self.out is not None or self.connecting is not None:
            if self.out is None:
                self.out = bytearray()
            self.out += data
            return
        try:
            n = self.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self.nic._close_conn(self)
            return
        if n < len(data):
            self.out = bytearray(memoryview(data)[n:])
            self.nic._watch_write(self, True)

    def flush(self) -> None:
        """The socket is writable: send what waits."""
        out = self.out
        try:
            n = self.sock.send(out)
        except BlockingIOError:
            return
        except OSError:
            self.nic._close_conn(self)
            return
        del out[:n]
        if not out:
            self.out = None
            self.nic._watch_write(self, False)

    def readable(self) -> None:
        buf = self.buf
        if len(buf) - self.end < _RBUF // 4:
            self._make_room()
            buf = self.buf
        try:
            n = self.sock.recv_into(self.view[self.end :])
        except BlockingIOError:
            return
        except OSError:
            n = 0
        if not n:
            self.nic._close_conn(self)
            return
        self.end += n
        off = self.start
        end_all = self.end
        hsize = HEADER.size
        frame = self.nic._frame
        try:
            while end_all - off >= hsize:
                blen, ftype, mode, acks, a, b, c = HEADER.unpack_from(buf, off)
                if blen > self.nic.max_frame_body:
                    raise _ProtocolError(
                        f"a frame of {blen} bytes, over the {self.nic.max_frame_body} a frame of this run "
                        "may have"
                    )
                end = off + hsize + blen
                if end > end_all:
                    break
                if acks and self.rx is not None:
                    rx = self.rx
                    rx.ahead = max(0, rx.ahead - acks)
                frame(self, ftype, mode, a, b, c, buf, off, end)
                off = end
        except _ProtocolError as exc:
            log.warning("nic %d: closing connection from %s:%d: %s", self.nic.node, self.job, self.rank, exc)
            self.nic._close_conn(self)
            return
        if off == end_all:
            self.start = self.end = 0
        else:
            self.start = off

    def _make_room(self) -> None:
        buf = self.buf
        pending = self.end - self.start
        need = pending + _RBUF // 4
        if pending >= HEADER.size:
            # Room for the frame that has begun, but grown with what arrives (doubling), not to what its
            # header claims at once: a frame that claims a huge body and sends little costs little.
            claimed = HEADER.size + HEADER.unpack_from(buf, self.start)[0]
            need = max(need, min(claimed, 2 * len(buf)))
        if self.start:
            buf[:pending] = buf[self.start : self.end]
            self.start, self.end = 0, pending
        if len(buf) < need or (len(buf) > _RBUF and need <= _RBUF):
            self.view.release()  # a bytearray with a live view cannot be resized
            if len(buf) < need:
                buf.extend(bytes(need - len(buf)))
            else:
                del buf[_RBUF:]  # give back the room a big message needed
            self.view = memoryview(buf)


class _ProtocolError(Exception):
    """A frame this NIC cannot take from that connection: the connection is closed (with a logged line),
    the NIC goes on."""


def _text(body: bytes) -> str:
    try:
        return body.decode()
    except UnicodeDecodeError:
        raise _ProtocolError(f"a name that is not UTF-8 text ({bytes(body[:20])!r})") from None


def _body(buf, off: int, end: int) -> bytes:
    """The body of the frame at ``buf[off:end]``, a copy."""
    return bytes(buf[off + HEADER.size : end])


def _payload_bytes(frame) -> int:
    """The bytes of the message a DATA frame (as handed over) carries or, SIZED, declares (apps/wire.py)."""
    mode = frame[5]  # HEADER's mode byte
    if mode & SIZED:
        return SIZE.unpack_from(frame, len(frame) - SIZE.size)[0]
    return len(frame) - HEADER.size - (STAMP.size if mode & STAMPED else 0)


@dataclass(eq=False)
class _Out:
    """A connection to another NIC, for acknowledgements: frames wait in ``pending`` until it is open."""

    conn: _Conn | None = None
    pending: list = field(default_factory=list)


class Nic:
    """The emulated NIC of node ``node``; see the module docstring.

    ``latency_s`` and ``bandwidth_Bps`` emulate the link into this node (emulated seconds / bytes per
    emulated second): a message from another node becomes deliverable (latency + bytes / bandwidth) x TDF
    real seconds after it reaches the NIC, with the messages of one source node serialised on its link.
    Messages between workers of the same node are never delayed.
    """

    def __init__(
        self,
        node: int,
        hooks: NicHooks,
        clock: Clock,
        *,
        report_messages: bool = False,
        latency_s: float = 0.0,
        bandwidth_Bps: float | None = None,
        host: str = "127.0.0.1",
        key: str | None = None,
        max_frame_body: int = MAX_FRAME_BODY,
    ) -> None:
        """``key``: the run's key: a connection that does not start with it (apps/wire.py with_key) is
        closed. None: no key (an in-process NIC of the tests). ``max_frame_body``: the run's bound
        (apps/wire.py frame_bound): a connection whose frame claims more is closed."""
        if latency_s < 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        if bandwidth_Bps is not None and bandwidth_Bps <= 0:
            raise ValueError(f"bandwidth_Bps must be > 0 or None, got {bandwidth_Bps}")
        self.node = node
        self.hooks = hooks
        self.clock = clock
        self.report_messages = report_messages
        self.latency_s = latency_s
        self.bandwidth_Bps = bandwidth_Bps
        self.host = host
        self.max_frame_body = max_frame_body
        self._key = None if key is None else key.encode()
        self.address = ""
        self._emulate_link = latency_s > 0 or bandwidth_Bps is not None
        # Standing receive (push) unless a policy wants message events; fixed for the NIC's life.
        self._push = not report_messages
        self._loop: asyncio.AbstractEventLoop | None = None  # the agent's: where hooks run
        self._thread: threading.Thread | None = None  # the data path (push mode)
        self._loop_thread: int | None = None
        self._listen: socket.socket | None = None
        self._listen_unix: socket.socket | None = None  # loopback NICs: tbcomm.local_socket_name
        self._listeners: dict[int, socket.socket] = {}
        self._ep: select.epoll | None = None
        self._wake = -1  # eventfd: commands from other threads wait in _commands
        self._commands: deque = deque()
        self._timerfd = -1
        self._timers: list = []  # heap of (deadline CLOCK_MONOTONIC, seq, fn, args)
        self._timer_seq = itertools.count()
        self._timer_armed = 0.0  # the deadline the timerfd is set to (0: disarmed)
        self._hooks_q: deque = deque()  # (fn, args) for the agent's loop
        self._hooks_pending = False
        self._conns: set[_Conn] = set()
        self._by_fd: dict[int, _Conn] = {}
        self._rx: dict[tuple[str, int], _Rx] = {}
        self._links: dict[str, _Link] = {}
        self._failed: dict[str, str] = {}  # job -> why its RECVs can no longer be satisfied
        self._dying: set[str] = set()  # jobs with a rank gone, failed here after DEAD_PEER_GRACE_S
        self._out: dict[str, _Out] = {}  # connections to other NICs (acknowledgements), by address
        self._closing = False
        self._messages_in = self._bytes_in = self._messages_out = self._bytes_out = 0
        self._arrivals = 0

    # ---------------------------------------------------------------------------------------------------
    # API for the node agent

    async def start(self) -> str:
        """Opens the NIC's port and starts its data path; hooks will run on the calling loop."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._listen = socket.create_server((self.host, 0), backlog=512)
        self._listen.setblocking(False)
        port = self._listen.getsockname()[1]
        self.address = f"{self.host}:{port}"
        name = local_socket_name(self.address)
        if name is not None:
            self._listen_unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._listen_unix.bind(name)  # unique: the TCP port is ours in this network namespace
            self._listen_unix.listen(512)
            self._listen_unix.setblocking(False)
        self._ep = select.epoll()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._timerfd = _timerfd_create()
        self._listeners = {self._listen.fileno(): self._listen}
        if self._listen_unix is not None:
            self._listeners[self._listen_unix.fileno()] = self._listen_unix
        for fd in (*self._listeners, self._wake, self._timerfd):
            self._ep.register(fd, select.EPOLLIN)
        if self.report_messages:
            # Every message makes events for the policy: the data path runs on the policy's own loop (the
            # NIC's epoll set is one readable fd there), so no event waits for another thread.
            self._loop.add_reader(self._ep.fileno(), self._round)
        else:
            self._thread = threading.Thread(target=self._run, name=f"nic{self.node}", daemon=True)
            self._thread.start()
        return self.address

    def _on_data_path(self) -> bool:
        """Whether the caller is on the thread that runs the data path."""
        if self._thread is not None:
            return threading.current_thread() is self._thread
        return self._loop is None or self._loop_thread == threading.get_ident()

    def go(self, proc: Proc) -> None:
        """Release ``proc`` if it waits after HELLO, or let it through at once when its HELLO comes."""
        if not self._on_data_path():
            self._command(self.go, proc)
            return
        rx = self._receiver(proc.job_id, proc.rank)
        if rx.go:
            return
        rx.go = True
        if rx.conn is not None:
            self._send_go(rx)

    def stats(self) -> dict:
        # list() snapshots under the GIL, so this is safe from a thread other than the data path's.
        receivers = list(self._rx.values())
        links = list(self._links.values())
        return {
            "messages_in": self._messages_in,
            "bytes_in": self._bytes_in,
            "messages_out": self._messages_out,
            "bytes_out": self._bytes_out,
            "arrivals": self._arrivals,
            "unconsumed": sum(len(rx.queue) + rx.ahead for rx in receivers),
            "in_flight": sum(1 for link in links for e in list(link.queue) if e[2] is not None),
            "waiting": sum(1 for rx in receivers if rx.want is not None),
            "connections": len(self._conns),
        }

    def unconsumed(self, proc: Proc) -> int:
        rx = self._rx.get((proc.job_id, proc.rank))
        return len(rx.queue) + rx.ahead if rx is not None else 0

    def drop_job(self, job_id: str) -> None:
        """Forget a finished job's receivers and unconsumed messages (the agent calls it when a job ends)."""
        if not self._on_data_path():
            self._command(self.drop_job, job_id)
            return
        for key in [k for k in self._rx if k[0] == job_id]:
            del self._rx[key]
        self._failed.pop(job_id, None)

    async def close(self) -> None:
        """Closes every connection and stops the data path."""
        if self._ep is None or self._closing:
            return
        self._closing = True
        if self._thread is not None:
            self._command(None)
            self._thread.join(timeout=10)
            self._thread = None
        else:
            self._loop.remove_reader(self._ep.fileno())
            self._shutdown()

    # ---------------------------------------------------------------------------------------------------
    # The data path: a thread of its own (push mode), or rounds on the agent's loop (report mode)

    def _command(self, fn, *args) -> None:
        """Run fn(*args) on the data path (None: stop the data thread)."""
        if self._thread is None and self._loop is not None:
            self._loop.call_soon_threadsafe(fn, *args)
            return
        self._commands.append((fn, args))
        try:
            os.eventfd_write(self._wake, 1)
        except OSError:
            pass  # closed: the thread is gone

    def _hook(self, fn, *args) -> None:
        """Run fn(*args) on the agent's loop, after every hook handed over before it. From the data
        thread, the agent's loop is woken once per round (:meth:`_wake_hooks`), after the frames of the
        round went out: a message is not kept waiting for the wake-up of another thread."""
        if self._thread is None:
            try:
                fn(*args)
            except Exception:
                log.exception("nic %d: %s hook failed", self.node, getattr(fn, "__name__", fn))
            return
        self._hooks_q.append((fn, args))

    def _wake_hooks(self) -> None:
        if self._hooks_q and not self._hooks_pending:
            self._hooks_pending = True
            try:
                self._loop.call_soon_threadsafe(self._run_hooks)
            except RuntimeError:
                pass  # the agent's loop is closed: nobody listens any more

    def _run_hooks(self) -> None:
        self._hooks_pending = False  # before draining: a hook handed over from now on gets a new call
        q = self._hooks_q
        while q:
            fn, args = q.popleft()
            try:
                fn(*args)
            except Exception:
                log.exception("nic %d: %s hook failed", self.node, getattr(fn, "__name__", fn))

    def _run(self) -> None:
        # The relay is what every message waits for: as prompt as the agent's timer (priority.py).
        raise_thread_priority()
        ep = self._ep
        try:
            while self._process(ep.poll()):
                if self._hooks_q:
                    self._wake_hooks()
        except Exception:
            log.exception("nic %d: data thread failed", self.node)
        finally:
            self._shutdown()
            self._wake_hooks()

    def _round(self) -> None:
        """One round on the agent's loop: whatever is ready now."""
        try:
            self._process(self._ep.poll(0))
        except Exception:
            log.exception("nic %d: data path failed", self.node)

    def _process(self, events) -> bool:
        """Handles one epoll round; False once told to stop."""
        wake, timerfd, listeners, by_fd = self._wake, self._timerfd, self._listeners, self._by_fd
        for fd, mask in events:
            if fd == wake:
                if not self._run_commands():
                    return False
                continue
            if fd == timerfd:
                self._on_timer()
                continue
            if fd in listeners:
                self._accept(listeners[fd])
                continue
            conn = by_fd.get(fd)
            if conn is None:
                continue
            if mask & select.EPOLLOUT:
                if conn.connecting is not None:
                    self._connected(conn)
                elif conn.out is not None:
                    conn.flush()
            if mask & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR) and not conn.closed:
                conn.readable()
        return True

    def _run_commands(self) -> bool:
        try:
            os.eventfd_read(self._wake)
        except BlockingIOError:
            pass
        q = self._commands
        while q:
            fn, args = q.popleft()
            if fn is None:
                return False
            try:
                fn(*args)
            except Exception:
                log.exception("nic %d: command failed", self.node)
        return True

    def _shutdown(self) -> None:
        self._closing = True
        for conn in list(self._conns):
            self._close_conn(conn)
        self._out.clear()
        self._links.clear()
        self._timers.clear()
        self._ep.close()
        self._listen.close()
        if self._listen_unix is not None:
            self._listen_unix.close()
        os.close(self._timerfd)
        wake, self._wake = self._wake, -1
        os.close(wake)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("nic %d: accept failed: %s", self.node, exc)
                return
            self._add_conn(sock)

    def _add_conn(self, sock: socket.socket, events: int = select.EPOLLIN) -> _Conn:
        sock.setblocking(False)
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(self, sock)
        self._conns.add(conn)
        self._by_fd[conn.fd] = conn
        self._ep.register(conn.fd, events)
        return conn

    def _watch_write(self, conn: _Conn, on: bool) -> None:
        if not conn.closed:
            self._ep.modify(conn.fd, select.EPOLLIN | (select.EPOLLOUT if on else 0))

    def _close_conn(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        try:
            self._ep.unregister(conn.fd)
        except (OSError, ValueError):
            pass
        self._by_fd.pop(conn.fd, None)
        conn.sock.close()
        self._conn_lost(conn)

    def _at(self, deadline: float, fn, *args) -> None:
        """fn(*args) on the data thread at CLOCK_MONOTONIC ``deadline`` (a timerfd: microseconds, not the
        whole milliseconds of an epoll timeout)."""
        heapq.heappush(self._timers, (deadline, next(self._timer_seq), fn, args))
        if self._timers[0][0] != self._timer_armed:
            self._timer_armed = self._timers[0][0]
            _timerfd_set(self._timerfd, self._timer_armed)

    def _on_timer(self) -> None:
        # No read of the timerfd: setting it (below, always) clears its expirations, so it is not readable
        # again until the new deadline, and a read is one more hand-over of the GIL (see _libc).
        timers = self._timers
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            _, _, fn, args = heapq.heappop(timers)
            fn(*args)
        self._timer_armed = timers[0][0] if timers else 0.0
        _timerfd_set(self._timerfd, self._timer_armed)

    # ---------------------------------------------------------------------------------------------------
    # Frames

    def _receiver(self, job: str, rank: int) -> _Rx:
        rx = self._rx.get((job, rank))
        if rx is None:
            rx = self._rx[(job, rank)] = _Rx(Proc(job, rank))
        return rx

    def _frame(self, conn: _Conn, ftype: int, mode: int, a: int, b: int, c: int, buf, off, end) -> None:
        """One frame that came on ``conn``: its header's fields, its body ``buf[off + HEADER.size:end]``
        (apps/wire.py says what each type carries). The data path's frames first."""
        if ftype == DATA:
            self._on_data(conn, mode, a, b, c, off, end)
        elif ftype == RECV:
            self._on_recv(conn, mode, a, c)
        elif ftype == BLOCKED:
            rx = self._local_rx(conn)
            # A BLOCKED that crossed the delivery on the wire refers to a RECV already answered.
            if rx.want is not None and self.report_messages:
                self._event(ReceiverBlocked(rx.proc))
        elif ftype == SEND_BLOCKED:
            self._on_send_blocked(conn, a)
        elif ftype == NIC_ACK:
            self._on_nic_ack(conn, a, _body(buf, off, end))
        elif ftype == COOP:
            self._on_coop(conn, _body(buf, off, end))
        elif ftype == NIC_HELLO:
            if conn.job is not None or conn.nic_peer is not None:
                raise _ProtocolError("NIC_HELLO on a connection already introduced")
            conn.nic_peer = _text(self._keyed(_body(buf, off, end)))
            conn.src_link = None if conn.nic_peer == self.address else conn.nic_peer
        elif ftype == COLL_ENTER or ftype == COLL_LEAVE:
            rx = self._local_rx(conn)
            if self.report_messages:
                cls = CollectiveEnter if ftype == COLL_ENTER else CollectiveLeave
                self._event(cls(rx.proc, _text(_body(buf, off, end))))
        elif ftype == PROGRESS:
            rx = self._local_rx(conn)
            body = _body(buf, off, end)
            if len(body) < PROGRESS_VALUE.size:
                raise _ProtocolError(f"a PROGRESS frame of {len(body)} bytes, too short for its value")
            (value,) = PROGRESS_VALUE.unpack_from(body)
            self._hook(self.hooks.on_progress, rx.proc, _text(body[PROGRESS_VALUE.size :]), value)
        elif ftype == HELLO:
            self._on_hello(conn, a, b, self._keyed(_body(buf, off, end)))
        elif ftype == PEER:
            self._on_peer(conn, a, b, self._keyed(_body(buf, off, end)))
        elif ftype == BYE:
            conn.bye = True
        elif ftype == ACK:
            pass  # _Conn.readable applied the count in the reserved field
        else:
            raise _ProtocolError(f"unknown frame type {ftype}")

    def _on_data(self, conn: _Conn, mode: int, src: int, dst: int, tag: int, off: int, end: int) -> None:
        """A message for rank ``dst`` of the connection's job: into its receiver's queue, through the
        emulated link when it came from another node; acknowledged once there if it asks (WANT_ACK). A
        SIZED message's bytes are the count it declares: the link transmits that many (apps/wire.py)."""
        if conn.job is None:
            raise _ProtocolError("DATA before HELLO/PEER")
        nbytes = end - off - HEADER.size
        sent_at = None
        if mode & STAMPED:
            if nbytes < STAMP.size:
                raise _ProtocolError(f"a stamped DATA frame of {nbytes} bytes, too short for its stamp")
            nbytes -= STAMP.size
            if conn.same_clock:
                (sent_at,) = STAMP.unpack_from(conn.view, off + HEADER.size)
        if mode & SIZED:
            if nbytes != SIZE.size:
                raise _ProtocolError(f"a sized DATA frame with {nbytes} bytes for its {SIZE.size}-byte count")
            (nbytes,) = SIZE.unpack_from(conn.view, end - SIZE.size)
        self._messages_in += 1
        self._bytes_in += nbytes
        rx = self._rx.get((conn.job, dst)) or self._receiver(conn.job, dst)
        ack = (conn.job, src, conn.ack_to) if mode & WANT_ACK else None
        if conn.src_link is not None and self._emulate_link:
            # A stamped frame is rewritten to say when it is due: a bytearray, one copy as bytes() is.
            frame = bytearray(conn.view[off:end]) if mode & STAMPED else bytes(conn.view[off:end])
            self._delay(conn.src_link, rx, (src, tag, frame), nbytes, ack, sent_at)
        else:
            msg = (src, tag, bytes(conn.view[off:end]))  # one copy (a bytearray slice would make two)
            if mode & STAMPED:  # not delayed here: nothing to hold it for (a stamp of 0 is long past)
                msg = (src, tag, bytearray(msg[2]))
                STAMP.pack_into(msg[2], HEADER.size, 0.0)
            self._arrive(rx, msg)
            if ack is not None:
                self._ack(*ack)

    def _on_recv(self, conn: _Conn, mode: int, src: int, tag: int) -> None:
        """The worker asks for a message from ``src`` with ``tag`` (either may be ANY), waiting in wait
        mode ``mode``: answered at once if one is here, else when one arrives (or the job fails)."""
        rx = self._local_rx(conn)
        if rx.want is not None:
            raise _ProtocolError("RECV while a RECV is pending")
        if mode >= len(WAIT_MODES):
            raise _ProtocolError(f"bad wait mode {mode}")
        rx.want = (src, tag, mode)
        if not self._try_deliver(rx):
            if conn.job in self._failed:
                self._fail(rx, self._failed[conn.job])
            elif self.report_messages:
                self._event(ReceiverWaiting(rx.proc, WAIT_MODES[mode]))

    def _on_send_blocked(self, conn: _Conn, number: int) -> None:
        """The worker's wait for the acknowledgement of its send ``number`` stopped spinning."""
        rx = self._local_rx(conn)
        if number > rx.delivered:  # else its DELIVERED crossed it on the wire: the send is done
            if conn.job in self._failed:
                self._fail(rx, self._failed[conn.job])
            else:
                rx.send_blocked = True
                if self.report_messages:
                    self._event(SenderBlocked(rx.proc))

    def _on_nic_ack(self, conn: _Conn, rank: int, body: bytes) -> None:
        """Another NIC acknowledges a message from rank ``rank`` of job ``body``, a worker of this node."""
        if conn.nic_peer is None:
            raise _ProtocolError("NIC_ACK before NIC_HELLO")
        sender = self._rx.get((_text(body), rank))
        if sender is None:
            return  # the job ended here meanwhile
        if conn.src_link is not None and self._emulate_link:
            self._delay(conn.src_link, sender, None, 0, None)
        else:
            self._delivered(sender)

    def _on_hello(self, conn: _Conn, rank: int, pid: int, body: bytes) -> None:
        """A worker of this node connects: rank ``rank`` of job ``body``, process ``pid``."""
        if conn.job is not None:
            raise _ProtocolError("second HELLO/PEER on one connection")
        conn.job = _text(body)
        conn.rank = rank
        conn.local = True
        rx = self._receiver(conn.job, rank)
        if rx.conn is not None:
            raise _ProtocolError(f"{rx.proc} is already connected")
        rx.conn = conn
        conn.rx = rx
        if rx.go:  # the agent said go before the worker got here
            self._send_go(rx)
        self._hook(self.hooks.on_hello, rx.proc, pid)

    def _keyed(self, body) -> bytes:
        """An introduction's body without the run's key, which it must start with (any local process can
        reach a NIC: only the run's own workers and NICs know the key)."""
        if self._key is None:
            return bytes(body)
        key, sep, rest = bytes(body).partition(b"\n")
        if not sep or not hmac.compare_digest(key, self._key):
            raise _ProtocolError("a connection without this run's key")
        return rest

    def _on_peer(self, conn: _Conn, rank: int, node_id: int, body: bytes) -> None:
        """A worker of any node connects to send here: rank ``rank``, on node ``node_id - 1`` (0: it did
        not say), of the job and with the own NIC that ``body`` names."""
        if conn.job is not None:
            raise _ProtocolError("second HELLO/PEER on one connection")
        job, _, src_nic = _text(body).partition("\n")
        conn.job = job
        conn.rank = rank
        conn.src_link = None if src_nic == self.address else src_nic
        conn.ack_to = src_nic
        conn.same_clock = same_clock(src_nic, self.address)
        conn.peer_node = node_id - 1 if node_id > 0 else None

    def _send_go(self, rx: _Rx) -> None:
        rx.conn.write(HEADER.pack(0, GO, 1 if self._push else 0, 0, 0, 0, 0))
        if self._push:
            # Messages that came before GO were held; the standing receive takes them now, in order.
            q = rx.queue
            while q:
                self._push_msg(rx, q.popleft())
            if rx.proc.job_id in self._failed:
                self._fail(rx, self._failed[rx.proc.job_id])

    def _push_msg(self, rx: _Rx, msg: tuple) -> None:
        frame = msg[2]
        rx.ahead += 1
        self._messages_out += 1
        self._bytes_out += _payload_bytes(frame)
        rx.conn.write(frame)

    def _local_rx(self, conn: _Conn) -> _Rx:
        if not conn.local:
            raise _ProtocolError("only the worker's own-node connection may send this frame")
        return self._rx[(conn.job, conn.rank)]

    def _delay(
        self, src_link: str, rx: _Rx, msg: tuple | None, nbytes: int, ack: tuple | None, sent_at=None
    ) -> None:
        """Queues a message (``msg``; None: an acknowledgement) on the emulated link from ``src_link``.
        Its transmission starts when it was sent (``sent_at``, stamped by a sender on this host) or, if
        unknown, now; it is due ``latency`` after it is through. A stamped message is handed over
        DELIVERY_LEAD_S early, its due time in its stamp, and its receiver holds it until then."""
        link = self._links.get(src_link)
        if link is None:
            link = self._links[src_link] = _Link()
        now = time.monotonic()  # CLOCK_MONOTONIC, like Clock
        tdf = self.clock.tdf
        tx = nbytes / self.bandwidth_Bps * tdf if self.bandwidth_Bps else 0.0
        start = now if sent_at is None else min(now, sent_at)
        link.free_at = max(start, link.free_at) + tx
        due = link.free_at + self.latency_s * tdf
        at = due
        if msg is not None and isinstance(msg[2], bytearray):
            STAMP.pack_into(msg[2], HEADER.size, due)
            at = due - DELIVERY_LEAD_S
        link.queue.append((at, rx, msg, ack))
        if link.armed:
            return
        if link.queue[0][0] <= time.monotonic():
            # Due already (a stamped message whose relay took its lead): handed over now, not through the
            # timer, whose round trip on this thread added 30-60 us (docs/measurements.md,
            # "MPI over an emulated link").
            self._drain(link)
        else:
            link.armed = True
            self._at(link.queue[0][0], self._drain, link)

    def _drain(self, link: _Link) -> None:
        link.armed = False
        now = time.monotonic()
        q = link.queue
        while q and q[0][0] <= now:
            _, rx, msg, ack = q.popleft()
            if msg is None:
                self._delivered(rx)
                continue
            self._arrive(rx, msg)
            if ack is not None:
                self._ack(*ack)
        if q:
            link.armed = True
            self._at(q[0][0], self._drain, link)

    def _arrive(self, rx: _Rx, msg: tuple) -> None:
        self._arrivals += 1
        if self._push and rx.go and rx.conn is not None:
            self._push_msg(rx, msg)
            return
        rx.queue.append(msg)
        if self.report_messages:
            self._event(MessageArrived(rx.proc, msg[0], len(rx.queue)))
        if rx.want is not None:
            self._try_deliver(rx)

    def _try_deliver(self, rx: _Rx) -> bool:
        want_src, want_tag, _ = rx.want
        q = rx.queue
        for i, (src, tag, frame) in enumerate(q):
            if matches(src, tag, want_src, want_tag):
                if i == 0:
                    q.popleft()
                else:
                    del q[i]
                rx.want = None
                self._messages_out += 1
                self._bytes_out += _payload_bytes(frame)
                rx.conn.write(frame)
                if self.report_messages:
                    self._event(MessageConsumed(rx.proc, len(q)))
                return True
        return False

    # ---------------------------------------------------------------------------------------------------
    # Delivery acknowledgements

    def _ack(self, job: str, rank: int, nic: str | None) -> None:
        """A message that asked for an acknowledgement arrived here: acknowledge it to rank ``rank`` of
        ``job`` through its own NIC ``nic`` (None: this one)."""
        if nic is None or nic == self.address:
            sender = self._rx.get((job, rank))
            if sender is not None:
                self._delivered(sender)
            return
        if self._closing:
            return
        body = job.encode()
        self._to_nic(nic, HEADER.pack(len(body), NIC_ACK, 0, 0, rank, 0, 0) + body)

    def send_coop(self, nic: str, body: bytes) -> None:
        """Sends a local policy's CoopEvent (testbed/core/coop.py's bytes) to the node of NIC ``nic``, over
        the NIC-to-NIC connection the acknowledgements use (opened on first use)."""
        if not self._on_data_path():
            self._command(self.send_coop, nic, body)
            return
        if self._closing:
            return
        self._to_nic(nic, HEADER.pack(len(body), COOP, 0, 0, 0, 0, 0) + body)

    def _to_nic(self, nic: str, frame: bytes) -> None:
        out = self._out.get(nic)
        if out is None:
            out = self._out[nic] = _Out()
            self._connect_nic(nic, out)
        if out.conn is not None:
            out.conn.write(frame)
        else:
            out.pending.append(frame)

    def _on_coop(self, conn: _Conn, body: bytes) -> None:
        """Another node's policy's CoopEvent: to this node's policy once it is through the emulated link
        into this node (its own queue, not the data messages': a control message beside them)."""
        if conn.nic_peer is None:
            raise _ProtocolError("COOP before NIC_HELLO")
        if conn.src_link is None or not self._emulate_link:
            self._hook(self.hooks.on_coop, body)
            return
        tdf = self.clock.tdf
        tx = len(body) / self.bandwidth_Bps * tdf if self.bandwidth_Bps else 0.0
        self._at(time.monotonic() + tx + self.latency_s * tdf, self._hook, self.hooks.on_coop, body)

    def _connect_nic(self, addr: str, out: _Out) -> None:
        """Opens a connection to another NIC without waiting: :meth:`_connected` completes it."""
        name = local_socket_name(addr)
        if name is not None:
            sock, target = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), name
        else:
            host, port = split_address(addr)
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock, target = socket.socket(family, socket.SOCK_STREAM), (host, port)
        sock.setblocking(False)
        err = sock.connect_ex(target)
        if err not in (0, errno.EINPROGRESS, errno.EAGAIN):
            sock.close()
            self._unreachable(addr, out, os.strerror(err))
            return
        conn = self._add_conn(sock, select.EPOLLIN | select.EPOLLOUT)
        conn.connecting = out
        conn.out_to = addr

    def _connected(self, conn: _Conn) -> None:
        out, conn.connecting = conn.connecting, None
        addr = conn.out_to
        err = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._unreachable(addr, out, os.strerror(err))
            conn.out_to = None  # no reconnect bookkeeping for a connection that never was
            self._close_conn(conn)
            return
        if self._closing or self._out.get(addr) is not out:
            self._close_conn(conn)
            return
        hello = with_key(None if self._key is None else self._key.decode(), self.address.encode())
        frames, conn.out = b"".join(out.pending) + bytes(conn.out or b""), None
        self._watch_write(conn, False)
        conn.write(HEADER.pack(len(hello), NIC_HELLO, 0, 0, 0, 0, 0) + hello + frames)
        out.pending.clear()
        out.conn = conn

    def _unreachable(self, addr: str, out: _Out, why: str) -> None:
        # Its senders wait on; they are failed with their job (the NIC's node is gone).
        log.warning("nic %d: cannot reach NIC %s for acknowledgements: %s", self.node, addr, why)
        if self._out.get(addr) is out:
            del self._out[addr]

    def _delivered(self, rx: _Rx) -> None:
        """The acknowledgement of ``rx``'s send reached this (its own) NIC: hand it over, wake it."""
        rx.delivered += 1
        if rx.conn is not None:
            rx.conn.write(_DELIVERED)
        if rx.send_blocked:
            rx.send_blocked = False
            if self.report_messages:
                self._event(SenderWoken(rx.proc))

    def _fail(self, rx: _Rx, reason: str) -> None:
        rx.want = None
        rx.send_blocked = False
        body = reason.encode()
        rx.conn.write(HEADER.pack(len(body), ERROR, 0, 0, 0, 0, 0) + body)

    def _event(self, event) -> None:
        self._hook(self.hooks.on_local_event, event)

    def _conn_lost(self, conn: _Conn) -> None:
        self._conns.discard(conn)
        if conn.out_to is not None:
            out = self._out.get(conn.out_to)
            if out is not None and out.conn is conn:
                del self._out[conn.out_to]  # the next acknowledgement reconnects
        if conn.job is None:
            return
        if conn.local:
            rx = self._rx.get((conn.job, conn.rank))
            if rx is not None and rx.conn is conn:
                rx.conn = None
                rx.want = None
                self._hook(self.hooks.on_disconnect, rx.proc)
        gone = conn.job in self._failed or conn.job in self._dying
        if not conn.bye and not gone and not self._closing:
            # The worker died (no BYE): no receiver of its job waiting here may ever be answered, so fail
            # them rather than let them hang (the job has failed anyway). Not at once: its own node
            # reports how it died (killed by a signal, its error), and that should reach the
            # coordinator before the consequence does (its peers failing for want of it), which a
            # worker ending in a few ms of CPU would otherwise win.
            node = self.node if conn.local else conn.peer_node
            where = f" on node {node}" if node is not None else ""
            reason = f"rank {conn.rank}{where} of job {conn.job} disconnected without closing (died?)"
            self._dying.add(conn.job)
            self._at(time.monotonic() + DEAD_PEER_GRACE_S, self._fail_job, conn.job, reason)

    def _fail_job(self, job: str, reason: str) -> None:
        self._dying.discard(job)
        if job in self._failed or self._closing or not any(j == job for j, _ in self._rx):
            return  # already failed, or nothing of it is left here (drop_job)
        self._failed[job] = reason
        for (j, _), rx in self._rx.items():
            # A standing receive may block without the NIC knowing: tell every receiver of the job.
            if (
                j == job
                and rx.conn is not None
                and (rx.want is not None or rx.send_blocked or (self._push and rx.go))
            ):
                self._fail(rx, reason)
