"""The node agent: one emulated node (docs/architecture.md, "The emulated node").

It owns the node's worker processes (spawned from its loop thread, so they die with it), applies the local
policy through the mechanism (stop/continue, nice), samples per-process CPU time from the kernel, switches
gang slots on its own timer at the announced emulated time, hosts the node's NIC, and records events.

All state lives on one loop thread (``LoopThread``); public methods may be called from any thread (Ray's
executor threads) and marshal onto it. The class is plain Python; ``testbed.emulator.actors`` hosts it in
a Ray actor (``AgentHost``, several agents per actor process).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.apps.environ import NodeEnv, leftover_marks
from testbed.apps.probe import command as probe_command
from testbed.apps.spinguard import GuardSpec
from testbed.apps.wire import MAX_FRAME_BODY
from testbed.core import coop, paging
from testbed.core import events as ev
from testbed.core.clock import Clock
from testbed.core.messages import NodeError, ProcExit, QuantumUsage
from testbed.core.observe import Observer
from testbed.emulator.control import KillJob, Ping, SetDown, StartProc, SwitchSlot
from testbed.emulator.loop import LoopThread
from testbed.emulator.mechanism import hostmem
from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.forkserver import ForkServer
from testbed.emulator.mechanism.priority import raise_process_nice, raise_thread_priority
from testbed.emulator.mechanism.process import BaseWorker
from testbed.emulator.mechanism.ratewatch import RateWatch, window_s
from testbed.emulator.nic import Nic
from testbed.janitor import processes_with, scratch_root, session_members
from testbed.schedulers import registry
from testbed.schedulers.base import (
    CoopEvent,
    CoopReceived,
    JobSpec,
    LocalDecision,
    NodeInfo,
    Proc,
    ProcAdded,
    ProcExited,
    SlotStart,
    Timer,
)

#: How often (emulated s) live processes' CPU time is sampled when nothing else samples it.
SAMPLE_PERIOD_S = 1.0
#: Imported by the node's fork server at start, so that no rank pays for them
#: (testbed.emulator.mechanism.forkserver).
#: Each ``module:function`` also calls it there; measured per rank without them: tbcomm's import 8.5 ms of
#: CPU, the registry's entry-point scan 8 ms.
WORKER_MODULES = (
    "testbed.apps.worker",
    "testbed.apps.tbcomm",
    "testbed.apps.registry:names",
    "testbed.apps.synthetic",
    "testbed.apps.probe",
)
#: The least CPU (real s) a node's rate probe measures: its window is stretched to this over the node's
#: quota. The kernel enforces a quota at its tick (4 ms here, HZ 250): a node whose quota per period is
#: under a tick runs tick-long bursts and repays the overrun by skipping periods (rate 1/75: 2-4 ms every
#: 100-300 ms), so a 1 s probe holds a few bursts and is off by about one. 128 probes at TDF 75.3 alone
#: on this host: 1 s read -5 to +10 %, 6 s -0.7 to +0.4 % (docs/measurements.md,
#: "Scale on this 2-core host").
PROBE_MIN_CPU_S = 0.08
#: Python's default (5 ms) lets a busy thread keep the GIL for 5 ms after the timer thread asks for it.
GIL_SWITCH_INTERVAL_S = 0.0005


class NodeDownError(RuntimeError):
    """The node is down (a scripted fault): it starts no process until it is up again."""


@dataclass
class NodeConfig:
    run_id: str
    node: int
    run_dir: str
    tdf: float
    cpu_rate: float = 1.0
    cores: int = 1
    envelope: str = "auto"
    cfs_period_us: int = 100_000
    #: Real us of the quota a period that a spinning wait leaves unspent (cluster.spin_reserve_us; 0: off).
    spin_reserve_us: int = 0
    memory_mb: float | None = None
    #: The paging model's page-fault cost (cluster.paging_cost): what the node_paging events' factor is
    #: computed with; logged only, real processes are never slowed by it (_watch_memory).
    paging_cost: float = paging.PAGE_FAULT_COST
    #: Every node's (cpu_rate, memory_mb), node i at index i, for the local policy (LocalPolicy.cluster);
    #: empty: not told.
    cluster: tuple[tuple[float, float | None], ...] = ()
    scheduler: str = "local"
    params: dict = field(default_factory=dict)
    seed: int = 0
    latency_s: float = 0.0
    bandwidth_Bps: float | None = None
    #: Modules the node's fork server imports besides WORKER_MODULES: the run's program kinds (a kind
    #: imported at fork time would count its import in every process's start).
    preload: tuple[str, ...] = ()
    #: None: no exporter; else {host, port, scrape_interval_s, idle_watts, busy_watts, job_classes}.
    monitoring: dict | None = None
    #: The address the NIC listens on: loopback on one host; the host's own address when the nodes are
    #: spread over a Ray cluster (another host's workers connect to it).
    nic_host: str = "127.0.0.1"
    #: True when this host may not see the driver's ``run_dir`` (a joined Ray cluster): the agent writes
    #: its logs and events under :func:`scratch_dir` instead, and the driver collects them at the end.
    scratch: bool = False
    #: The run's key, which the node's NIC asks of every connection and its workers are given (None: no
    #: key, an agent of the tests).
    key: str | None = None
    #: The largest frame body the node's NIC takes (apps/wire.py frame_bound, from the run's jobs).
    max_frame_body: int = MAX_FRAME_BODY


def scratch_dir(run_id: str, node: int) -> Path:
    """Node ``node``'s folder on its own host when the run folder is the driver's alone (the janitor
    removes the run's whole scratch root)."""
    return scratch_root(run_id) / f"node{node}"


@dataclass
class _ProcState:
    proc: Proc
    worker: BaseWorker
    running: bool = True
    nice: int = 0
    cpus: frozenset[int] | None = None  # set by the agent (None: as started, every CPU the agent has)
    cpu_at_sample: float = 0.0
    t_at_sample: float = 0.0
    cpu_at_switch: float = 0.0  # per-quantum baseline, apart from the periodic sampler's
    t_at_switch: float = 0.0
    log: str = ""
    attempt: int = 1  # which start of its job (a requeued job starts again)
    memory_mb: float = 0.0  # its job's declared memory per process (really allocated by the worker)


def _thread_use() -> tuple[float, int, int]:
    """The calling thread's CPU seconds and its voluntary and involuntary context switches."""
    ru = resource.getrusage(resource.RUSAGE_THREAD)
    return time.thread_time(), ru.ru_nvcsw, ru.ru_nivcsw


def _stderr_tail(path: str, limit: int = 400) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            lines = fh.read().decode(errors="replace").strip().splitlines()
            return lines[-1] if lines else ""
    except OSError:
        return ""


class NodeAgent:
    """One emulated node; it implements :class:`~testbed.emulator.control.NodeControl`."""

    def __init__(self, cfg: NodeConfig) -> None:
        self.cfg = cfg
        if not os.path.isabs(self.cfg.run_dir):
            # Workers run in other working directories: a relative path would name another place there.
            raise ValueError(f"run_dir must be absolute, got {self.cfg.run_dir!r}")
        self.node = self.cfg.node
        self.run_dir = scratch_dir(self.cfg.run_id, self.node) if self.cfg.scratch else Path(self.cfg.run_dir)
        (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.run_dir / "io").mkdir(parents=True, exist_ok=True)
        # Until the run's clock is set, emulated time is measured from agent start.
        self.clock = Clock.starting_now(self.cfg.tdf)
        self.events = ev.EventWriter(self.run_dir / "events" / f"node{self.node}.jsonl", f"node{self.node}")
        self._init_policy()
        self.procs: dict[Proc, _ProcState] = {}
        #: Each running job's other nodes and their NICs (StartProc.peers): where CoopEvents for it go.
        self.coop_peers: dict[str, dict[int, str]] = {}
        self.notify: Callable[[Any], Any] | None = (
            None  # reports to the coordinator (testbed/core/messages.py)
        )
        self.down: str | None = None  # why the node is down (a scripted fault), or None
        self.closed = False
        self._wakeup = None
        self._paging = 1.0  # the paging model's factor for this node, as last logged (_watch_memory)
        self._sampler = None
        self._control0: tuple[float, float] | None = None
        self._loop0 = (0.0, 0, 0)  # the loop thread's _thread_use() when the run began
        self._local_events = 0  # the NIC's events handed to the policy (on_local_event): run_info counts them
        self._init_observers()
        # One long-lived thread spawns every worker: PR_SET_PDEATHSIG fires when the forking *thread* dies.
        # It is not the loop thread: Popen waits until the child has exec'd, and the child joins the node's
        # throttled cgroup before exec, so a spawn can take a whole CFS period; the timers must not wait.
        self.spawner = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"node{self.node}-spawn")
        # The timer thread needs the GIL on time: hand it over quickly, and keep every GIL holder on a CPU.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        process_nice = raise_process_nice()
        self.lt = LoopThread(f"node{self.node}", on_start=raise_thread_priority)
        # An exception in a loop callback (the local policy's, or the agent's own) would only be logged by
        # asyncio: it is reported to the coordinator, which ends the run with it.
        self.error: str | None = None
        self.lt.loop.set_exception_handler(self._loop_error)
        self.priority = f"{self.lt.start_result}; other threads {process_nice}"
        self._init_envelope()
        self._start_nic_and_forkserver()

    def _init_policy(self) -> None:
        """The scheduler's local policy for this node, told its own node and every node's rate and memory."""
        self.sched = registry.get(self.cfg.scheduler)
        info = NodeInfo(self.cfg.cpu_rate, self.cfg.memory_mb)
        cluster = [NodeInfo(r, m) for r, m in self.cfg.cluster] if self.cfg.cluster else None
        self.policy = self.sched.make_local(self.node, self.cfg.params, self.cfg.seed, info, cluster)
        # Paired gang predicts from each process's CPU use per quantum: report it to the coordinator.
        self.report_quanta = getattr(self.sched.global_policy, "wants_utilization", False)

    def _init_envelope(self) -> None:
        """The node's envelope (what holds its processes to its rate and memory), and its rate's watch."""
        self.envelope = make_envelope(
            self.cfg.envelope,
            run_id=self.cfg.run_id,
            node=self.node,
            cpu_rate=self.cfg.cpu_rate,
            tdf=self.cfg.tdf,
            cores=self.cfg.cores,
            period_us=self.cfg.cfs_period_us,
            memory_mb=self.cfg.memory_mb,
        )
        self.envelope.create()
        # The node's rate, watched window by window for the whole run (where a quota fixes it).
        quota = self.envelope.configured_rate() if self.envelope.fixes_rate else None
        period_s = self.cfg.cfs_period_us / 1e6
        self.ratewatch = RateWatch(self.envelope.rate_counters, quota, period_s) if quota else None
        self._ratewatch_timer = None
        self._ratewatch_cpu = [0.0, 0]  # the watch's own CPU (s, loop thread) and windows: its cost
        self._all_cpus = frozenset(os.sched_getaffinity(0))
        self._weight_cpus = self.envelope.weight_cpus(sorted(self._all_cpus))

    def _start_nic_and_forkserver(self) -> None:
        """The node's NIC (its messages, on the loop thread) and the fork server its workers start from;
        then the run's log says the node is up."""
        self.nic = Nic(
            self.node,
            self,
            self.clock,
            report_messages=self.policy.wants_message_events,
            latency_s=self.cfg.latency_s,
            bandwidth_Bps=self.cfg.bandwidth_Bps,
            host=self.cfg.nic_host,
            key=self.cfg.key,
            max_frame_body=self.cfg.max_frame_body,
        )
        self.nic_address = self.lt.call(self.nic.start)
        # Workers start by fork from a server with their modules imported: start-up is not the job's.
        preload = (*WORKER_MODULES, *self.cfg.preload)
        self.forkserver = self.spawner.submit(
            ForkServer, self.envelope, env=self._env({}), cwd=str(self.run_dir),
            log=str(self.run_dir / "logs" / f"forkserver.node{self.node}.log"), preload=preload,
        ).result()  # fmt: skip
        self.forkserver.wait_ready()
        self.events.emit(
            ev.RUN_INFO,
            t=0.0,
            node=self.node,
            run_id=self.cfg.run_id,
            pid=os.getpid(),
            priority=self.priority,
            envelope=self.envelope.kind,
            envelope_note=getattr(self.envelope, "note", "") or "",
            nic=self.nic_address,
        )

    # ----------------------------------------------------------------------------------------------------
    # Public API (any thread)

    def info(self) -> dict:
        return {
            "node": self.node,
            "pid": os.getpid(),
            "nic": self.nic_address,
            "priority": self.priority,
            "envelope": self.envelope.kind,
            "envelope_note": getattr(self.envelope, "note", "") or "",
            "host_memory_note": hostmem.page_reporting_note(),
            "configured_rate": self.envelope.configured_rate(),
            "metrics": self.metrics_address,
        }

    def ping(self, cmd: Ping | None = None) -> int:
        return self.node

    def set_run(self, t0: float, notify: Callable[[Any], Any] | None = None) -> None:
        """Fixes the run's clock; ``notify(message)`` reports to the coordinator (process exits, CPU per
        quantum, switch times: testbed/core/messages.py)."""

        def _set():
            self.clock = Clock(self.cfg.tdf, t0)
            self.nic.clock = self.clock
            self.events.clock = self.clock
            self.notify = notify
            self._control0 = (time.process_time(), time.monotonic())
            self._loop0 = _thread_use()
            self._schedule_sample()
            self._start_ratewatch()
            self._start_observers()

        self.lt.call(_set)

    def probe(self, seconds: float, start_at: float) -> dict:
        """Runs the work loop flat out in the envelope from ``start_at`` (CLOCK_MONOTONIC) for ``seconds``
        and reports the delivered CPU rate. ``seconds`` is stretched to measure at least PROBE_MIN_CPU_S
        of CPU at the node's quota."""
        configured = self.envelope.configured_rate() or self.cfg.cpu_rate * self.cfg.cores / self.cfg.tdf
        seconds = max(seconds, PROBE_MIN_CPU_S / configured)
        log = str(self.run_dir / "logs" / f"probe.node{self.node}.out")
        err = str(self.run_dir / "logs" / f"probe.node{self.node}.err")
        worker = self.spawner.submit(
            self.forkserver.spawn,
            probe_command(seconds, start_at),
            env=self._env({}),
            cwd=str(self.run_dir),
            stdout=log,
            stderr=err,
        ).result()
        try:
            code = worker.reap(timeout=seconds + 60 + max(0.0, start_at - time.monotonic()))
        finally:
            worker.close()
        if code != 0:
            raise RuntimeError(f"node {self.node}: CPU-rate probe failed (exit {code}): {_stderr_tail(err)}")
        with open(log) as fh:
            out = json.loads(fh.read().strip().splitlines()[-1])
        delivered = out["rate"]  # real cores (apps/probe.py: robust to where the quota's bursts fall)
        return {
            "node": self.node,
            "cpu_rate": self.cfg.cpu_rate,  # the node's own: what ``configured`` is made from
            "configured": configured,
            "delivered": delivered,
            "error": (delivered - configured) / configured,
            "seconds": round(seconds, 3),  # the probe's window (real s)
        }

    def record_probe(self, result: dict) -> None:
        self.events.emit(ev.RATE_PROBE, t=0.0, **result)

    def start_proc(self, cmd: StartProc) -> int:
        """Starts a rank (:class:`~testbed.emulator.control.StartProc`). What is left here of an earlier
        start of the job's rank is killed first. Refused while the node is down."""
        if self.down is not None:
            raise NodeDownError(f"node {self.node} is down ({self.down})")
        # Built here, not on the loop thread: it reads only what is fixed for the run, and a rank's start
        # waits for every hop between threads.
        env = self._env(dict(cmd.env))
        base = self.run_dir / "logs" / f"{cmd.job_id}.{cmd.rank}"
        worker = self.spawner.submit(
            self.forkserver.spawn, list(cmd.argv), env=env, cwd=str(self.run_dir), stdout=f"{base}.out",
            stderr=f"{base}.err",
        ).result()  # fmt: skip
        if self.closed:
            worker.kill()
            worker.close()
            raise RuntimeError(f"node {self.node} is shutting down")
        proc = Proc(cmd.job_id, cmd.rank)
        return self.lt.call(
            self._register, proc, worker, f"{base}.err", cmd.attempt, cmd.job_class, cmd.spec, cmd.peers,
            timeout=30,
        )  # fmt: skip

    def switch_slot(self, cmd: SwitchSlot) -> None:
        received = time.monotonic()
        self.lt.loop.call_soon_threadsafe(self._arm_switch, cmd, received)

    def kill_job(self, cmd: KillJob) -> int:
        return self.lt.call(self._kill_job, cmd.job_id, cmd.reason, cmd.attempt)

    def set_down(self, cmd: SetDown) -> int:
        def _set():
            down, reason = cmd.down, cmd.reason
            self.down = reason or "down" if down else None
            self.events.emit(ev.NODE_DOWN if down else ev.NODE_UP, node=self.node, reason=reason)
            return self._kill_all(f"node {self.node} went down ({reason})", keep_timers=True) if down else 0

        return self.lt.call(_set)

    def shutdown(self) -> dict:
        """Kills every worker (stopped ones included), removes the envelope, closes the log."""
        if self.closed:
            return {"node": self.node, "killed": 0}
        killed = 0
        if self._control0 is not None:
            # The agent's own CPU (every thread: loop, NIC, Ray's) since the run began: control overhead.
            cpu0, wall0 = self._control0
            nic = self.nic.stats()
            try:
                loop = [b - a for a, b in zip(self._loop0, self.lt.call(_thread_use, timeout=5), strict=True)]
            except Exception:  # noqa: BLE001 - a loop that does not answer: no figures, the shutdown goes on
                loop = [None, None, None]
            self.events.emit(
                ev.RUN_INFO,
                node=self.node,
                pid=os.getpid(),  # agents sharing a process report the same process's CPU
                control_cpu_s=time.process_time() - cpu0,
                control_wall_s=time.monotonic() - wall0,
                # The rate watch's share of it (its loop-thread CPU) and how many windows it read.
                ratewatch_cpu_s=self._ratewatch_cpu[0],
                ratewatch_windows=self._ratewatch_cpu[1],
                # What that CPU was spent on: the NIC's messages and the policy's local events.
                **{f"nic_{k}": nic[k] for k in ("messages_in", "messages_out", "arrivals")},
                local_events=self._local_events,
                # The loop thread's own share (the NIC's data path and the policy run on it in report
                # mode) and how often it slept and woke: a wake-up costs more than a message's Python.
                loop_cpu_s=loop[0],
                loop_switches=loop[1],
                loop_preempted=loop[2],
            )
        self.closed = True  # from here on a spawn that completes is killed instead of registered
        try:
            killed = self.lt.call(self._kill_all, "node shut down", timeout=30)
            self.lt.call(self.nic.close, timeout=10)
        finally:
            self.lt.stop()
            self.spawner.shutdown(wait=True)
            self.forkserver.close()
            self.envelope.destroy()  # also kills anything a late spawn left inside
            self.events.close()
            for o in self.observers:
                o.close()
        return {"node": self.node, "killed": killed}

    # ----------------------------------------------------------------------------------------------------
    # NIC hooks (loop thread)

    def on_hello(self, proc: Proc, pid: int) -> None:
        # The process was stopped at spawn if the policy did not allow it; GO only releases the barrier
        # that keeps a worker from starting its work before the agent has applied the policy.
        self.nic.go(proc)
        self.events.emit(ev.PROC_READY, node=self.node, job=proc.job_id, rank=proc.rank)

    def on_local_event(self, event) -> None:
        self._local_events += 1
        self._apply(self._decide(self.clock.now(), event))

    def on_progress(self, proc: Proc, unit: str, value: float) -> None:
        self.events.emit(ev.PROGRESS, node=self.node, job=proc.job_id, rank=proc.rank, unit=unit, value=value)

    def on_disconnect(self, proc: Proc) -> None:
        pass  # the pidfd tells when the process is really gone

    # ----------------------------------------------------------------------------------------------------
    # Loop-thread internals

    def _env(self, extra: dict) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        node = NodeEnv(
            self.clock,
            self.cfg.run_id,
            self.node,
            self.nic_address,
            str(self.run_dir / "io"),
            self.cfg.key,
            # The emulated link into this node, for a program that must refuse what it cannot carry over
            # it (apps/mpi_wrap.py: MPI calls it does not mirror through tbcomm).
            link_latency_s=self.cfg.latency_s,
            link_bandwidth_Bps=self.cfg.bandwidth_Bps,
            max_frame_body=self.cfg.max_frame_body,
        )
        env.update(node.to_env())
        env.update(self._spin_guard_env())
        env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
        env.update(extra)
        return env

    def _spin_guard_env(self) -> dict[str, str]:
        """What a worker's spinning waits need to leave the node's quota its reserve
        (apps/spinguard.py): nothing where the reserve is 0 or no quota fixes the node's rate."""
        usage = self.envelope.usage_files() if self.cfg.spin_reserve_us > 0 else None
        if usage is None:
            return {}
        period = self.cfg.cfs_period_us
        quota = round(self.envelope.configured_rate() * period)
        return GuardSpec(period, quota, self.cfg.spin_reserve_us, *usage).to_env()

    def _register(
        self,
        proc: Proc,
        worker: BaseWorker,
        log: str,
        attempt: int = 1,
        job_class: str | None = None,
        spec: JobSpec | None = None,
        peers: Mapping[int, str] | None = None,
    ) -> int:
        if peers:
            self.coop_peers[proc.job_id] = dict(peers)
        if proc in self.procs:  # an earlier start of this rank, not killed yet: this one replaces it
            self._on_exit(proc, killed=f"replaced by start {attempt} of its job")
        now = self.clock.now()
        st = _ProcState(
            proc, worker, running=True, t_at_sample=now, t_at_switch=now, log=log, attempt=attempt,
            memory_mb=spec.memory_mb if spec is not None else 0.0,
        )  # fmt: skip
        self.procs[proc] = st
        self.lt.loop.add_reader(worker.exit_fd, self._on_exit, proc)
        self.events.emit(
            ev.PROC_STARTED, t=now, node=self.node, job=proc.job_id, rank=proc.rank, pid=worker.pid,
            **({"job_class": job_class} if job_class is not None else {}),
        )  # fmt: skip
        local = spec is not None and spec.owner_node is not None  # a local user's session
        self._apply(self._decide(now, ProcAdded(proc, spec, local=local)))
        return worker.pid

    def _on_exit(self, proc: Proc, killed: str | None = None) -> None:
        """Records a worker's end: its own exit (the pidfd became readable) or a kill by the agent."""
        st = self.procs.pop(proc, None)
        if st is None:
            return
        self.lt.loop.remove_reader(st.worker.exit_fd)
        try:
            cpu = st.worker.cpu_time_s()  # still readable: the zombie is not reaped yet
        except (OSError, ValueError):
            cpu = st.cpu_at_sample
        code = st.worker.kill() if killed else st.worker.reap()
        st.worker.close()
        now = self.clock.now()
        reason = None
        if killed:
            reason = f"killed by the agent: {killed}"
        elif code != 0:
            reason = _stderr_tail(st.log) or (
                f"killed by signal {-code}" if code < 0 else f"exit code {code}"
            )
            if code < 0 and "signal" not in reason:
                reason = f"killed by signal {-code}; last output: {reason}"
        if not self.closed:  # at shutdown the envelope's destroy kills everything left in it
            try:
                self.spawner.submit(self._kill_leftovers, proc, st.worker.pid)
            except RuntimeError:
                pass  # the spawner is shutting down: the same
        rec = {"job": proc.job_id, "rank": proc.rank, "node": self.node, "code": code, "cpu_s": cpu,
               "reason": reason, "attempt": st.attempt}  # fmt: skip
        self.events.emit(ev.PROC_EXITED, t=now, **rec)
        self._apply(self._decide(now, ProcExited(proc)))
        if not any(p.job_id == proc.job_id for p in self.procs):
            self.nic.drop_job(proc.job_id)  # frees messages nobody will consume
            self.coop_peers.pop(proc.job_id, None)
        if self.notify is not None:
            self.notify(ProcExit(**rec))

    def _kill_leftovers(self, proc: Proc, pid: int) -> None:
        """Kills what worker ``pid`` left behind on this node (children it forked, which outlive it as
        orphans and would go on using the node's CPU for the rest of the run): its session's members (a
        forked worker leads its own session) and, for a worker started by exec, the processes that carry
        its environment. Runs on the spawner thread: finding them reads /proc, which the loop's timers must
        not wait for."""

        mark = leftover_marks(self.cfg.run_id, self.node, proc.job_id, proc.rank)
        candidates = self.envelope.pids() if self.envelope.fixes_rate else None
        left = sorted(set(processes_with(mark, candidates)) | set(session_members(pid, candidates)))
        for pid in left:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
        if left:
            self.lt.loop.call_soon_threadsafe(
                lambda: self.events.emit(
                    ev.RUN_INFO, node=self.node, job=proc.job_id, rank=proc.rank, leftovers_killed=left
                )
            )

    def _apply(self, decision: LocalDecision) -> float | None:
        """Brings the processes in line with a decision; returns when the change took effect
        (CLOCK_MONOTONIC after the last signal), or None if nothing changed."""
        effect = None
        for event in decision.coop:
            self._send_coop(event)
        if decision.run is not None:
            stop = [st for p, st in self.procs.items() if st.running and p not in decision.run]
            cont = [st for p, st in self.procs.items() if not st.running and p in decision.run]
            # Stop before continuing so the node never runs both sets at once.
            for st in stop:
                st.worker.stop()
                st.running = False
            for st in cont:
                st.worker.cont()
                st.running = True
            if cont:
                for o in self.observers:
                    o.continued(len(cont))
            if stop or cont:
                # SIGCONT makes a task runnable inside kill(); once SIGSTOP's kill() has returned the target
                # runs no more user-space instructions. So the switch took effect here.
                effect = time.monotonic()
        for p, nice in decision.nice.items():
            st = self.procs.get(p)
            if st is not None and st.nice != nice:
                st.worker.set_nice(nice)
                st.nice = nice
        self._place_weighted()
        self._watch_memory()
        if decision.wakeup is not None:
            if self._wakeup is not None:
                self._wakeup.cancel()
            self._wakeup = self.lt.loop.call_at(self.clock.real_at(decision.wakeup), self._on_wakeup)
        return effect

    def _watch_memory(self) -> None:
        """Logs where the paging model (testbed/core/paging.py) would slow this node: its running processes'
        declared memory (which the workers really allocate and touch) over the node's. Logged, not
        emulated: this host has no swap, and a memory limit on the envelope would have the kernel kill a
        process rather than page (docs/policies.md, "Paging, modelled")."""
        if self.cfg.memory_mb is None:
            return
        demand = sum(st.memory_mb for st in self.procs.values() if st.running)
        f = paging.factor(demand, self.cfg.memory_mb, self.cfg.paging_cost)
        if f != self._paging:
            self._paging = f
            self.events.emit(
                ev.NODE_PAGING, node=self.node, demand_mb=demand, memory_mb=self.cfg.memory_mb, factor=f,
                emulated=False,
            )  # fmt: skip

    def _place_weighted(self) -> None:
        """Nice values are CFS weights, which act only among tasks on one run-queue: while the policy
        weights any of the node's processes, all of them run on the node's own CPUs
        (Envelope.weight_cpus); otherwise anywhere, as started."""
        weighted = any(st.nice != 0 for st in self.procs.values())
        cpus = self._weight_cpus if weighted else self._all_cpus
        for st in self.procs.values():
            if (st.cpus or self._all_cpus) != cpus:
                st.worker.set_cpus(cpus)
                st.cpus = cpus

    def _send_coop(self, event: CoopEvent) -> None:
        """A CoopEvent of the node's policy to the other nodes of its job (none left: nothing to send)."""
        peers = self.coop_peers.get(event.job_id, {})
        self.events.emit(ev.COOP_SENT, node=self.node, to=sorted(peers), **coop.log_fields(event))
        if peers:
            body = coop.encode(event, self.node)
            for nic in peers.values():
                self.nic.send_coop(nic, body)

    def on_coop(self, body: bytes) -> None:
        """Another node's CoopEvent, through the link into this node (NicHooks; on the agent's loop)."""
        try:
            src, event = coop.decode(body)
        except coop.CoopError as exc:  # only the run's NICs get in (its key): a bug, and the run ends on it
            self._report_error(f"node {self.node}: a CoopEvent from another node: {exc}")
            return
        now = self.clock.now()
        self.events.emit(ev.COOP_RECEIVED, t=now, node=self.node, from_node=src, **coop.log_fields(event))
        self._apply(self._decide(now, CoopReceived(src, event)))

    def _on_wakeup(self) -> None:
        self._wakeup = None
        self._apply(self._decide(self.clock.now(), Timer()))

    def _arm_switch(self, cmd: SwitchSlot, received: float) -> None:
        allowed = frozenset(cmd.allowed)
        self.lt.loop.call_at(self.clock.real_at(cmd.at), self._switch, cmd.at, cmd.slot, allowed, received)

    def _switch(self, at: float, slot: int, allowed: frozenset[str], received: float) -> None:
        t_real = time.monotonic()
        self._quantum_sample(self.clock.emu_at(t_real))
        effect = self._apply(self._decide(self.clock.emu_at(t_real), SlotStart(slot, allowed)))
        if effect is None:
            effect = t_real  # nothing to change: the node was already in the slot's state
        e_emu = self.clock.emu_at(effect)
        self.events.emit(
            ev.SLOT_SWITCH,
            t=e_emu,
            node=self.node,
            slot=slot,
            at=at,
            effect=e_emu,
            late_ms=(e_emu - at) * 1000.0,
            notice_ms=(at - self.clock.emu_at(received)) * 1000.0,
            jobs=sorted(allowed),
        )

    def _quantum_sample(self, now: float) -> None:
        """Per-process CPU of the quantum that ends here, from the kernel. Only processes that were
        allowed to run report: a stopped one's 0 would read as an I/O-bound quantum."""
        samples = []
        for p, st in self.procs.items():
            try:
                cpu = st.worker.cpu_time_s()
            except (OSError, ValueError):
                continue
            dt = now - st.t_at_switch
            if st.running and dt > 0:
                util = (cpu - st.cpu_at_switch) / (dt * self.cfg.cpu_rate * self.cfg.cores)
                samples.append((p.job_id, p.rank, min(1.0, max(0.0, util)), dt))
            st.cpu_at_switch, st.t_at_switch = cpu, now
        if samples and self.report_quanta:
            self.events.emit(ev.QUANTUM_CPU, t=now, node=self.node, samples=samples)
            if self.notify is not None:
                self.notify(QuantumUsage(self.node, tuple(samples)))

    def _sample(self) -> None:
        now = self.clock.now()
        for p, st in list(self.procs.items()):
            try:
                cpu = st.worker.cpu_time_s()
            except (OSError, ValueError):
                continue
            self.events.emit(ev.PROC_CPU, t=now, node=self.node, job=p.job_id, rank=p.rank, cpu_s=cpu)
            st.cpu_at_sample, st.t_at_sample = cpu, now

    def _schedule_sample(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()

        def tick():
            self._sample()
            self._sampler = self.lt.loop.call_later(self.clock.real(SAMPLE_PERIOD_S), tick)

        self._sampler = self.lt.loop.call_later(self.clock.real(SAMPLE_PERIOD_S), tick)

    def _start_ratewatch(self) -> None:
        """Every window (whole CFS periods, about 1 s real; mechanism/ratewatch.py) a ``rate_window``
        event: what the node's CPU was against its quota. The ticks are due at fixed times from the start,
        so that each window spans the same phase of the quota's periods."""
        if self.ratewatch is None:
            return
        if self._ratewatch_timer is not None:
            self._ratewatch_timer.cancel()
        w = window_s(self.cfg.cfs_period_us)
        start = time.monotonic()
        self.ratewatch.start(start)
        n = 0
        t_prev = start

        def tick():
            nonlocal n, t_prev
            c0 = time.thread_time()
            now = time.monotonic()
            win = self.ratewatch.sample(now)
            if win is not None:
                self.events.emit(
                    ev.RATE_WINDOW, t=self.clock.emu_at(now), node=self.node, t0=self.clock.emu_at(t_prev),
                    w=round(win.seconds, 6), cpu=round(win.cpu, 6), wait=round(win.wait, 6),
                    explained=round(win.explained, 6), entitled=round(win.entitled, 6),
                    runnable=round(win.runnable, 6), longest=round(win.longest, 6),
                    error=None if win.error is None else round(win.error, 6),
                )  # fmt: skip
            t_prev = now
            n += 1
            # Due at start + n windows; after a late tick, the next whole window from now.
            due = start + n * w
            while due <= time.monotonic():
                n += 1
                due = start + n * w
            self._ratewatch_timer = self.lt.loop.call_at(due, tick)
            self._ratewatch_cpu[0] += time.thread_time() - c0
            self._ratewatch_cpu[1] += 1

        self._ratewatch_timer = self.lt.loop.call_at(start + w, tick)

    def _kill_job(self, job_id: str, reason: str, attempt: int | None = None) -> int:
        n = 0
        doomed = [
            p
            for p, st in self.procs.items()
            if p.job_id == job_id and (attempt is None or st.attempt <= attempt)
        ]
        for p in doomed:
            self._on_exit(p, killed=reason)
            n += 1
        if n:
            self.events.emit(ev.RUN_INFO, node=self.node, killed_job=job_id, reason=reason, processes=n)
        return n

    def _kill_all(self, reason: str, keep_timers: bool = False) -> int:
        if not keep_timers:
            if self._sampler is not None:
                self._sampler.cancel()
            if self._ratewatch_timer is not None:
                self._ratewatch_timer.cancel()
            for h in self._observer_timers:
                h.cancel()
        procs = list(self.procs)
        for p in procs:
            self._on_exit(p, killed=reason)
        return len(procs)

    # ----------------------------------------------------------------------------------------------------
    # Observers (testbed/core/observe.py): the node's Prometheus metrics when the scenario monitors the run

    def _init_observers(self) -> None:
        self.observers: list[Observer] = []
        self.metrics_address: str | None = None
        self._observer_timers: list = []
        mon = self.cfg.monitoring
        if mon:
            from testbed.monitoring.observers import NodeMetricsObserver

            obs = NodeMetricsObserver(
                self.node, self.cfg.scheduler, self.cfg.tdf, self.cfg.cpu_rate, self.cfg.cores, mon,
                sample=self._observed_state, send=lambda msg: self.notify and self.notify(msg),
            )  # fmt: skip
            self.metrics_address = obs.address
            self.observers.append(obs)
        for o in self.observers:
            self.events.subscribe(o.event)

    def _observed_state(self) -> tuple[float, int, int, int]:
        """(envelope CPU seconds, processes running, stopped, blocked: continued but waiting for a
        message)."""
        running = sum(st.running for st in self.procs.values())
        blocked = min(running, self.nic.stats()["waiting"])
        return self.envelope.cpu_usage_s(), running - blocked, len(self.procs) - running, blocked

    def _start_observers(self) -> None:
        for h in self._observer_timers:
            h.cancel()
        self._observer_timers = []
        for i, o in enumerate(self.observers):
            o.begin()
            if o.period_s:

                def tick(o=o, i=i):
                    try:
                        o.tick()
                    finally:
                        self._observer_timers[i] = self.lt.loop.call_later(o.period_s, tick)

                self._observer_timers.append(self.lt.loop.call_later(o.period_s, tick))

    def _decide(self, now: float, event) -> LocalDecision:
        try:
            if not self.observers:
                return self.policy.on_event(now, event)
            t = time.perf_counter()
            decision = self.policy.on_event(now, event)
            dt = time.perf_counter() - t
            for o in self.observers:
                o.decided(dt)
            return decision
        except Exception as exc:
            # Some callers run inside lt.call (the exception goes back to the caller, not to the loop's
            # handler): report here, wherever it was called from.
            self._report_error(
                f"node {self.node} ({self.cfg.scheduler} local policy, on {type(event).__name__}): "
                f"{ev.describe_error(exc)}",
                exc,
            )
            raise

    def _loop_error(self, loop, context: dict) -> None:
        exc = context.get("exception")
        if exc is None:
            self._report_error(f"node {self.node}: {context.get('message', 'error in the event loop')}")
        else:
            self._report_error(f"node {self.node}: {ev.describe_error(exc)}", exc)

    def _report_error(self, error: str, exc: BaseException | None = None) -> None:
        """Records the node's first error and tells the coordinator, which ends the run with it."""
        if self.error is not None:
            return

        self.error = error
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) if exc else None
        self.events.emit(ev.RUN_ERROR, node=self.node, error=error, traceback=tb)
        if self.notify is not None:
            self.notify(NodeError(self.node, error, tb))
