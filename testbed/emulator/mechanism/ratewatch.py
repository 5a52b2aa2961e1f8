"""The rate watch: does the node get its CPU rate for the whole run, not just during the start-up probe?

docs/architecture.md, "The node's rate, watched". Every window (about :data:`WINDOW_S` real seconds, a
whole number of CFS periods, so that the quota's bursts at both ends of a window cancel) the agent reads its
node's cgroup (Envelope.rate_counters) and each of the node's threads' run-queue wait (the 2nd field of
/proc/<tid>/schedstat):

- ``cpu``: the CPU the node's processes got (cpuacct.usage, or cpu.stat's usage);
- ``wait``: the time they were runnable but not running (run-queue wait, summed over threads);
- ``explained``: what the node's own quota explains of that wait: each thread's wait up to the
  throttled periods (cpu.stat nr_throttled) times the part of a period a quota of q < 1 core leaves,
  ``P x (1 - q)``; at least the kernel's throttled time.

A period in which the node was throttled gave it its whole quota: every wait in it is the rate working
(a thread that runs its quota and then waits out the period waits ``P x (1 - q)``). The kernel's
throttled time alone misses part of it: measured here (cgroup v1, kernel 6.18), a quiet busy node at
rate 0.5 waited 45-50 ms a second more than its throttled time, which read as a 9-10 % error in the
window where its job began. What the quota does not explain (``wait - explained``) is CPU the node asked
for and the host gave to someone else. The CPU the node was entitled to in the window is what it got plus
that, at most its quota:

    entitled = min(quota x window, cpu + max(0, wait - explained))
    error    = 1 - cpu / entitled            (> 0: the node fell below its rate)

A window counts only when the node's threads were runnable (``cpu + wait``) for at least
:data:`MIN_RUNNABLE` of it: a node that mostly sleeps, waits for messages or is stopped by its policy says
little about its rate (what it says is the wake-ups' latency, not the quota's share). Counting every
window in which the node wanted half its quota, the quickstart's nodes read a median of 0.10-0.22 a
window on a host at load 4-8, much of it from waits after barrier wake-ups; counting runnable windows
only, 0.0.
Waits between the node's own threads (several runnable processes) are capped by the quota: a node that
used its whole quota lost nothing. The kernel adds a thread's wait when the thread next runs (or takes a
signal: a policy's SIGSTOP), so a throttled period's wait may land in the next window: what a thread's
explanation left unused in one window carries to the next, and no further.

Limits: a node starved for longer than a window shows it in the window where it runs again; a thread's
wait counts from the window after the one it started in (its wait before it joined the node's cgroup is
not the node's); explaining a throttled period's wait by ``P x (1 - q)`` may explain more than a thread
that slept part of the period waited (an error read too small, never too large).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Real seconds a window aims at; the window is the nearest whole number of CFS periods.
WINDOW_S = 1.0
#: A window counts when the node's threads were runnable (running or waiting) for at least this share of
#: it, summed over threads.
MIN_RUNNABLE = 0.5


def window_s(period_us: int) -> float:
    """The rate watch's window for a CFS period: the whole number of periods nearest :data:`WINDOW_S`."""
    return max(1, round(WINDOW_S * 1e6 / period_us)) * period_us / 1e6


def run_delays_ns(tids: list[int]) -> dict[int, int]:
    """Each thread's run-queue wait so far (ns; /proc/<tid>/schedstat's 2nd field); gone ones left out."""
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/{tid}/schedstat", "rb") as fh:
                out[tid] = int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return out


@dataclass(frozen=True)
class Window:
    """One window's figures, in real seconds; ``error`` None when the window does not count."""

    seconds: float
    cpu: float
    wait: float
    explained: float
    entitled: float
    error: float | None


def explained(quota_cores: float, period_s: float, throttled_s: float, throttled_periods: int) -> float:
    """The wait a node's own quota explains: the kernel's throttled time, or the throttled periods times
    what a quota under one core leaves of each, whichever is more (the module's doc)."""
    return max(throttled_s, throttled_periods * period_s * max(0.0, 1.0 - quota_cores))


def judge(seconds: float, quota_cores: float, cpu: float, wait: float, explained: float) -> Window:
    """The window's entitlement and error from its counters (the module's formula; ``explained``: the
    wait the quota explains)."""
    full = quota_cores * seconds
    entitled = min(full, cpu + max(0.0, wait - explained))
    error = 1.0 - cpu / entitled if entitled > 0 and cpu + wait >= MIN_RUNNABLE * seconds else None
    return Window(seconds, cpu, wait, explained, entitled, error)


class RateWatch:
    """Reads an envelope's counters window by window (``counters``: Envelope.rate_counters)."""

    def __init__(self, counters, quota_cores: float, period_s: float) -> None:
        self._counters = counters
        self.quota_cores = quota_cores
        self.period_s = period_s
        self._last: tuple[float, float, float, int, dict[int, int]] | None = None
        #: Per thread: what the last window's throttling explained and its wait did not use (s).
        self._carry: dict[int, float] = {}

    def _read(self, now: float) -> tuple[float, float, float, int, dict[int, int]] | None:
        got = self._counters()
        if got is None:
            return None
        cpu, throttled, periods, tids = got
        return now, cpu, throttled, periods, run_delays_ns(tids)

    def start(self, now: float) -> None:
        try:
            self._last = self._read(now)
        except (OSError, ValueError):
            self._last = None

    def sample(self, now: float) -> Window | None:
        """The window since the last call (``now``: CLOCK_MONOTONIC); None before :meth:`start`, or when
        the counters could not be read."""
        try:
            cur = self._read(now)
        except (OSError, ValueError):
            cur = None
        last, self._last = self._last, cur
        if last is None or cur is None or cur[0] <= last[0]:
            return None
        # Threads seen at both ends only: a new one's wait counts from its fork, when it was still in the
        # fork server's cgroup waiting among the host's processes (25 ms at load 4 here: a 4-7 % error in
        # the window where a quiet node's job began). Its CPU counts; its wait from the next window on.
        old = last[4]
        waits = {tid: max(0, v - old[tid]) / 1e9 for tid, v in cur[4].items() if tid in old}
        quota = self._explained(waits, cur[2] - last[2], cur[3] - last[3])
        return judge(cur[0] - last[0], self.quota_cores, cur[1] - last[1], sum(waits.values()), quota)

    def _explained(self, waits: dict[int, float], throttled_s: float, throttled_periods: int) -> float:
        """The window's wait that the node's quota explains: each thread's, up to the throttled periods
        times what a quota of q < 1 core leaves of each (:func:`explained`), plus what its last window's
        throttling explained and its wait did not use (the kernel adds a wait when the thread next runs,
        so a throttled period's wait may land in the next window); at least the kernel's throttled
        time."""
        cap = explained(self.quota_cores, self.period_s, 0.0, throttled_periods)
        total, carry = 0.0, {}
        for tid, w in waits.items():
            avail = cap + self._carry.get(tid, 0.0)
            used = min(w, avail)
            total += used
            carry[tid] = min(cap, avail - used)
        self._carry = carry
        return max(total, throttled_s)
