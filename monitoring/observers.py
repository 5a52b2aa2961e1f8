"""The Prometheus metrics of a node agent and of the coordinator, as observers (testbed/core/observe.py).

Each observer owns its registry and HTTP endpoint, learns what happened from the events the component logs
and the few hooks no event carries, buffers it on the component's loop thread, and pushes it into the
registry once per scrape interval (:meth:`tick`). The components know nothing of Prometheus.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import Any

from testbed.apps.reports import SAMPLE_UNITS, SESSION_ELAPSED, SESSION_IDEAL, SESSION_TIMES
from testbed.monitoring.metrics import (
    CoordinatorMetrics,
    NodeMetrics,
    SwitchSkew,
    serve,
    stop,
    utilization,
)

from testbed.core import events as ev
from testbed.core.messages import SlotSwitches
from testbed.core.observe import Observer


class _Served(Observer):
    def __init__(self, registry, mon: dict) -> None:
        self.period_s = float(mon.get("scrape_interval_s", 1.0))
        self._server, self.address = serve(registry, mon.get("host", "127.0.0.1"), mon.get("port"))

    def close(self) -> None:
        if self._server is not None:
            stop(self._server)
            self._server = None


class NodeMetricsObserver(_Served):
    """One node's metrics. ``sample()`` returns the node's state at a tick: (envelope CPU seconds,
    processes running, stopped, blocked); ``send(msg)`` reports to the coordinator (the switch times the
    coordinator turns into the gang switch skew)."""

    def __init__(
        self,
        node: int,
        scheduler: str,
        tdf: float,
        cpu_rate: float,
        cores: int,
        mon: dict,
        sample: Callable[[], tuple[float, int, int, int]],
        send: Callable[[Any], Any],
    ) -> None:
        self.metrics = NodeMetrics(
            node,
            scheduler,
            mon.get("idle_watts", 0.0),
            mon.get("busy_watts", 0.0),
            tdf,
            mon.get("job_classes", ()),
            head=bool(mon.get("head", False)),
        )
        super().__init__(self.metrics.registry, mon)
        self.node, self.tdf, self.cpu_rate, self.cores = node, tdf, cpu_rate, cores
        self._sample, self._send = sample, send
        self._last: tuple[float, float] | None = None
        self._decisions: list[float] = []
        self._continued = 0
        self._switches: list[tuple[int, float]] = []
        self._job_class: dict[str, str | None] = {}
        self._progress: dict[tuple[str | None, str], float] = {}
        self._progress_last: dict[tuple[str, int, str], float] = {}
        self._samples: list[tuple[str | None, str, float]] = []
        #: Local users' sessions: (job, rank) -> their running totals of elapsed and ideal time.
        self._sessions: dict[tuple[str, int], dict[str, float]] = {}
        self._session_slowdowns: dict[str | None, float] = {}

    def begin(self) -> None:
        self._last = (time.monotonic(), self._sample()[0])

    def event(self, rec: dict) -> None:
        if "nodes" in rec and rec["kind"] in ev.GROUPED:  # one record for several ranks: each of them
            for one in ev.per_node(rec):
                self.event(one)
            return
        kind = rec["kind"]
        if kind == ev.PROGRESS and rec["unit"] in SAMPLE_UNITS:  # one observation, not a running total
            self._samples.append((self._job_class.get(rec["job"]), rec["unit"], rec["value"]))
        elif kind == ev.PROGRESS:  # the value is cumulative per process; the counter takes increments
            if rec["unit"] in SESSION_TIMES:
                self._session(rec)
            key = (rec["job"], rec["rank"], rec["unit"])
            last = self._progress_last.get(key, 0.0)
            self._progress_last[key] = rec["value"]
            ck = (self._job_class.get(rec["job"]), rec["unit"])
            self._progress[ck] = self._progress.get(ck, 0.0) + max(0.0, rec["value"] - last)
        elif kind == ev.SLOT_SWITCH:
            self._switches.append((rec["slot"], rec["effect"]))
        elif kind == ev.PROC_STARTED:
            self._job_class[rec["job"]] = rec.get("job_class")
        elif kind == ev.PROC_EXITED:  # a later start of the same rank counts from 0 again
            self._sessions.pop((rec["job"], rec["rank"]), None)
            for key in [k for k in self._progress_last if k[:2] == (rec["job"], rec["rank"])]:
                del self._progress_last[key]
        elif kind == ev.RATE_PROBE:
            self.metrics.rate_error.set(rec["error"])
        elif kind == ev.RATE_WINDOW:
            self.metrics.rate_window_error.set(math.nan if rec["error"] is None else rec["error"])

    def _session(self, rec: dict) -> None:
        """A local user's session reported its running totals (apps/localuser.py): its slowdown so far is
        elapsed over ideal, as the results compute it at the end."""
        times = self._sessions.setdefault((rec["job"], rec["rank"]), {})
        times[rec["unit"]] = rec["value"]
        if times.get(SESSION_IDEAL, 0.0) > 0 and SESSION_ELAPSED in times:
            jc = self._job_class.get(rec["job"])
            self._session_slowdowns[jc] = times[SESSION_ELAPSED] / times[SESSION_IDEAL]

    def decided(self, seconds: float) -> None:
        self._decisions.append(seconds)

    def continued(self, n: int) -> None:
        self._continued += n

    def tick(self) -> None:
        m = self.metrics
        cpu, running, stopped, blocked = self._sample()
        now = time.monotonic()
        if self._last is not None:
            t0, cpu0 = self._last
            dt_emu = (now - t0) / self.tdf
            m.sample(utilization(cpu - cpu0, dt_emu, self.cpu_rate, self.cores), dt_emu)
        self._last = (now, cpu)
        m.set_processes(running, stopped, blocked)
        if self._continued:
            m.dispatches.inc(self._continued)
            self._continued = 0
        for (jc, unit), amount in self._progress.items():
            m.add_progress(jc, unit, amount)  # deadlines_met / _missed go to testbed_deadlines_total
        self._progress.clear()
        for jc, unit, value in self._samples:
            m.observe_sample(jc, unit, value)
        self._samples.clear()
        for jc, slowdown in self._session_slowdowns.items():
            m.set_local_slowdown(jc, slowdown)
        self._session_slowdowns.clear()
        m.observe_decisions(self._decisions)
        self._decisions.clear()
        if self._switches:
            batch, self._switches = self._switches, []
            self._send(SlotSwitches(self.node, tuple(batch)))


class CoordinatorMetricsObserver(_Served):
    """The coordinator's metrics: jobs by state (``job_counts()`` at each tick), admissions, global
    decision time, and the gang switch skew from the nodes' switch reports (a slot some node never reports,
    because it died or its report was lost, is closed after three intervals; ``down()`` names the nodes
    not to wait for)."""

    def __init__(
        self,
        scheduler: str,
        tdf: float,
        job_classes: dict[str, str],
        mon: dict,
        job_counts: Callable[[], dict[tuple[str, str], int]],
        down: Callable[[], Iterable[int]],
        dedicated: Callable[[str, tuple[int, ...]], float | None] | None = None,
    ) -> None:
        classes = set(job_classes.values()) | set(mon.get("job_classes", ()))
        self.metrics = CoordinatorMetrics(scheduler, tdf, classes)
        super().__init__(self.metrics.registry, mon)
        self._classes = job_classes
        self._job_counts, self._down = job_counts, down
        self._skew = SwitchSkew()
        self._skew_timeout = max(5.0, 3 * self.period_s)
        self._decisions: list[float] = []
        # The parallel slowdown (runs with local users): a job's start (t, nodes) until it completes, then
        # its reference alone (``dedicated``, a simulation of tens of ms per new job shape) on a thread of
        # its own, off the coordinator's loop.
        self._dedicated = dedicated
        self._started: dict[str, tuple[float, tuple[int, ...]]] = {}
        self._sessions: set[str] = set()
        self._pool = None
        if dedicated is not None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(1, thread_name_prefix="dedicated")

    def event(self, rec: dict) -> None:
        kind = rec["kind"]
        if kind == ev.JOB_ADMITTED:
            self.metrics.admission("admitted", self._classes.get(rec["job"]))
        elif kind == ev.JOB_REJECTED:
            self.metrics.admission("rejected", self._classes.get(rec["job"]))
        elif self._pool is None:
            return
        elif kind == ev.JOB_SUBMITTED and rec.get("owner_node") is not None:
            self._sessions.add(rec["job"])  # a local user's: no parallel slowdown
        elif kind == ev.JOB_STARTED and rec["job"] not in self._sessions:
            self._started[rec["job"]] = (rec["t"], tuple(rec.get("nodes", ())))
        elif kind == ev.JOB_FINISHED and rec["job"] in self._started:
            t0, nodes = self._started.pop(rec["job"])
            self._pool.submit(self._slowdown, rec["job"], nodes, rec["t"] - t0)

    def _slowdown(self, job: str, nodes: tuple[int, ...], elapsed: float) -> None:
        ref = self._dedicated(job, nodes)
        if ref:
            self.metrics.set_parallel_slowdown(self._classes.get(job), elapsed / ref)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        super().close()

    def decided(self, seconds: float) -> None:
        self._decisions.append(seconds)

    def dispatched(self, slot: int, nodes: list[int]) -> None:
        self._skew.expect(slot, nodes, time.monotonic())

    def reported(self, msg: Any) -> None:
        if isinstance(msg, SlotSwitches):
            for slot, effect in msg.switches:
                spread = self._skew.report(msg.node, slot, effect)
                if spread is not None:
                    self.metrics.skew.observe(spread)

    def tick(self) -> None:
        self.metrics.set_jobs(self._job_counts())
        self.metrics.observe_decisions(self._decisions)
        self._decisions.clear()
        for spread in self._skew.expire(time.monotonic(), self._skew_timeout, self._down()):
            self.metrics.skew.observe(spread)
