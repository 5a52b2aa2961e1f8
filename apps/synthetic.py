"""The synthetic test program of paper 002, fig. 6 (ALGORITHMS.md §3), as one rank of a tbcomm job.

``python -m testbed.apps.synthetic --iterations N --gcomp G --gio K --io-bytes B --io-time-ms T
[--no-barrier] [--wait-mode M --spin-us U] [--pattern P --msg-bytes S --msgs R] [--memory-mb M]``

N times: compute G work units; K writes of B bytes to a real file in TB_IO_DIR, each padded with sleep
to at least T emulated ms; barrier (all send to rank 0, rank 0 replies after hearing from all). After
each barrier it reports PROGRESS("barriers", i + 1) ("iterations" with --no-barrier). Exit 0 on success;
otherwise one line on stderr saying why, and a non-zero exit.

Paper 000's best-effort process: with ``--pattern`` ring | neighbour | alltoall | rank0 the barrier is
replaced by R rounds of that point-to-point exchange (:func:`pattern_plan`) with S-byte payloads, real
sends and receives through tbcomm (no collective notices: they are not collectives), reported as
PROGRESS("iterations", i + 1). Round g of the run uses tag g % 2: a peer is never more than one round
ahead (it needs this rank's message of the round to finish it), so any-source receives with that tag
take exactly this round's messages.

``--memory-mb M`` allocates M MiB at start and writes one byte in every 4 KiB page before connecting
(start-up, not job work), so the memory is resident; each iteration rewrites a 1/16 stride of the pages
(every page once every 16 iterations) so it stays resident.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from testbed.apps.tbcomm import MODES, Comm, CommError
from testbed.apps.work import work

#: The I/O file wraps around at this size: the writes stay real, the disk use stays bounded.
IO_FILE_CAP = 16 * 1024 * 1024
PAGE = 4096
#: Each iteration rewrites one page in this many (a different one each time), so pages stay resident.
TOUCH_EVERY = 16

#: Per-iteration communication patterns (paper 000 best-effort process); shared with testbed.jobs, the sim.
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


def allocate(memory_mb: float) -> bytearray | None:
    """``memory_mb`` MiB, every page written once (resident, not just reserved)."""
    n = int(memory_mb * 1024 * 1024)
    if n <= 0:
        return None
    mem = bytearray(n)  # zero pages mapped lazily: only the writes below make them resident
    mem[::PAGE] = b"\x01" * len(range(0, n, PAGE))
    return mem


def touch(mem: bytearray | None, i: int) -> None:
    """Rewrites one page in TOUCH_EVERY (offset rotating with ``i``): cheap, and keeps the pages in use."""
    if mem is None:
        return
    start = (i % TOUCH_EVERY) * PAGE
    step = PAGE * TOUCH_EVERY
    count = len(range(start, len(mem), step))
    if count:
        mem[start::step] = bytes([i & 0xFF | 1]) * count


def exchange(comm: Comm, plan: tuple[bool, tuple[int, ...], tuple[int, ...]], payload: bytes, tag: int):
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


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m testbed.apps.synthetic", description=__doc__.split("\n")[0])
    p.add_argument("--iterations", type=int, required=True)
    p.add_argument("--gcomp", type=float, default=0.0, help="work units per iteration")
    p.add_argument("--gio", type=int, default=0, help="writes per iteration")
    p.add_argument("--io-bytes", type=int, default=8193)
    p.add_argument("--io-time-ms", type=float, default=1.0, help="emulated ms each write takes at least")
    p.add_argument("--no-barrier", action="store_true")
    p.add_argument("--wait-mode", choices=MODES, default=None, help="default: TB_WAIT_MODE, else block")
    p.add_argument("--spin-us", type=float, default=None, help="spin-block: emulated us to spin first")
    p.add_argument("--pattern", choices=PATTERNS, default="barrier", help="per-iteration communication")
    p.add_argument("--msg-bytes", type=int, default=0, help="payload of each point-to-point message")
    p.add_argument("--msgs", type=int, default=1, help="rounds of the pattern per iteration")
    p.add_argument("--memory-mb", type=float, default=0.0, help="MiB to allocate and keep resident")
    args = p.parse_args(argv)
    for name in ("iterations", "gio", "io_bytes"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.gcomp < 0 or args.io_time_ms < 0 or args.memory_mb < 0:
        p.error("--gcomp, --io-time-ms and --memory-mb must be >= 0")
    if args.msg_bytes < 0 or args.msgs < 0:
        p.error("--msg-bytes and --msgs must be >= 0")
    if args.pattern == "barrier" and (args.msg_bytes or args.msgs != 1):
        p.error("--pattern barrier takes no --msg-bytes and one round (--msgs 1); use --pattern rank0")
    if args.no_barrier and args.pattern != "barrier":
        p.error("--no-barrier means no communication; it does not go with --pattern")
    return args


def run(args: argparse.Namespace, env=os.environ) -> None:
    fd = -1
    if args.gio > 0:
        io_dir = env.get("TB_IO_DIR")
        if not io_dir:
            raise CommError("TB_IO_DIR is not set, but --gio > 0 needs a directory for the I/O file")
        path = os.path.join(io_dir, f"{env.get('TB_JOB', 'job')}.{env.get('TB_RANK', '0')}.io")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    mem = allocate(args.memory_mb)
    comm = Comm.from_env(env)  # returns at GO: nothing above counts as job work
    if args.wait_mode:
        comm.mode = args.wait_mode
    if args.spin_us is not None:
        comm.spin_us = args.spin_us
    io_real_s = args.io_time_ms * comm.tdf / 1000.0
    block = b"\xa5" * args.io_bytes
    written = 0
    p2p = args.pattern != "barrier"
    unit = "iterations" if args.no_barrier or p2p else "barriers"
    plan = pattern_plan(args.pattern, comm.rank, comm.size) if p2p else None
    payload = b"\x5a" * args.msg_bytes
    rounds = 0
    try:
        for i in range(args.iterations):
            touch(mem, i)
            work(args.gcomp)
            for _ in range(args.gio):
                start = time.monotonic()
                if written + args.io_bytes > IO_FILE_CAP:
                    os.lseek(fd, 0, os.SEEK_SET)
                    written = 0
                os.write(fd, block)
                written += args.io_bytes
                left = start + io_real_s - time.monotonic()
                if left > 0:
                    time.sleep(left)
            if p2p:
                for _ in range(args.msgs):
                    exchange(comm, plan, payload, rounds & 1)
                    rounds += 1
            elif not args.no_barrier:
                comm.barrier()
            comm.progress(unit, i + 1)
    except BaseException:
        comm.abort()
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    comm.close()


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    who = f"synthetic: job {os.environ.get('TB_JOB', '?')} rank {os.environ.get('TB_RANK', '?')}"
    try:
        run(args)
    except (CommError, OSError) as exc:
        print(f"{who}: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"{who}: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:  # any other failure still gets its one-line reason
        print(f"{who}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
