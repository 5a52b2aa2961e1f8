"""The rate watch: does the node get its CPU rate for the whole run, not just during the start-up probe?

docs/architecture.md, "The node's rate, watched". Every window (about :data:`WINDOW_S` real seconds, a
whole number of CFS periods, so that the quota's bursts at both ends of a window cancel) the agent reads its
node's cgroup (Envelope.rate_counters) and each of the node's threads' CPU and run-queue wait (the 1st and
2nd fields of /proc/<tid>/schedstat):

- ``cpu``: the CPU the node's processes got (cpuacct.usage, or cpu.stat's usage);
- ``wait``: the time they were runnable but not running (run-queue wait, summed over threads);
- ``runnable`` and ``longest``: the threads' runnable times (each thread's CPU and wait, schedstat's 1st
  and 2nd fields), summed and the longest one, each less a wait that may have begun in the window before
  (:func:`runnable_times`);
- ``explained``: what the node's own quota explains of that wait: each thread's wait up to the
  throttled periods (cpu.stat nr_throttled) times the part of a period a quota of q < 1 core leaves,
  ``P x (1 - q)``; at least the kernel's throttled time.

A node of rate q computes at q while it has work: it is due q for every second one of its threads was
runnable, and no more than its quota for the window. Summed over threads, the runnable time counts twice
the time two of them were runnable together; the longest one thread's misses the time the others were
runnable alone; so the watch bounds the node's runnable time by both and takes from its counters which
of the two the waits speak for:

    rate     = min(q, 1 core)               (a thread runs on one core at most)
    entitled = min(q x window,
                   rate x runnable,
                   max(rate x longest, cpu + max(0, wait - explained)))
    error    = 1 - cpu / entitled           (> 0: the node fell below its rate)

``cpu + max(0, wait - explained)`` is what the node got plus the waits its quota does not explain: CPU
it asked for and the host gave to someone else, if each such wait was CPU lost. A period in which the
node was throttled gave it its whole quota: every wait in it is the rate working (a thread that runs its
quota and then waits out the period waits ``P x (1 - q)``; the kernel's throttled time alone misses part
of it: a quiet busy node at rate 0.5 waited 45-50 ms a second more than its throttled time, measured
here, cgroup v1, kernel 6.18). This bound keeps a node whose threads waited for each other from reading
twice its runnable time; ``rate x longest`` keeps it from hiding a node throttled more than its rate
says (a quota lowered under the configured one explains nearly every wait: at q = 0.125, ``P x (1 -
q)`` is 87.5 ms a period and half the quota leaves 93.8). The ``rate x runnable`` bound is the
rate's own definition, and the one the quickstart needed: at rate 0.106 a runnable thread waits 89 % of
the time for its turn among the run's other nodes, throttled or not, and the turns in periods where the
node did not reach its quota (its gang slot began or ended in them) are unexplained waits, not CPU lost.
Without it, 6 quickstart runs (16 nodes, gang, TDF 9.41; a host loaded by other users' nice 19 work)
read worst windows of 0.42-0.55 and 78-93 of about 285 windows over 5 % (the first windows always,
while the first jobs' ranks began, then every window in which a node's slot changed), while the job on
all 16 nodes ran 2.2-3.1 % over the simulator's time. With it, 10 runs read a worst window of -0.006 to
0.017 in 9 (none over 5 %) and 0.21 in one window of one, at load 14 while its first ranks began; beside
another run's busy nodes of the same weight (that job 1.3-1.5x the simulator's) 0.36-0.42, 16 and 15
nodes and 29-51 windows over 5 %, so the run warned (docs/measurements.md, "The rate watch"). The bound
reads a shortfall low where a node blocks after its period's burst (it got its quota in less than the
period): a normal run's median window reads -0.33 to -0.38, so an error is a floor, not the stretch.

A window counts only when the node's threads were runnable (``cpu + wait``) for at least
:data:`MIN_RUNNABLE` of it: a node that mostly sleeps, waits for messages or is stopped by its policy says
little about its rate (what it says is the wake-ups' latency, not the quota's share).

Waits between the node's own threads (several runnable processes) are capped by the quota: a node that
used its whole quota lost nothing. The kernel adds a thread's wait when the thread next runs (or takes a
signal: a policy's SIGSTOP), so a throttled period's wait may land in the next window: what a thread's
explanation left unused in one window carries to the next, and no further.

Limits: a thread's wait longer than the window and a period is left out (:meth:`RateWatch.sample`), so a
node starved that long is not seen; a thread's wait counts from the window after the one it started in
(its wait before it joined the node's cgroup is not the node's); explaining a throttled period's wait by
``P x (1 - q)`` may explain more than a thread that slept part of the period waited, and a node short of
its rate by a lowered quota is seen only by ``rate x longest``, so not in a window that its runnable time
spread over several threads (a gang slot changed in it): errors read too small, never too large.
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


def thread_times_ns(tids: list[int]) -> dict[int, tuple[int, int]]:
    """Each thread's (CPU, run-queue wait) so far (ns; /proc/<tid>/schedstat's 1st and 2nd fields); gone
    ones left out."""
    out = {}
    for tid in tids:
        try:
            with open(f"/proc/{tid}/schedstat", "rb") as fh:
                f = fh.read().split()
            out[tid] = (int(f[0]), int(f[1]))
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
    #: The node's threads' runnable time (CPU + wait), summed, and the longest one's (runnable_times).
    runnable: float = 0.0
    longest: float = 0.0


def explained(quota_cores: float, period_s: float, throttled_s: float, throttled_periods: int) -> float:
    """The wait a node's own quota explains: the kernel's throttled time, or the throttled periods times
    what a quota under one core leaves of each, whichever is more (the module's doc)."""
    return max(throttled_s, throttled_periods * period_s * max(0.0, 1.0 - quota_cores))


def thread_rate(quota_cores: float) -> float:
    """The CPU a node owes one runnable thread a second: its quota, but one core at most (a thread runs on
    one core at a time)."""
    return min(quota_cores, 1.0)


def judge(
    seconds: float,
    quota_cores: float,
    cpu: float,
    wait: float,
    explained: float,
    runnable: float | None = None,
    longest: float = 0.0,
) -> Window:
    """The window's entitlement and error from its counters (the module's formula; ``explained``: the
    wait the quota explains; ``runnable``: the threads' runnable time summed, ``cpu + wait`` if not
    given; ``longest``: the longest one thread was runnable). A thread runs on one core at most, hence
    ``min(quota, 1 core)`` per second of runnable time."""
    full = quota_cores * seconds
    rate = thread_rate(quota_cores)
    summed = cpu + wait if runnable is None else runnable
    entitled = min(full, rate * summed, max(rate * longest, cpu + max(0.0, wait - explained)))
    error = 1.0 - cpu / entitled if entitled > 0 and cpu + wait >= MIN_RUNNABLE * seconds else None
    return Window(seconds, cpu, wait, explained, entitled, error, summed, longest)


def runnable_times(
    seconds: float, rate: float, period_s: float, times: dict[int, tuple[float, float]], cpu: float
) -> tuple[float, float]:
    """(summed, longest) runnable time of a node's threads in a window, from each thread's (CPU, wait)
    in it (``times``) and the node's CPU (``cpu``: also that of threads not seen at both ends, runnable
    at least that long). The kernel adds a wait when the thread next runs, so a thread runnable for part
    of the window may carry a wait that began in the window before: up to what the quota leaves of a
    period, ``P x (1 - rate)``, less the time it was not runnable here; a thread runnable all along
    carries one in and leaves one out, so nothing is taken from it; nor from its CPU, which was here."""
    summed, longest, seen_cpu = 0.0, 0.0, 0.0
    for c, w in times.values():
        r = min(c + w, seconds)
        r -= min(period_s * (1.0 - rate), seconds - r, w)
        summed += r
        longest = max(longest, r)
        seen_cpu += c
    return summed + max(0.0, cpu - seen_cpu), longest


class RateWatch:
    """Reads an envelope's counters window by window (``counters``: Envelope.rate_counters)."""

    def __init__(self, counters, quota_cores: float, period_s: float) -> None:
        self._counters = counters
        self.quota_cores = quota_cores
        self.period_s = period_s
        self._last: tuple[float, float, float, int, dict[int, tuple[int, int]]] | None = None
        #: Per thread: what the last window's throttling explained and its wait did not use (s).
        self._carry: dict[int, float] = {}

    def _read(self, now: float) -> tuple[float, float, float, int, dict[int, tuple[int, int]]] | None:
        got = self._counters()
        if got is None:
            return None
        cpu, throttled, periods, tids = got
        return now, cpu, throttled, periods, thread_times_ns(tids)

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
        seconds, cpu = cur[0] - last[0], cur[1] - last[1]
        times = {
            tid: (max(0, v[0] - old[tid][0]) / 1e9, max(0, v[1] - old[tid][1]) / 1e9)
            for tid, v in cur[4].items()
            if tid in old
        }
        # A wait longer than the window and a period is no turn of this window's: CFS runs every runnable
        # thread of an unthrottled group within a period or two, and the quota throttles for one at most.
        # Seen once (node 1, 1 quickstart of 5): 17.6 s landing at once on an idle node (2.6 ms of CPU).
        stale = seconds + self.period_s
        times = {tid: (c, 0.0 if w > stale else w) for tid, (c, w) in times.items()}
        waits = {tid: w for tid, (_, w) in times.items()}
        quota = self._explained(waits, cur[2] - last[2], cur[3] - last[3])
        summed, longest = runnable_times(seconds, thread_rate(self.quota_cores), self.period_s, times, cpu)
        return judge(seconds, self.quota_cores, cpu, sum(waits.values()), quota, summed, longest)

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
