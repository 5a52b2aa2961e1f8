"""The tbcomm wire format: the one definition the worker side (apps/tbcomm.py) and the NIC
(testbed/emulator/nic.py) both use (docs/architecture.md, "Messages").

Each frame is a 20-byte header ``struct "!IBBHiii"`` = (body length, frame type, mode, reserved, a, b, c)
followed by the body. The frame types below say what each field carries. The reserved field ("H"), in a
frame a worker sends to its own NIC, carries how many pushed messages the worker consumed since its
previous frame (standing receive only; 0 otherwise); other NICs ignore it.

Also here, because both ends must agree on them: how a receive matches a message (:func:`matches`), the
wait modes and their codes in the RECV frame's mode byte, and the abstract Unix socket a loopback NIC
listens on (:func:`local_socket_name`).

Standard library only, and nothing else of the testbed: a worker imports it, and a worker's import time
matters (16+ workers start at once on two cores).
"""

from __future__ import annotations

import struct

HEADER = struct.Struct("!IBBHiii")

# HELLO, PEER and NIC_HELLO introduce a connection; their body starts with the run's key and a newline
# when the run has one (with_key): a NIC takes no connection that does not know it.
HELLO = 1  # worker -> own NIC: a=rank, b=pid, body=job id; the worker then waits for GO
PEER = 2  # worker -> any NIC it sends to: a=rank, b=its node + 1 (0: unknown), body=job id + "\n" + own NIC
GO = 3  # NIC -> worker: start; mode=1: standing receive (the NIC pushes messages, the worker sends no RECV)
DATA = 4  # worker -> NIC: a=src rank, b=dst rank, c=tag, body=payload; forwarded to the receiver; mode bits:
# WANT_ACK: the sender waits for the acknowledgement of the message's arrival here (DELIVERED);
# STAMPED: the body starts with a STAMP before the payload (see STAMP);
# SIZED: the payload is not carried, only its byte count (see SIZE)
RECV = 5  # worker -> own NIC: mode=wait mode code, a=src or ANY, c=tag or ANY; answered by one DATA or ERROR
BLOCKED = 6  # worker -> own NIC: the pending RECV stopped spinning and now blocks
COLL_ENTER = 7  # worker -> own NIC: body=op name
COLL_LEAVE = 8  # worker -> own NIC: body=op name
PROGRESS = 9  # worker -> own NIC: body=float64 value (PROGRESS_VALUE) + unit name
ERROR = 10  # NIC -> worker: body=reason; the pending RECV can never be satisfied
BYE = 11  # worker -> NIC: clean close follows (an EOF without BYE means the worker died)
ACK = 12  # worker -> own NIC: nothing but the acknowledgement count in the reserved field
DELIVERED = 13  # NIC -> worker: its latest DATA with WANT_ACK is in the receiving NIC's buffer
SEND_BLOCKED = 14  # worker -> own NIC: its wait for DELIVERED stopped spinning and blocks; a=its number
# (the worker's count of DATA frames with WANT_ACK), so one that crossed its DELIVERED on the wire is ignored
NIC_HELLO = 15  # NIC -> NIC: first frame on a NIC-to-NIC connection; body=the connecting NIC's address
NIC_ACK = 16  # NIC -> NIC: a=sender rank, body=job id: a DATA with WANT_ACK from that worker arrived
COOP = 17  # NIC -> NIC: body=a local policy's CoopEvent for the receiving node (testbed/core/coop.py)

#: DATA mode bits (see DATA).
WANT_ACK = 1
STAMPED = 2
SIZED = 4
#: A STAMPED DATA frame's time (CLOCK_MONOTONIC seconds), ahead of its payload. From the sender: when it
#: sent the message, so that a NIC on the same host starts the emulated link's delay there, not when the
#: relay got the frame (the relay's own tens of microseconds would add to the latency). From the NIC to
#: the receiver: when the message is due; the NIC hands it over a little early (its wake-up and the
#: receiver's would add to the latency as well) and the receiver holds it until then.
STAMP = struct.Struct("!d")
#: A SIZED DATA frame's body after its STAMP (if STAMPED), and all of it: the byte count of a message whose
#: bytes travel another way (the mpi kind's mirror of an MPI message: MPI moves the data, as a real
#: cluster's NIC would without the host's CPU). The NIC's emulated link transmits that many bytes (its
#: bandwidth) and counts them; the receiver gets an empty payload. The frame bound (:func:`frame_bound`)
#: applies to the frame as to any (its body is 8 or 16 bytes), not to the count: it bounds what a NIC and
#: a worker allocate for a frame, and nothing is allocated for a sized message's bytes.
SIZE = struct.Struct("!Q")

#: The value at the start of a PROGRESS frame's body (the unit's name follows).
PROGRESS_VALUE = struct.Struct("!d")
#: The most acknowledgements the reserved field carries (more go in ACK frames).
MAX_ACKS = 0xFFFF

#: The largest frame body a NIC takes at all: a program whose messages are known to be larger cannot
#: run on real processes (runner.preflight refuses it). A run's NICs take less: :func:`frame_bound`.
MAX_FRAME_BODY = 64 * 2**20
#: The smallest bound: room for the control frames (HELLO, PEER, PROGRESS: ids, addresses, names).
MIN_FRAME_BODY = 64 * 1024


def frame_bound(largest_message: int | None) -> int:
    """The largest frame body a run's NICs take, given its jobs' largest message in bytes (None: a
    program that does not say, a user's MPI program): a connection whose frame claims more is closed
    before the NIC allocates for it, and a worker refuses to send more."""
    if largest_message is None:
        return MAX_FRAME_BODY
    return min(MAX_FRAME_BODY, max(MIN_FRAME_BODY, largest_message + STAMP.size))


#: Any source rank, or any (user) tag, in a receive.
ANY = -1

#: How a process waits for a message (tbcomm and the simulator): burning CPU, blocked in the kernel, or
#: spinning ``spin_time_us`` first and then blocking. A RECV frame's mode byte is the mode's index here.
WAIT_MODES = ("spin", "block", "spin-block")
SPIN, BLOCK, SPIN_BLOCK = range(len(WAIT_MODES))  # the codes of the three modes, in that order
#: How a send waits for the receiving NIC's acknowledgement; "none" does not wait (no acknowledgement).
SEND_WAITS = ("none", *WAIT_MODES)


def matches(msg_src: int, msg_tag: int, want_src: int, want_tag: int) -> bool:
    """Whether a message from ``msg_src`` with ``msg_tag`` answers a receive of (``want_src``,
    ``want_tag``), either possibly ANY. ANY tag matches user tags only: negative tags are reserved for the
    collectives, so a user's ANY-tag receive never takes one of their messages."""
    if want_src != ANY and msg_src != want_src:
        return False
    return msg_tag == want_tag or (want_tag == ANY and msg_tag >= 0)


def with_key(key: str | None, body: bytes) -> bytes:
    """An introduction's body (HELLO, PEER, NIC_HELLO) with the run's key in front, when it has one."""
    return body if key is None else key.encode() + b"\n" + body


def split_address(addr: str) -> tuple[str, int]:
    """A NIC's ``HOST:PORT`` address as (host, port); an IPv6 host keeps its colons."""
    host, _, port = addr.rpartition(":")
    return host, int(port)


def _loopback(host: str) -> bool:
    return host in ("::1", "localhost") or host.startswith("127.")


def same_clock(addr_a: str, addr_b: str) -> bool:
    """Whether the NICs at two addresses read one CLOCK_MONOTONIC (one host), so that a time stamped at one
    means the same at the other: both on loopback (the Ray nodes of one machine), or one host name."""
    a, b = split_address(addr_a)[0], split_address(addr_b)[0]
    return a == b or (_loopback(a) and _loopback(b))


def local_socket_name(addr: str) -> str | None:
    """The abstract Unix socket a NIC at loopback ``addr`` also listens on (None for another address).

    A loopback address and an abstract socket are reachable from exactly the same places (one network
    namespace), and a Unix socket hop costs about 30 % less than a loopback TCP one here (5.3-6.7 against
    7.5-9.4 us one way, ping-pong): so on one host every tbcomm hop takes the Unix socket."""
    host, port = split_address(addr)
    if _loopback(host):
        # The host too: two loopback addresses (127.0.0.2, 127.0.0.3: two Ray nodes of one machine) may
        # each have a NIC on the same port.
        return f"\0testbed-nic-{host}-{port}"
    return None
