"""A finer clock for the nodes' CPU quotas: one SCHED_FIFO thread per CPU that wakes every ``tick_us``.

docs/measurements.md, "The quota is charged at the kernel's tick". The kernel charges a running task's CPU
to its cgroup's CFS quota only at scheduling events on its CPU and at the scheduler tick (``CONFIG_HZ``
250 here: every 4 ms). A node whose quota is 2.12 ms a 10 ms period (TDF 4.71) therefore runs on to the
next tick before it is throttled, and then sits the overrun out: a busy node ran 4.5 ms and stood 15.4
(medians) instead of 2.1 and 7.9. A rank woken in the node's off part waits it out (a node's wake-up
wait was 3-6 times a uniprocessor's), and a spinner sees its message only then. The period does not
shorten these parts; the tick does.

Each wake of a real-time thread on a CPU is a scheduling event there: the node task it preempts is
charged up to that moment, and throttled if its quota is spent. A thread per CPU at priority
:data:`FIFO_PRIORITY` (below the agents' loops, so they are never delayed) waking every 500 us made the
busy node run 2.1 ms and stand 7.9, as its quota says, and cut the wake-up wait beside one other process
from 1.39 to 0.56 emulated ms (a uniprocessor: 0.39). The cost: about 1.6 % of each CPU, and
paper003's NAS ranks spent 13-30 % more CPU: processes sharing a node take turns at every wake, whatever
their slices, and two sharing a CPU paid 4-11 % more CPU for the same work (benchmarks/
quota_tick_cost.py; docs/measurements.md, "What the quota tick costs, by its period"); hence off by
default.

The threads live in one process that the run's driver starts in its control cgroup (its RT runtime is
what lets them be real-time; controlgroup.py). It exits when its parent closes its stdin (or dies), and
the janitor kills it with the rest of the control cgroup should that fail.

    python -m testbed.emulator.mechanism.quotatick --tick-us 500 --cpus 0,1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

#: The ticks' SCHED_FIFO priority: above every CFS task (a node's), below the agents' loops (10).
FIFO_PRIORITY = 1
#: What the process prints once every thread is real-time on its CPU; anything else is why not.
READY = "ready"


class QuotaTickUnavailable(RuntimeError):
    """The ticks could not be started here (no real-time priority, a CPU not allowed); the text says why."""


def _tick(cpu: int, period_s: float, started: threading.Barrier, errors: list[str]) -> None:
    try:
        os.sched_setaffinity(0, {cpu})  # this thread only (Linux: 0 is the calling thread)
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(FIFO_PRIORITY))
    except OSError as e:
        errors.append(f"CPU {cpu}: SCHED_FIFO {FIFO_PRIORITY} refused ({e.strerror})")
        started.abort()
        return
    try:
        started.wait()
    except threading.BrokenBarrierError:
        return
    while True:
        time.sleep(period_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tick-us", type=int, required=True)
    ap.add_argument("--cpus", required=True, help="comma-separated CPU numbers")
    a = ap.parse_args(argv)
    cpus = [int(c) for c in a.cpus.split(",")]
    errors: list[str] = []
    started = threading.Barrier(len(cpus) + 1)
    for cpu in cpus:
        threading.Thread(target=_tick, args=(cpu, a.tick_us / 1e6, started, errors), daemon=True).start()
    try:
        started.wait()
    except threading.BrokenBarrierError:
        time.sleep(0.1)  # the failing thread appends before it aborts; the others may add theirs
        print("; ".join(errors) or "a tick thread failed", flush=True)
        return 3
    print(READY, flush=True)
    sys.stdin.read()  # until the driver closes it, or dies
    return 0


class QuotaTick:
    """The ticks' process, for one run: :meth:`start` it, :meth:`stop` it."""

    def __init__(self, tick_us: int, cpus: list[int] | None = None) -> None:
        self.tick_us = tick_us
        self.cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
        self.proc: subprocess.Popen | None = None

    def start(self) -> str:
        """Start the threads; returns a note for the summary. Raises :class:`QuotaTickUnavailable`."""
        cmd = [sys.executable, "-m", __name__, "--tick-us", str(self.tick_us)]
        cmd += ["--cpus", ",".join(map(str, self.cpus))]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != READY:
            self.stop()
            raise QuotaTickUnavailable(line or "the quota tick process exited at start")
        cpus = ",".join(map(str, self.cpus))
        return f"every {self.tick_us} us on CPUs {cpus} (SCHED_FIFO {FIFO_PRIORITY})"

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            p.stdin.close()
            p.wait(timeout=2)
        except (OSError, subprocess.TimeoutExpired):
            p.kill()
            p.wait()
        p.stdout.close()


if __name__ == "__main__":
    sys.exit(main())
