"""A spinning wait that leaves its node's last quota unspent (docs/architecture.md, "Spinning receivers,
guarded"; docs/measurements.md, "Issue 25: spinning receivers on real processes").

A node's CPU rate is a CFS quota: the node is a full-speed CPU for ``quota`` of every ``period``. A
receiver that spins (DCS, PB, 1GS; SB, CC and 2DCS for their spin time) spends that quota polling, so its
node sits throttled for the rest of the period, and a message that comes meanwhile is seen only when the
next period starts: on paper003-compare (TDF 4.71, 10 ms period) a CG.S job of 8 ranks ran 9x the
simulator's time under DCS, about one message hop a period. In the simulator the same node is a CPU of
rate q all the time: the spinner takes its share of it and sees the message as it comes.

So a guarded spin polls while its node has more than ``reserve`` of the period's quota left, and then
waits blocked for its message or the next period, whichever comes first: the node is not throttled by
polling, and the message, when it comes, finds the reserve to be seen and acted on at once. What it
costs the spinner's neighbours is at most the reserve a period (the share of the quota they get that a
spinner would have polled away); what it costs the accounts is the CPU not polled (a spinner reads up to
``reserve / quota`` less busy than in the simulator).

Where a period starts: the group's ``cpu.stat`` counts its periods (``nr_periods``, one each time the
kernel's period timer refills the quota), so a guarded spin that sees the count move knows a period
began since its last look, and keeps the most precise such instant it saw: the periods of a group stay on
one grid (the timer is forwarded by whole periods), whose phase is the group's own (measured: a throttled
spinner resumed within 60 us of one instant modulo the 10 ms period, 6.6 ms after a multiple of it). How
much the node spent: its cgroup's usage counter, read after the calling thread's own CPU clock, whose
read charges the thread's running time to the group (``task_sched_runtime`` runs ``update_curr``;
without it the counter lags by up to a tick, 4 ms at HZ 250, two quotas); another CPU's running thread
is counted up to its last tick, which the reserve covers in part.

Standard library only, opened lazily: a worker imports it (apps/tbcomm.py), and only a spinning wait
uses it.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass

from testbed.apps.environ import SPIN_GUARD

#: The worker's environment name (apps/environ.py): ``period_us,quota_us,reserve_us,stat_path,usage_path``
#: (unset: spins unguarded). ``usage_path`` empty: the usage is cpu.stat's ``usage_usec`` (cgroup v2);
#: else a file of nanoseconds (v1's cpuacct.usage).
ENV = SPIN_GUARD
#: Real seconds before a period is due that a paused spin polls again, so that it sees the period begin
#: (and keeps its phase true) at the cost of this much of the reserve.
EARLY_S = 60e-6
#: A period's start seen within this many real seconds of the look before it (a spin polled across it)
#: always replaces the one kept.
FINE_S = 100e-6


@dataclass(frozen=True)
class GuardSpec:
    """What a worker needs to guard its spins: its node's CFS period and quota (real us), the reserve a
    spin leaves (real us of CPU a period), and the node cgroup's files: cpu.stat, and the usage file where
    cpu.stat has no usage (v1)."""

    period_us: int
    quota_us: int
    reserve_us: int
    stat_path: str
    usage_path: str = ""

    def to_env(self) -> dict[str, str]:
        fields = (self.period_us, self.quota_us, self.reserve_us, self.stat_path, self.usage_path)
        return {ENV: ",".join(str(f) for f in fields)}

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> GuardSpec | None:
        value = env.get(ENV)
        if not value:
            return None
        period, quota, reserve, stat, usage = value.split(",", 4)
        return cls(int(period), int(quota), int(reserve), stat, usage)


class SpinGuard:
    """Tells a spinning wait when to stop polling until the next period (:meth:`pause_s`)."""

    def __init__(self, spec: GuardSpec) -> None:
        self.period_s = spec.period_us / 1e6
        self.quota_s = spec.quota_us / 1e6
        # Never more than half the quota: a spinner must still poll for part of each period.
        self.limit_s = (spec.quota_us - min(spec.reserve_us, spec.quota_us // 2)) / 1e6
        self.spec = spec
        self._fds: list[int] = []  # cpu.stat's, then the usage file's (v1); kept open: read each poll
        self._off = False  # set once the files could not be read: unguarded from then on
        self._periods = -1  # cpu.stat's nr_periods at the last look
        self._last = -math.inf  # when the last look was (CLOCK_MONOTONIC s)
        self._period: int | None = None  # the period (since ``_edge``) of the last look
        self._base_s = 0.0  # the node's usage when that period began, as far as it is known
        self._edge: float | None = None  # an instant at which one of the node's periods began
        self._edge_err = math.inf  # how much earlier than ``_edge`` that period may have begun

    def _read(self) -> tuple[int, float]:
        """(periods so far, the node's CPU seconds so far, this thread's running time included)."""
        time.thread_time()  # charges this thread's time since its last tick to the group (module doc)
        if not self._fds:
            paths = (
                (self.spec.stat_path, self.spec.usage_path)
                if self.spec.usage_path
                else (self.spec.stat_path,)
            )
            self._fds = [os.open(p, os.O_RDONLY | os.O_CLOEXEC) for p in paths]
        stat = os.pread(self._fds[0], 4096, 0).split()
        periods = int(stat[stat.index(b"nr_periods") + 1])
        if len(self._fds) > 1:
            return periods, int(os.pread(self._fds[1], 64, 0)) / 1e9
        return periods, int(stat[stat.index(b"usage_usec") + 1]) / 1e6

    def pause_s(self, now: float) -> float:
        """0 while the node has more than the reserve of this period's quota left at ``now`` (a
        CLOCK_MONOTONIC reading), or while no period's start has been seen; else the real seconds to wait
        blocked, until just before the next period."""
        if self._off:
            return 0.0
        try:
            periods, used = self._read()
        except (OSError, ValueError) as exc:
            # The node's cgroup files unreadable (another envelope's layout, a node being torn down):
            # spin as unguarded rather than fail the rank for what only shapes its timing, and say so
            # once, in the rank's log, since its spins now poll its node into throttling.
            self._off = True
            print(
                f"spin guard off: its node's cgroup files ({self.spec.stat_path}) could not be read "
                f"({type(exc).__name__}: {' '.join(str(exc).split())}); this process's spinning waits "
                "poll its node's whole quota from now on (cluster.spin_reserve_us has no effect)",
                file=sys.stderr,
                flush=True,
            )
            return 0.0
        if periods != self._periods:
            self._seen_start(now, now - self._last)
            self._periods = periods
            self._period = None  # a period began: its use is counted afresh
        self._last = now
        if self._edge is None:
            return 0.0
        into = (now - self._edge) % self.period_s
        period = math.floor((now - self._edge) / self.period_s)
        if period != self._period:
            # The first look in this period: count its use from its start, taking the node as having run
            # since then (a rank that computed up to its receive did), which can only pause a spin early.
            self._period = period
            self._base_s = used - min(into, self.quota_s)
        if used - self._base_s < self.limit_s:
            return 0.0
        return max(0.0, self.period_s - into - EARLY_S)

    def _seen_start(self, now: float, err: float) -> None:
        """A period began within ``err`` before ``now`` (the kernel counted one since the last look): keep
        the most precise such instant, and any fine one (a grid that moved is followed)."""
        if err <= max(self._edge_err, FINE_S):
            self._edge, self._edge_err = now, err
