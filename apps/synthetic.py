"""The synthetic test program of paper 002, fig. 6 (ALGORITHMS.md §3), as one rank of a tbcomm job.

``python -m testbed.apps.synthetic --iterations N --gcomp G --gio K --io-bytes B --io-time-ms T
[--no-barrier] [--wait-mode M --spin-us U]``

N times: compute G work units; K writes of B bytes to a real file in TB_IO_DIR, each padded with sleep
to at least T emulated ms; barrier (all send to rank 0, rank 0 replies after hearing from all). After
each barrier it reports PROGRESS("barriers", i + 1) ("iterations" with --no-barrier). Exit 0 on success;
otherwise one line on stderr saying why, and a non-zero exit.
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
    args = p.parse_args(argv)
    for name in ("iterations", "gio", "io_bytes"):
        if getattr(args, name) < 0:
            p.error(f"--{name.replace('_', '-')} must be >= 0")
    if args.gcomp < 0 or args.io_time_ms < 0:
        p.error("--gcomp and --io-time-ms must be >= 0")
    return args


def run(args: argparse.Namespace, env=os.environ) -> None:
    iters_per_unit = 0
    if args.gcomp > 0:
        try:
            iters_per_unit = int(env["TB_ITERS_PER_UNIT"])
        except (KeyError, ValueError):
            raise CommError("TB_ITERS_PER_UNIT is not set to an integer (calibration missing)") from None
    fd = -1
    if args.gio > 0:
        io_dir = env.get("TB_IO_DIR")
        if not io_dir:
            raise CommError("TB_IO_DIR is not set, but --gio > 0 needs a directory for the I/O file")
        path = os.path.join(io_dir, f"{env.get('TB_JOB', 'job')}.{env.get('TB_RANK', '0')}.io")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    comm = Comm.from_env(env)  # returns at GO: nothing above counts as job work
    if args.wait_mode:
        comm.mode = args.wait_mode
    if args.spin_us is not None:
        comm.spin_us = args.spin_us
    io_real_s = args.io_time_ms * comm.tdf / 1000.0
    block = b"\xa5" * args.io_bytes
    written = 0
    unit = "iterations" if args.no_barrier else "barriers"
    try:
        for i in range(args.iterations):
            work(args.gcomp, iters_per_unit)
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
            if not args.no_barrier:
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
