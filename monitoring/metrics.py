"""The testbed's Prometheus metrics (docs/architecture.md, "The event log is the truth", "Real parts"): for
watching a run live, not for results (results come from the event log).

Two small classes, each owning a ``CollectorRegistry``: :class:`NodeMetrics` (one per node agent
process) and :class:`CoordinatorMetrics` (the coordinator). Both are updated by their owner's loop thread
at a real-time period (the scrape interval), from figures the owner buffers cheaply in between; the
exporter thread only serialises the registry when scraped.

Naming: base units (seconds, watts, joules, ratios), ``_total`` on counters, bounded labels only:
``node`` (node index), ``job_class`` (from the scenario), ``scheduler`` (its name), and ``state``,
``outcome``, ``unit``, ``role`` from the fixed sets below. Times are emulated unless a name says otherwise:
energy is integrated over emulated time, like the summary's E = (B + X*U)*N*T.
"""

from __future__ import annotations

import ipaddress
import logging
import math
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from testbed.apps.reports import DEADLINES_MET, DEADLINES_MISSED, FRAME_LATENCY

log = logging.getLogger("testbed")

# The *_created series double every counter's size and nothing here reads them.
disable_created_metrics()

PROCESS_STATES = ("running", "stopped", "blocked")
JOB_STATES = ("queued", "running", "finished", "failed", "killed", "rejected")
ADMISSION_OUTCOMES = ("admitted", "rejected")
DEADLINE_OUTCOMES = ("met", "missed")
#: What workers report progress in (tbcomm ``progress(unit, value)``); anything else counts as "other".
PROGRESS_UNITS = ("barriers", "iterations", "frames", "bytes", "other")
ROLES = ("local", "global")

#: Policy decisions take microseconds to milliseconds.
DECISION_BUCKETS = (1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 0.1)
#: Gang switch skew: paper 000 assumes 1 ms; a loaded host reaches tens of ms.
SKEW_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0)
#: A frame's end-to-end latency: a pipeline stage's work (ms) up to the whole buffer b*d (paper 000: 3.3 s).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: Progress units that are deadlines (apps/reports.py), by outcome.
_DEADLINE_OUTCOME = {DEADLINES_MET: "met", DEADLINES_MISSED: "missed"}


def utilization(cpu_delta_s: float, dt_emu_s: float, cpu_rate: float = 1.0, cores: int = 1) -> float:
    """A node's CPU utilisation over an interval: CPU its processes used (real core-seconds, as the kernel
    counts it) over what its envelope can deliver in that interval. The envelope delivers
    ``cpu_rate * cores / TDF`` real cores for ``dt_emu * TDF`` real seconds, i.e.
    ``dt_emu * cpu_rate * cores`` real core-seconds: TDF cancels out. Clamped to [0, 1] (quota periods
    straddle interval edges)."""
    if dt_emu_s <= 0:
        return 0.0
    u = cpu_delta_s / (dt_emu_s * cpu_rate * cores)
    return min(1.0, max(0.0, u))


def power_watts(idle_watts: float, busy_watts: float, u: float) -> float:
    """Paper 003's node power model: P = B + X*u."""
    return idle_watts + busy_watts * u


def _job_class(name: str | None) -> str:
    return name or "none"


def _unit(unit: str) -> str:
    return unit if unit in PROGRESS_UNITS else "other"


class NodeMetrics:
    """One node's metrics. The owner calls :meth:`sample` once per interval with the interval's CPU use;
    the rest are set or added from buffered counts."""

    def __init__(
        self,
        node: int,
        scheduler: str,
        idle_watts: float,
        busy_watts: float,
        tdf: float,
        job_classes: Iterable[str] = (),
        head: bool = False,
    ) -> None:
        self.node = str(node)
        #: The head node (paper 001's, outside the cluster): its progress and deadlines count, its CPU,
        #: power and energy are not the cluster's, so it has none of those gauges.
        self.head = head
        self.scheduler = scheduler
        self.idle_watts = idle_watts
        self.busy_watts = busy_watts
        self.registry = CollectorRegistry()
        self.util = self.power = self.energy = None
        if not head:
            self._power_metrics()
        self._work_metrics(job_classes)
        self._outcome_metrics(job_classes)
        self._clock_metrics(tdf)
        self._local: Gauge | None = None  # local users' session slowdown: set_local_slowdown
        for g in self.procs.values():
            g.set(0)
        if self.power is not None:
            self.power.set(idle_watts)

    def _power_metrics(self) -> None:
        """Utilisation, power and energy: a cluster node's only (the head's CPU is not the cluster's)."""
        r, n = self.registry, self.node
        self.util = Gauge(
            "testbed_node_cpu_utilization_ratio",
            "CPU used by the node's processes over what its envelope delivers, last interval (0-1)",
            ["node", "scheduler"],
            registry=r,
        ).labels(n, self.scheduler)
        self.power = Gauge(
            "testbed_node_power_watts",
            "Node power from the scenario's model P = B + X*u, last interval",
            ["node"],
            registry=r,
        ).labels(n)
        self.energy = Counter(
            "testbed_node_energy_joules",
            "Node energy: power integrated over emulated time since the run began",
            ["node"],
            registry=r,
        ).labels(n)

    def _work_metrics(self, job_classes: Iterable[str]) -> None:
        """The node's processes by state, its local policy's dispatches and its workers' progress."""
        r, n = self.registry, self.node
        procs = Gauge(
            "testbed_node_processes",
            "Worker processes on the node by state (blocked = continued but waiting for a message)",
            ["node", "state"],
            registry=r,
        )
        self.procs = {s: procs.labels(n, s) for s in PROCESS_STATES}
        self.dispatches = Counter(
            "testbed_node_dispatches",
            "Processes the node continued (made runnable) by its local policy",
            ["node", "scheduler"],
            registry=r,
        ).labels(n, self.scheduler)
        self._progress = Counter(
            "testbed_job_progress",
            "Work reported by the node's workers, by unit (barriers, iterations, frames, bytes)",
            ["node", "job_class", "unit"],
            registry=r,
        )
        for jc in job_classes:
            for u in PROGRESS_UNITS:
                self._progress.labels(n, _job_class(jc), u)

    def _outcome_metrics(self, job_classes: Iterable[str]) -> None:
        """Deadlines, frame latency and the local policy's decision time."""
        r, n, scheduler = self.registry, self.node, self.scheduler
        # Deadlines are counted where workers report them (the node of a pipeline's last stage), from the
        # same progress counters the results read (apps/reports.py): any program kind's deadlines.
        self._deadlines = Counter(
            "testbed_deadlines",
            "Deadlines reported by the node's workers, by outcome (zero until a real-time job runs)",
            ["node", "outcome", "job_class", "scheduler"],
            registry=r,
        )
        self._latency = Histogram(
            "testbed_frame_latency_seconds",
            "End-to-end latency of each frame leaving a pipeline's last stage on this node (emulated s)",
            ["node", "job_class", "scheduler"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        for jc in job_classes:
            for o in DEADLINE_OUTCOMES:
                self._deadlines.labels(n, o, _job_class(jc), scheduler)
            self._latency.labels(n, _job_class(jc), scheduler)
        self.decision = Histogram(
            "testbed_policy_decision_seconds",
            "Real time the policy took per decision (local: per node event; global: per coordinator call)",
            ["role", "scheduler"],
            buckets=DECISION_BUCKETS,
            registry=r,
        ).labels("local", scheduler)

    def _clock_metrics(self, tdf: float) -> None:
        """The time dilation factor and the node's rate: the probe's error and the rate watch's."""
        r, n = self.registry, self.node
        self.tdf = Gauge(
            "testbed_time_dilation_factor",
            "Real seconds per emulated second",
            ["node"],
            registry=r,
        ).labels(n)
        self.tdf.set(tdf)
        self.rate_error = Gauge(
            "testbed_node_cpu_rate_error_ratio",
            "(delivered - configured) / configured CPU rate, from the start-up probe (NaN: not probed)",
            ["node"],
            registry=r,
        ).labels(n)
        self.rate_error.set(math.nan)
        self.rate_window_error = Gauge(
            "testbed_node_cpu_rate_window_error_ratio",
            "1 - delivered / entitled CPU over the rate watch's last window (about 1 s real; > 0: the node "
            "fell below its rate; NaN: not busy enough in it to judge, or no quota)",
            ["node"],
            registry=r,
        ).labels(n)
        self.rate_window_error.set(math.nan)

    def sample(self, u: float, dt_emu_s: float) -> float:
        """Records an interval of ``dt_emu_s`` emulated seconds at mean utilisation ``u``. The power model
        is linear in u, so mean power times the interval is the interval's energy exactly. Returns P."""
        p = power_watts(self.idle_watts, self.busy_watts, u)
        if self.head:
            return p
        self.util.set(u)
        self.power.set(p)
        if dt_emu_s > 0:
            self.energy.inc(p * dt_emu_s)
        return p

    def set_processes(self, running: int, stopped: int, blocked: int) -> None:
        self.procs["running"].set(running)
        self.procs["stopped"].set(stopped)
        self.procs["blocked"].set(blocked)

    def add_progress(self, job_class: str | None, unit: str, amount: float) -> None:
        if amount <= 0:
            return
        outcome = _DEADLINE_OUTCOME.get(unit)
        if outcome is not None:
            self._deadlines.labels(self.node, outcome, _job_class(job_class), self.scheduler).inc(amount)
        else:
            self._progress.labels(self.node, _job_class(job_class), _unit(unit)).inc(amount)

    def observe_sample(self, job_class: str | None, unit: str, value: float) -> None:
        """One observation of a sample unit (apps/reports.py, SAMPLE_UNITS)."""
        if unit == FRAME_LATENCY:
            self._latency.labels(self.node, _job_class(job_class), self.scheduler).observe(value)

    def observe_decisions(self, seconds: Iterable[float]) -> None:
        for s in seconds:
            self.decision.observe(s)

    def set_local_slowdown(self, job_class: str | None, slowdown: float) -> None:
        """A local user's session on this node, its slowdown so far (paper 004): made on first use, so a
        node without local users exports no such series."""
        if self._local is None:
            self._local = Gauge(
                "testbed_local_session_slowdown_ratio",
                "A local user's session on the node: its work's emulated time so far over the same work "
                "alone at the node's rate (the latest session of the class to report)",
                ["node", "job_class", "scheduler"],
                registry=self.registry,
            )
        self._local.labels(self.node, _job_class(job_class), self.scheduler).set(slowdown)


class CoordinatorMetrics:
    """The coordinator's metrics: jobs, admissions, gang switch skew, global decision time (deadlines are
    the nodes': :class:`NodeMetrics`)."""

    def __init__(self, scheduler: str, tdf: float, job_classes: Iterable[str] = ()) -> None:
        self.scheduler = scheduler
        self.registry = r = CollectorRegistry()
        self.job_classes = sorted({_job_class(j) for j in job_classes})
        self._jobs = Gauge("testbed_jobs", "Jobs by state", ["state", "job_class", "scheduler"], registry=r)
        self._admissions = Counter(
            "testbed_admissions",
            "Admission decisions by outcome",
            ["outcome", "job_class", "scheduler"],
            registry=r,
        )
        # Every label combination exists from the start, at zero: panels and alerts see 0, not "no data".
        for jc in self.job_classes:
            for s in JOB_STATES:
                self._jobs.labels(s, jc, scheduler).set(0)
            for o in ADMISSION_OUTCOMES:
                self._admissions.labels(o, jc, scheduler)
        self.skew = Histogram(
            "testbed_gang_switch_skew_seconds",
            "Per gang slot: latest minus earliest node's switch effect (emulated seconds)",
            ["scheduler"],
            buckets=SKEW_BUCKETS,
            registry=r,
        ).labels(scheduler)
        self.decision = Histogram(
            "testbed_policy_decision_seconds",
            "Real time the policy took per decision (local: per node event; global: per coordinator call)",
            ["role", "scheduler"],
            buckets=DECISION_BUCKETS,
            registry=r,
        ).labels("global", scheduler)
        self.tdf = Gauge("testbed_time_dilation_factor", "Real seconds per emulated second", registry=r)
        self.tdf.set(tdf)
        self._parallel: Gauge | None = None

    def set_parallel_slowdown(self, job_class: str | None, slowdown: float) -> None:
        """A parallel job that completed in a run with local users, its slowdown against its run alone on a
        dedicated cluster (paper 004; testbed/results/dedicated.py): made on first use, so a run without
        local users exports no such series."""
        if self._parallel is None:
            self._parallel = Gauge(
                "testbed_parallel_slowdown_ratio",
                "A completed parallel job's execution time over its run alone on a dedicated cluster at the "
                "rates of its nodes (simulated; the latest job of the class to complete)",
                ["job_class", "scheduler"],
                registry=self.registry,
            )
        self._parallel.labels(_job_class(job_class), self.scheduler).set(slowdown)

    def set_jobs(self, counts: dict[tuple[str, str], int]) -> None:
        """``counts[(state, job_class)]``; states outside :data:`JOB_STATES` (not yet arrived) are skipped,
        and known combinations absent from ``counts`` go back to 0."""
        seen = set()
        for (state, jc), v in counts.items():
            if state in JOB_STATES:
                self._jobs.labels(state, _job_class(jc), self.scheduler).set(v)
                seen.add((state, _job_class(jc)))
        for jc in self.job_classes:
            for s in JOB_STATES:
                if (s, jc) not in seen:
                    self._jobs.labels(s, jc, self.scheduler).set(0)

    def admission(self, outcome: str, job_class: str | None) -> None:
        assert outcome in ADMISSION_OUTCOMES, outcome
        self._admissions.labels(outcome, _job_class(job_class), self.scheduler).inc()

    def observe_decisions(self, seconds: Iterable[float]) -> None:
        for s in seconds:
            self.decision.observe(s)


class SwitchSkew:
    """Gang switch skew is a cross-node quantity: nodes report (slot, effect time) in batches; a slot's
    spread is known once every node it was dispatched to has reported, or when it times out (a node died
    or stopped reporting), from the nodes that did, if two or more."""

    def __init__(self) -> None:
        self._slots: dict[int, tuple[frozenset[int], dict[int, float], float]] = {}

    def expect(self, slot: int, nodes: Iterable[int], now: float) -> None:
        nodes = frozenset(nodes)
        if len(nodes) > 1:
            self._slots[slot] = (nodes, {}, now)

    def report(self, node: int, slot: int, effect: float) -> float | None:
        """Returns the slot's spread when this report completes it."""
        entry = self._slots.get(slot)
        if entry is None or node not in entry[0]:
            return None
        entry[1][node] = effect
        if len(entry[1]) == len(entry[0]):
            del self._slots[slot]
            return max(entry[1].values()) - min(entry[1].values())
        return None

    def expire(self, now: float, timeout: float, down: Iterable[int] = ()) -> list[float]:
        """Slots older than ``timeout`` (or whose missing nodes are all down) give the spread of what was
        reported (two nodes or more) and are forgotten."""
        down = set(down)
        out = []
        for slot, (nodes, got, since) in list(self._slots.items()):
            if now - since > timeout or (down and nodes - set(got) <= down):
                del self._slots[slot]
                if len(got) > 1:
                    out.append(max(got.values()) - min(got.values()))
        return out

    def __len__(self) -> int:
        return len(self._slots)


def serve(registry: CollectorRegistry, host: str = "127.0.0.1", port: int | None = None):
    """Serves ``registry`` on ``host:port`` (None or 0: any free port) in a daemon thread; the exporter dies
    with its process. Returns (server, "host:port")."""
    from prometheus_client import start_http_server

    try:
        server, _thread = start_http_server(port or 0, addr=host, registry=registry)
    except OSError as exc:
        raise RuntimeError(
            f"monitoring: cannot serve metrics on {host}:{port or 0} ({exc.strerror or exc}); every exporter "
            "binds monitoring.port when it is set: on one host leave it null (any free port)"
        ) from None
    if beyond_loopback(host):
        # The metrics carry no secret, but anyone who reaches the port reads the run: say so.
        log.warning(
            "monitoring: an exporter listens on %s:%s, beyond loopback: every host that reaches it can read "
            "this run's metrics",
            host,
            server.server_port,
        )
    return server, f"{host}:{server.server_port}"


def beyond_loopback(host: str) -> bool:
    """True when an address is reachable from other hosts (0.0.0.0, a routable address, a host name)."""
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host != "localhost"


def stop(server) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()
