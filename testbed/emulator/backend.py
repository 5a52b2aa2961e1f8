"""The Ray backend (:class:`RayBackend`): a local Ray instance (or a Ray cluster it joins:
``cluster.ray_address``), NodeAgents ``cluster.nodes_per_process`` to an actor
(testbed.emulator.actors.AgentHost), a Coordinator actor.

Bring-up, the CPU-rate probe, the run, and a teardown that every exit path goes through. A detached
janitor process watches this driver: if the driver is killed outright, the janitor removes every worker
and cgroup of the run (docs/architecture.md, "Faults").
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import re
import secrets
import signal
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from testbed.apps.speed import around, speed_s
from testbed.apps.wire import frame_bound
from testbed.core import events as ev
from testbed.core.backend import (
    ALL_JOBS_ENDED,
    INTERRUPTED,
    Hooks,
    PreflightError,
    RealOutcome,
    wall_limit_reached,
)
from testbed.core.clock import origin
from testbed.core.interrupts import interruptible, interrupts_deferred
from testbed.core.jobs import largest_message
from testbed.emulator.actors import AT_RAY_NODE, AgentHost, CoordinatorActor
from testbed.emulator.agent import WORKER_MODULES, NodeConfig
from testbed.emulator.mechanism.controlgroup import ControlGroup
from testbed.emulator.mechanism.envelope import EnvelopeUnavailable, probe_v1, quota_us
from testbed.emulator.mechanism.priority import (
    SLICE_US,
    raise_session_group,
    restore_session_group,
    session_group_nice,
    set_slice,
)
from testbed.emulator.mechanism.quotatick import QuotaTick, QuotaTickUnavailable
from testbed.janitor import RUN_ID_ENV, cleanup_run, start_janitor
from testbed.monitoring import prometheus as prom
from testbed.monitoring.prometheus import write_targets
from testbed.scenario import effective_tdf

if TYPE_CHECKING:  # the actor processes import this module's actors only: keep pydantic out of them
    from testbed.core.jobs import Job
    from testbed.scenario import Scenario

log = logging.getLogger("testbed")

#: Real seconds between the probe's launch and its start: every node's probe is forked by then (a fork
#: server answers in milliseconds; an interpreter started under a node's quota took over a second).
PROBE_START_DELAY_S = 0.5
#: Real seconds between fixing emulated time 0 and reaching it: every node must know the clock first.
CLOCK_START_DELAY_S = 0.3
#: The head node's local policy: it runs every process it is given at once (batch's RunAll), whatever the
#: cluster's policy, since the head is one machine outside every policy's view (paper 001's data source).
HEAD_NODE_SCHEDULER = "batch"
#: Where a local run's NICs listen and what its Ray advertises.
LOOPBACK = "127.0.0.1"
#: The Ray resource a joined cluster's node offers for each agent process it hosts (k8s/: one per pod).
NODE_RESOURCE = "testbed_node"


class RayStartError(RuntimeError):
    """Ray could not start here; the message is one line with Ray's own reason."""


def root_cause(exc: BaseException) -> str:
    """One line for an exception that may come out of Ray: Ray wraps an actor's error in its own, with the
    original traceback in the text; the innermost ``SomeError: message`` line is what the user needs."""
    text = str(exc)
    for line in reversed(text.splitlines()):
        m = re.match(r"^\s*(?:[\w.]+\.)?(\w*(?:Error|Exception|Unavailable|Exit)\w*): (.+)$", line)
        if m:
            return f"{m.group(1)}: {m.group(2).strip()}"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class RayBackend:
    """Real processes (:class:`testbed.core.backend.Backend`): bring-up (Ray, the node agents), the
    CPU-rate probe, the run (the coordinator, watched to its end) and a teardown that every exit path goes
    through. One instance runs one repetition. ``prometheus``: a local Prometheus scrapes the run's
    exporters meanwhile (monitoring/prometheus.py)."""

    name = "ray"

    def __init__(self, prometheus: bool = False) -> None:
        self.prometheus = prometheus
        self.hosts: list = []  # the agent processes started (actor handles), those of the head node last
        self.groups: list[list[int]] = []  # the nodes of each agent process
        self.coordinator = None
        self.marks: list[tuple[str, float]] = []  # start-up phases entered: (name, monotonic time)

    def run_scenario(self, scn: Scenario, jobs: Sequence[Job], run_dir: Path, hooks: Hooks) -> RealOutcome:
        """Runs one repetition on real processes; ``run_dir/events.jsonl`` (``events.jsonl.zst`` with
        ``results.events: zstd``) is merged from every component's log however it ended. Raises
        :class:`PreflightError` only, before anything starts, for a CFS quota below the kernel's minimum
        (``testbed run`` refused it already)."""

        self.scn, self.jobs, self.run_dir, self.hooks = scn, jobs, run_dir, hooks
        self.joined = scn.cluster.ray_address is not None
        tdf = effective_tdf(scn)
        _check_quota(scn, tdf)
        self.outcome = RealOutcome(tdf=tdf)
        try:
            with self._prometheus():
                self._run()
        except BaseException as exc:  # noqa: BLE001 - however the run ends, it is its outcome
            self._ended_by(exc)
        finally:
            parts = sorted((run_dir / "events").glob("*.jsonl"))
            events = ev.merge(parts, ev.log_file(run_dir, scn.results.events))
            if self.outcome.envelope is None:  # no agent reported: what the events say, if anything
                infos = (e["envelope"] for e in events if e["kind"] == ev.RUN_INFO and "envelope" in e)
                self.outcome.envelope = next(infos, "unknown")
        return self.outcome

    def _ended_by(self, exc: BaseException) -> None:
        """Records how ``exc`` ended the run: Ctrl-C, or an error (the first one said is kept)."""
        out = self.outcome
        out.cause = exc
        if isinstance(exc, KeyboardInterrupt):
            out.ended = INTERRUPTED
            return
        if isinstance(exc, RayStartError | QuotaTickUnavailable):
            out.error, out.exit_code = str(exc), 2
        else:
            err = root_cause(exc) if type(exc).__module__.startswith("ray") else ev.describe_error(exc)
            out.error = out.error or err
        out.ended = f"error: {out.error}"

    @contextlib.contextmanager
    def _prometheus(self):
        """The run's Prometheus targets (and with ``prometheus``, a local Prometheus scraping them) for the
        block, when the scenario enables monitoring."""
        m = self.scn.monitoring
        if not m.enabled:
            yield
            return

        d = prom.write_targets(self.run_dir, None, scrape_interval_s=m.scrape_interval_s)
        if not self.prometheus:
            self.hooks.notice(
                f"metrics: Prometheus config {d / 'prometheus.yml'}; live view: testbed watch {self.run_dir}"
            )
            yield
            return
        local = prom.LocalPrometheus(self.run_dir)
        try:
            self.hooks.notice(
                f"Prometheus: {local.start()} (scrapes this run until it ends; data in {d / 'data'})"
            )
            yield
        finally:
            local.stop()

    def _run(self) -> None:
        """Bring-up, probe, run, under a janitor; the teardown whatever happens (the ``ended`` it is told
        is decided first). What ends the run is recorded, not raised."""

        out = self.outcome
        out.run_id, out.phases_s = new_run_id(), {}
        self.marks = [("begin", time.monotonic())]
        # The janitor first: from here on, whatever happens, it removes the run's cgroups. It stays where
        # this process is now (not in the control cgroup below). It puts the session's autogroup back
        # to what it is now, should the fallback below raise it and this process be killed.
        old_nice = session_group_nice()
        janitor = start_janitor(
            out.run_id, [os.getpid()], run_dir=str(self.run_dir), session_nice=(os.getsid(0), old_nice)
        )
        # The control plane (Ray, agents, coordinator, fork servers: this process's children) must not
        # weigh less than the nodes, nor less than other work on the host: in a cgroup of the run's own
        # (mechanism/controlgroup.py), which every process Ray starts inherits from this one.
        old_nice = self._enter_control_group()
        # Every process Ray starts for this run (gcs_server, raylet, its agents, the actor workers) inherits
        # the run's mark, so the janitor finds and kills them too if this driver is killed: left alone they
        # linger 30-60 s. This process's own /proc environ is its start-up one: the janitor never sees it.
        marked_before = os.environ.get(RUN_ID_ENV)
        os.environ[RUN_ID_ENV] = out.run_id
        self.quota_tick: QuotaTick | None = None
        try:
            with interruptible():  # where Ctrl-C stops the run (testbed/core/interrupts.py)
                self._start_quota_tick()
                self._measure_speed()
                self._start_ray()
                infos = self._start_agents()
                self._probe()
                self._start_coordinator(infos)
                self._watch()
                self._measure_speed_again()
        except BaseException as exc:  # noqa: BLE001 - recorded; the teardown below is told why
            self._ended_by(exc)
        finally:
            # A second Ctrl-C waits for the teardown (each of its steps is bounded): cut short, it left
            # Ray and the nodes' processes to the janitor, and this session's priority raised.
            with interrupts_deferred():
                self._teardown(out.ended)
                if self.joined:
                    out.logs_lost = _collect(self.hosts, self.groups, self.run_dir)
                _shutdown_ray()
                if self.quota_tick is not None:
                    self.quota_tick.stop()
                if marked_before is None:
                    os.environ.pop(RUN_ID_ENV, None)
                else:
                    os.environ[RUN_ID_ENV] = marked_before
                self._leave_control_group()
                cleanup_run(out.run_id)  # also whatever of Ray's outlived its shutdown; the control cgroup
                restore_session_group(old_nice)
                janitor.terminate()
                try:
                    janitor.wait(timeout=5)
                except Exception:  # noqa: BLE001
                    janitor.kill()

    def _enter_control_group(self) -> str | None:
        """Move this process into the run's control cgroup; where that cannot be, say so loudly and raise
        the session's autogroup instead (priority.raise_session_group: it raises the whole session,
        whatever else runs in it). Returns the autogroup nice to put back, None if it was not raised."""
        out = self.outcome
        self.control: ControlGroup | None = None
        try:
            if self.joined:
                raise EnvelopeUnavailable(
                    "a joined Ray cluster's processes are started by its own hosts, not by this driver"
                )
            why = probe_v1()
            if why is not None:
                raise EnvelopeUnavailable(why)
            ctl = ControlGroup(out.run_id)
            try:
                ctl.create()
                ctl.join()
            except OSError:
                ctl.leave()  # joined one hierarchy and not the other: out again, or the janitor kills us
                raise
        except (EnvelopeUnavailable, OSError) as exc:
            out.control_group = f"none: {exc}"
            out.session_priority, old = raise_session_group()
            self.hooks.notice(
                f"WARNING: no control cgroup ({exc}); the control plane is raised only through this "
                f"session's autogroup ({out.session_priority}): other work in this session is raised with "
                "it, and a busy host can delay the agents and change a policy's decisions"
            )
            return old
        self.control = ctl
        # Ray's own processes (gcs_server, the raylet, its agents) are forked from this thread: they
        # inherit its short slice (priority.set_slice), as the node agents' threads and workers get theirs.
        no_slice = set_slice(SLICE_US)
        out.control_group = ctl.note + ("" if no_slice is None else f"; {no_slice}")
        out.session_priority = "in the control cgroup (autogroup not raised)"
        return None

    def _start_quota_tick(self) -> None:
        """The quota tick (mechanism/quotatick.py) where ``cluster.quota_tick_us`` asks for it: started in
        the control cgroup, whose RT runtime lets its threads be real-time. Where it cannot start, the run
        ends (exit 2): the scenario asked for it, and the nodes would not be what it asked."""
        tick_us = self.scn.cluster.quota_tick_us
        if not tick_us:
            return
        tick = QuotaTick(tick_us)
        try:
            self.outcome.quota_tick = tick.start()
        except QuotaTickUnavailable as exc:
            msg = f"cluster.quota_tick_us: the quota tick cannot start: {exc}; set it to 0"
            raise QuotaTickUnavailable(msg) from None
        self.quota_tick = tick

    def _leave_control_group(self) -> None:
        """Back to where this process was, so that the run's cgroups can go (and the janitor, which kills
        what is in them, never finds this process there)."""
        if self.control is not None:
            out = self.outcome
            try:
                out.control_cpu_s = round(self.control.cpu_usage_s(), 3)
            except OSError:
                pass
            self.control.leave()
            self.control = None
            set_slice(0)  # the kernel's default slice again

    def _phase(self, text: str) -> None:
        # Start-up cost by phase, for the summary (start-up is a benchmarked figure).
        now = time.monotonic()
        self.outcome.phases_s[self.marks[-1][0]] = round(now - self.marks[-1][1], 3)
        self.marks.append((text, now))
        self.hooks.on_phase(text)

    # ----------------------------------------------------------------------------------------------------
    # Bring-up

    def _measure_speed(self) -> None:
        """The host's speed (apps/speed.py), before anything of the run's starts, where some job replays a
        measured model in the simulator: what makes the simulator stand for this host and this hour."""
        if not any(job.kind.measured_model for job in self.jobs):
            return
        self._phase("measuring the host's speed")
        self.outcome.host_speed_s = speed_s()
        given = self.scn.cluster.host_speed_s
        if given is not None:
            self.hooks.notice(
                f"note: cluster.host_speed_s ({given:g}) is the simulator's; real processes run at this "
                f"host's speed, measured now: {self.outcome.host_speed_s:g} (summary.json host_speed_s)"
            )

    def _measure_speed_again(self) -> None:
        """The host's speed once more as the jobs have ended; the run's figure is the mean of the two, as a
        model's stamp is the mean of the figures around its take (benchmarks/mpi_profiles.py). One figure
        before the run stands for its start only: this host's speed moved by a third within minutes
        (docs/measurements.md, "Each kernel against a model of the same minutes")."""
        start = self.outcome.host_speed_s
        if start is None:
            return
        self._phase("measuring the host's speed again")
        end = speed_s()
        self.outcome.host_speeds_s = [start, end]
        self.outcome.host_speed_s = around(start, end)

    def _start_ray(self) -> None:
        self._phase("starting Ray")
        # Ray starts at most num_cpus worker processes at a time (2 here), which serialises the start of
        # 16 actors; and numpy in each worker would size thread pools by the host's cores.
        c = self.scn.cluster
        per = c.nodes_per_process
        self.groups = [list(range(i, min(i + per, c.nodes))) for i in range(0, c.nodes, per)]
        os.environ.setdefault("RAY_worker_maximum_startup_concurrency", str(len(self.groups) + 1))
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        # ray.init installs its own SIGTERM handler in this process (it dumps the stack and aborts, so no
        # teardown would run): the caller's handler (the CLI's: SIGTERM = Ctrl-C) is put back after it.
        on_term = signal.getsignal(signal.SIGTERM)
        try:
            ray.init(
                # Unless the scenario names a cluster, always a fresh local instance: an exported
                # RAY_ADDRESS would attach this run to another cluster, or retry a dead address for
                # minutes with Ctrl-C unable to stop it.
                address=c.ray_address if self.joined else "local",
                include_dashboard=False,
                logging_level=logging.ERROR,
                log_to_driver=False,
                configure_logging=True,
                namespace=f"testbed-{self.outcome.run_id}",
                # A local run's Ray advertises loopback only (its ports are closed by token: ray_auth.py).
                **({} if self.joined else {"_node_ip_address": LOOPBACK}),
            )
        except Exception as exc:  # noqa: BLE001 - any way Ray fails to start is one line for the user
            raise RayStartError(f"Ray failed to start: {root_cause(exc)}") from exc
        finally:
            if on_term is not None and threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, on_term)

    def _start_agents(self) -> list[dict]:
        """The node agents, ``cluster.nodes_per_process`` to an actor (the head node's in one of its own);
        returns what each reported (:meth:`testbed.emulator.actors.AgentHost.info`)."""

        c, out = self.scn.cluster, self.outcome
        per = c.nodes_per_process
        # Calls that block (a rank's start, a probe, a kill) run on the actor's threads: some per node.
        Host = ray.remote(num_cpus=0, max_concurrency=4 + 4 * per)(AgentHost)
        # Each agent process on a Ray node that offers the resource (a joined cluster).
        host_opts = {"resources": {NODE_RESOURCE: 1}} if self.joined else {}
        self.mon = _monitoring(self.scn, self.jobs)
        self._phase(f"starting {c.nodes} node agents in {len(self.groups)} processes")
        cfgs = self._node_configs()
        if len(cfgs) > c.nodes:
            self.groups.append([c.nodes])
        if self.joined:
            _check_node_resources(ray, c.ray_address, len(self.groups), c.nodes, per, len(cfgs) > c.nodes)
        for g in self.groups:
            name = f"node{g[0]}" if len(g) == 1 else f"nodes{g[0]}-{g[-1]}"
            self.hosts.append(Host.options(name=name, **host_opts).remote([cfgs[n] for n in g]))
        # The cluster's own agents: the probe and the node metrics are theirs (the head's host is last).
        self.cluster_hosts = self.hosts[: -1 if len(cfgs) > c.nodes else None]
        try:
            infos = [i for batch in ray.get([h.info.remote() for h in self.hosts]) for i in batch]
        except Exception as exc:  # noqa: BLE001 - Ray buries the agent's own reason in its error text
            raise RuntimeError(f"a node agent could not start: {root_cause(exc)}") from exc
        out.envelope, out.envelope_note = infos[0]["envelope"], infos[0]["envelope_note"]
        out.agent_priority = sorted({i["priority"] for i in infos})
        # One line per distinct host's note (a joined cluster's hosts may differ), the first host's first.
        notes = (i["host_memory_note"] for i in infos if i["host_memory_note"])
        out.host_memory_note = "; ".join(dict.fromkeys(notes))
        if self.joined:
            out.agent_hosts = ray.get([h.where.remote() for h in self.hosts])
        for note in (out.envelope_note, out.host_memory_note):
            if note:
                log.warning(note)
        if self.mon:
            self.nodes_sd = [(i["node"], i["metrics"]) for i in infos if i["node"] < c.nodes]
            self.head_sd = next(((i["node"], i["metrics"]) for i in infos if i["node"] >= c.nodes), None)
            _write_targets(self.run_dir, out.run_id, self.nodes_sd, None, self.mon, self.head_sd)
        return infos

    def _node_configs(self) -> list[NodeConfig]:
        """Each node's configuration, the head node's last when some job's kind has a head process."""
        scn, c, tdf = self.scn, self.scn.cluster, self.outcome.tdf
        node_mon = self.mon
        if self.joined and self.mon and self.mon["host"].startswith("127."):
            # Another host's exporter on loopback could not be scraped from here: its host's address.
            node_mon = {**self.mon, "host": AT_RAY_NODE}
        # One key for the run's NICs and workers: a connection to a NIC that does not know it is closed.
        key = secrets.token_hex(16)
        max_frame_body = frame_bound(largest_message(self.jobs))
        cfgs = [
            NodeConfig(
                run_id=self.outcome.run_id,
                node=n,
                run_dir=str(self.run_dir),
                tdf=tdf,
                cpu_rate=info.rate,
                cores=c.cores_per_node,
                envelope=c.envelope,
                cfs_period_us=round(c.cfs_period_ms * 1000),
                spin_reserve_us=round(c.spin_reserve_us),
                memory_mb=info.memory_mb,
                paging_cost=c.paging_cost,
                cluster=tuple((i.rate, i.memory_mb) for i in c.node_info()),
                scheduler=scn.scheduler.name,
                params=scn.scheduler.params,
                seed=scn.workload.seed,
                latency_s=c.network.latency_us * 1e-6,
                bandwidth_Bps=c.network.bandwidth_mbps * 1e6 / 8 if c.network.bandwidth_mbps else None,
                monitoring=node_mon,
                preload=tuple(sorted({j.kind.__module__ for j in self.jobs} - set(WORKER_MODULES))),
                nic_host=AT_RAY_NODE if self.joined else LOOPBACK,
                scratch=self.joined,
                key=key,
                max_frame_body=max_frame_body,
            )
            for n, info in enumerate(c.node_info())
        ]
        # The head node (node N = cluster.nodes), when some job's kind has a head process: a machine of
        # its own beside the cluster (paper 001's head sends the data), so an agent with its own NIC in a
        # process of its own, outside every policy's view. No envelope: the paper's head is not one of
        # the N processing nodes, its CPU is not rationed like theirs (it mostly sleeps out each chunk's
        # link time and sends); and plain local scheduling (batch's RunAll), whatever the cluster's policy.
        if any(j.kind.head for j in self.jobs):
            head = dataclasses.replace(
                cfgs[0], node=c.nodes, envelope="none", scheduler=HEAD_NODE_SCHEDULER, params={},
                monitoring={**node_mon, "head": True} if self.mon else None,
            )  # fmt: skip
            cfgs.append(head)
        return cfgs

    def _probe(self) -> None:
        """Every node's delivered CPU rate, measured at full load at once (recorded in the event log)."""

        probe_s = self.scn.clock.rate_probe_s
        if probe_s <= 0:
            return
        self._phase(f"probing CPU rate ({probe_s:g} s at full load)")
        start_at = time.monotonic() + PROBE_START_DELAY_S
        here = origin()
        batches = ray.get([h.probe.remote(probe_s, start_at, here) for h in self.cluster_hosts])
        ray.get([h.record_probe.remote(b) for h, b in zip(self.cluster_hosts, batches, strict=True)])

    # ----------------------------------------------------------------------------------------------------
    # The run

    def _start_coordinator(self, infos: list[dict]) -> None:
        """The coordinator, then emulated time 0 fixed on every node and the coordinator started."""

        scn, c, mon = self.scn, self.scn.cluster, self.mon
        self._phase("running")
        Coord = ray.remote(num_cpus=0, max_concurrency=8)(CoordinatorActor)
        if self.joined:
            # Beside this driver: its event file lands in the run folder, and it reads the driver's clock.

            here_node = ray.get_runtime_context().get_node_id()
            Coord = Coord.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here_node, soft=False))
        # After the probe, not during it: the coordinator's process start (about a second of CPU) would
        # come out of the nodes while they are measured.
        from testbed.results.dedicated import Dedicated

        # The parallel slowdown's gauge, where results have it.
        sessions = scn.results.parallel_slowdown_in(any(j.spec.owner_node is not None for j in self.jobs))
        self.coordinator = Coord.remote(
            str(self.run_dir),
            c.nodes,
            scn.scheduler.name,
            scn.scheduler.params,
            scn.workload.seed,
            list(self.jobs),
            hosts=self.hosts,
            nodes=[(i, n) for i, g in enumerate(self.groups) for n in g],
            nic_addresses=[i["nic"] for i in infos],
            tdf=self.outcome.tdf,
            duration_s=scn.duration_s,
            monitoring=mon,
            node_info=c.node_info(),
            faults=scn.faults.faults(),
            on_node_down=scn.faults.on_node_down,
            dedicated=Dedicated(scn, self.jobs) if mon and sessions else None,
        )
        if mon:
            coord_sd = ray.get(self.coordinator.metrics_address.remote())
            _write_targets(self.run_dir, self.outcome.run_id, self.nodes_sd, coord_sd, mon, self.head_sd)
        t0 = time.monotonic() + CLOCK_START_DELAY_S
        here = origin()
        ray.get([h.set_run.remote(t0, here, self.coordinator) for h in self.hosts])
        ray.get(self.coordinator.start.remote(t0))

    def _watch(self) -> None:
        """Polls the coordinator until every job ended (or the scenario's duration), or the wall limit."""

        out = self.outcome
        t_begin = self.marks[0][1]
        deadline = t_begin + self.scn.wall_limit_s
        while True:
            st = ray.get(self.coordinator.status.remote())
            self.hooks.on_status(st)
            if st["first_start_real"] is not None and out.startup_s is None:
                out.startup_s = st["first_start_real"] - t_begin
                out.phases_s["running until first job started"] = round(
                    st["first_start_real"] - self.marks[-1][1], 3
                )
            if st.get("error"):
                out.error = st["error"]
            if st["done"]:
                out.ended = st["ended"] or ALL_JOBS_ENDED
                break
            if time.monotonic() > deadline:
                out.ended = wall_limit_reached(self.scn.wall_limit_s)
                break
            time.sleep(0.25)
        out.nodes_down = st["down"]

    # ----------------------------------------------------------------------------------------------------
    # Teardown

    def _teardown(self, reason: str) -> None:

        if self.coordinator is not None:
            try:
                ray.get(self.coordinator.stop.remote(reason), timeout=30)
            except Exception as exc:  # noqa: BLE001 - a dead coordinator must not stop the agents' teardown
                log.warning("coordinator stop failed: %s", exc)
        refs = [h.shutdown.remote() for h in self.hosts]
        for ref in refs:
            try:
                ray.get(ref, timeout=30)
            except Exception as exc:  # noqa: BLE001 - a dead node's workers died with it; the janitor sweeps
                log.info("node shutdown failed: %s", exc)


def _check_quota(scn: Scenario, tdf: float) -> None:
    """A node's CFS quota at this TDF, refused below the kernel's minimum (before anything starts)."""
    c = scn.cluster
    if c.envelope == "none":
        return

    try:  # the slowest node's quota is the smallest
        quota_us(round(c.cfs_period_ms * 1000), c.min_rate(), c.cores_per_node, tdf)
    except ValueError as exc:
        raise PreflightError(f"cluster.cfs_period_ms: {exc}") from None


def _shutdown_ray() -> None:

    try:
        ray.shutdown()
    except Exception as exc:  # noqa: BLE001 - teardown must go on
        log.warning("ray.shutdown failed: %s", exc)


def _check_node_resources(ray, address: str, need: int, nodes: int, per: int, head: bool) -> None:
    """A joined cluster must offer one ``testbed_node`` per agent process, or the agents would wait for
    a Ray node forever: refused here, with the count and the fix."""
    have = ray.cluster_resources().get(NODE_RESOURCE, 0)
    if have >= need:
        return
    why = f"{nodes} nodes at cluster.nodes_per_process {per}" + (", plus the head node" if head else "")
    raise RayStartError(
        f"cluster.ray_address {address}: the Ray cluster offers {have:g} '{NODE_RESOURCE}' resources and "
        f"this run needs {need}, one per agent process ({why}); start more Ray nodes with "
        f"`ray start --address ... --resources '{{\"{NODE_RESOURCE}\": K}}'` (k8s/: one per worker pod), or "
        "raise cluster.nodes_per_process"
    )


def _collect(hosts: list, groups: list[list[int]], run_dir: Path) -> list[int]:
    """Brings each agent process's files (events, logs: written on its own host) into the run folder;
    returns the nodes whose files were lost with their process."""

    lost: list[int] = []
    for h, nodes in zip(hosts, groups, strict=False):  # hosts: those started before an error
        try:
            files = ray.get(h.collect.remote(), timeout=60)
        except Exception as exc:  # noqa: BLE001 - a dead host took its files with it: said, and the rest kept
            log.warning("the events and logs of nodes %s were lost: %s", nodes, root_cause(exc))
            lost.extend(nodes)
            continue
        for rel, data in files.items():
            path = run_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return lost


def _monitoring(scn: Scenario, jobs: Sequence[Job]) -> dict | None:
    m = scn.monitoring
    if not m.enabled:
        return None
    return {
        "host": m.host,
        "port": m.port,
        "scrape_interval_s": m.scrape_interval_s,
        "idle_watts": scn.cluster.power.idle_watts,
        "busy_watts": scn.cluster.power.busy_watts,
        "job_classes": sorted({j.spec.job_class for j in jobs}),
    }


def _write_targets(
    run_dir: Path, run_id: str, nodes: list, coordinator: str | None, mon: dict, head: tuple | None = None
) -> None:
    # Prometheus file_sd, rewritten as exporters come up (monitoring/prometheus.py).

    write_targets(run_dir, run_id, nodes, coordinator, mon["scrape_interval_s"], head=head)
