"""The coordinator: the real-process backend of the decision core (testbed/core/decision.py). It submits
jobs at their arrival times, calls the global policy's tick on time, starts and kills jobs' processes on
their nodes, announces gang switches ahead of time, and turns process exits, CPU per quantum, scripted
faults and dead nodes into the core's inputs.

Plain Python; testbed/emulator/actors.py wraps it as a Ray actor. Nodes are reached through handles
whose ``send(command)`` returns a ``concurrent.futures.Future`` (testbed/emulator/control.py), so this
module does not depend on Ray.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import time
import traceback
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from testbed.apps.environ import start_env
from testbed.apps.worker import EXIT_PEER_GONE
from testbed.core import events as ev
from testbed.core.clock import Clock
from testbed.core.decision import DecisionCore
from testbed.core.jobs import FINAL, Job, JobState
from testbed.core.kinds import Fault, FaultKind, OnNodeDown
from testbed.core.messages import NodeError, ProcExit, QuantumUsage, SlotSwitches
from testbed.core.observe import Observer
from testbed.emulator.control import KillJob, NodeCommand, NodeHandle, Ping, SetDown, StartProc, SwitchSlot
from testbed.emulator.loop import LoopThread
from testbed.emulator.mechanism.priority import raise_process_nice, raise_thread_priority
from testbed.schedulers import registry
from testbed.schedulers.base import Dispatch, NodeInfo

if TYPE_CHECKING:
    from testbed.results.dedicated import Dedicated

#: How long a rank's failure caused by a vanished peer waits for the failure that caused it (real s), when
#: some other rank of its job has not ended by then (it may wait on the vanished peer for ever). Every
#: other rank's end, or its node's, ends the wait at once: the cause is one of them. A fixed wait after
#: the job's nodes answered a ping (0.5 s) once named the PMI head's "rank 0's process ended before
#: MPI_Finalize" instead of rank 0's own refusal on CI's 2-core machine (tests/e2e/test_mpi.py).
SUSPECT_GRACE_REAL_S = 5.0

# Dead nodes also surface on every call the coordinator makes (dispatches, starts); the ping only covers
# quiet periods, and each costs a Ray call on both sides: keep it rare.
HEALTH_PERIOD_REAL_S = 3.0


@dataclass
class _Suspect:
    """A job's failure that a vanished peer caused, waiting for the report of what made it vanish."""

    starts: int  # the job's start it belongs to
    reason: str  # the consequence's reason, named if no cause shows
    running: set[int]  # the job's other ranks whose end has not been reported


class Coordinator:
    """The real-process backend of the decision core (testbed/core/decision.py): it times arrivals and policy
    ticks on the emulated clock, starts and kills processes through the node agents, sends slot plans
    ahead of time, and turns what the nodes report (process exits, CPU per quantum, dead nodes) into
    the core's inputs."""

    def __init__(
        self,
        run_dir: str,
        nodes: int,
        scheduler: str,
        params: dict,
        seed: int,
        jobs: Sequence[Job],
        handles: Sequence[NodeHandle],
        nic_addresses: Sequence[str],
        tdf: float,
        duration_s: float | None = None,
        monitoring: dict | None = None,
        node_info: Sequence[NodeInfo] | None = None,
        faults: Sequence[Fault] = (),
        on_node_down: OnNodeDown = OnNodeDown.FAIL,
        dedicated: Dedicated | None = None,
    ) -> None:
        self.nodes = nodes
        #: The jobs' dedicated run times (runs with local users), for the parallel slowdown's gauge.
        self.dedicated = dedicated
        self.sched_name = scheduler
        self.policy = registry.get(scheduler).make_global(nodes, params, seed, node_info)
        self.handles = list(handles)
        self.nics = list(nic_addresses)
        self.tdf = tdf
        self.duration_s = duration_s
        self.faults = list(faults)
        self.clock: Clock | None = None
        self.events = ev.EventWriter(Path(run_dir) / "events" / "coordinator.jsonl", "coordinator")
        self.first_start_real: float | None = None
        self._tick_handle = None
        self._stops: list[cf.Future] = []
        self._control0: tuple[float, float] | None = None
        self._dead: set[int] = set()
        self._suspects: dict[str, _Suspect] = {}
        self.core = DecisionCore(jobs, self.policy, scheduler, nodes, self, self._emit, on_node_down)
        self._init_observers(monitoring, jobs)
        sys.setswitchinterval(0.0005)  # the planning timer must get the GIL promptly (see agent.py)
        raise_process_nice()
        self.lt = LoopThread("coordinator", on_start=raise_thread_priority)
        # An exception in a loop callback (a policy's, or the coordinator's own) would only be logged by
        # asyncio while the run went on until wall_limit_s: it ends the run instead, with the error.
        self.error: str | None = None
        self.lt.loop.set_exception_handler(self._loop_error)

    # ----------------------------------------------------------------------------------------------------
    # Public API (any thread)

    def start(self, t0: float) -> None:
        self.lt.call(self._start, t0)

    def on_node_event(self, msg) -> None:
        """A node's report (testbed/core/messages.py), from any thread."""
        if isinstance(msg, ProcExit):
            self.lt.loop.call_soon_threadsafe(self._proc_exited, msg)
        elif isinstance(msg, SlotSwitches):
            self.lt.loop.call_soon_threadsafe(self._reported, msg)
        elif isinstance(msg, QuantumUsage):
            self.lt.loop.call_soon_threadsafe(self._utilization, msg)
        elif isinstance(msg, NodeError):  # a node's policy or agent raised: the run cannot go on as planned
            self.lt.loop.call_soon_threadsafe(self._abort, msg.error, msg.traceback)

    def metrics_address(self) -> str | None:
        return self._metrics_address

    def status(self) -> dict:
        return self.lt.call(self._status)

    def stop(self, reason: str) -> dict:
        """Ends the run now: kills running jobs, records the rest, stops the loop."""
        try:
            self.lt.call(self._end, reason, timeout=30)
            if self._control0 is not None:
                cpu0, wall0 = self._control0
                self.events.emit(
                    ev.RUN_INFO,
                    control_cpu_s=time.process_time() - cpu0,
                    control_wall_s=time.monotonic() - wall0,
                )
        finally:
            self.lt.stop()
            self.events.close()
            for o in self.observers:
                o.close()
        return {"ended": reason}

    # ----------------------------------------------------------------------------------------------------
    # Loop thread: the core's inputs

    def _loop_error(self, loop, context: dict) -> None:
        exc = context.get("exception")
        if exc is None:
            self._abort(f"coordinator: {context.get('message', 'error in the event loop')}")
            return

        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self._abort(f"coordinator (scheduler {self.sched_name}): {ev.describe_error(exc)}", tb)

    def _abort(self, error: str, tb: str | None = None) -> None:
        """Ends the run because of an error; the first error is the run's."""
        if self.error is None:
            self.error = error
            self.events.emit(ev.RUN_ERROR, t=self._now() if self.clock else 0.0, error=error, traceback=tb)
        self._end(f"error: {self.error}")

    def _now(self) -> float:
        return self.clock.now()

    def _start(self, t0: float) -> None:
        self.clock = Clock(self.tdf, t0)
        self.events.clock = self.clock
        self._control0 = (time.process_time(), time.monotonic())
        self.events.emit(
            ev.RUN_INFO, t=0.0, scheduler=self.sched_name, nodes=self.nodes, tdf=self.tdf, pid=os.getpid()
        )
        loop = self.lt.loop
        for rec in self.core.jobs.values():
            spec = rec.job.spec
            loop.call_at(self.clock.real_at(spec.submit_time), self._submit, spec.job_id)
        for f in self.faults:
            loop.call_at(self.clock.real_at(f.at_s), self._fault, f.node, f.kind)
        if self.duration_s is not None:
            loop.call_at(self.clock.real_at(self.duration_s), self._end, ev.DURATION_REACHED)
        loop.call_later(HEALTH_PERIOD_REAL_S, self._health)
        for o in self.observers:
            o.begin()
            if o.period_s:
                loop.call_later(o.period_s, self._tick_observer, o)

    def _submit(self, job_id: str) -> None:
        self.core.submit(self._now(), job_id)

    def _tick(self) -> None:
        self._tick_handle = None
        self.core.tick(self._now())

    def _utilization(self, msg: QuantumUsage) -> None:
        """Per-process CPU use of the quantum a node just ended (paired gang predicts from it)."""
        now = self._now()
        for job_id, rank, util, interval in msg.samples:
            self.core.utilization(now, job_id, rank, util, interval)

    def _proc_exited(self, msg: ProcExit) -> None:
        if msg.code == 0:
            self.core.rank_exited(self._now(), msg.job, msg.rank, True, attempt=msg.attempt)
            self._ended_under_suspect(msg)
            return
        rec = self.core.jobs.get(msg.job)
        if rec is None or rec.state != JobState.RUNNING or msg.attempt != rec.starts:
            return
        reason = f"rank {msg.rank} on node {msg.node} failed: {msg.reason or msg.code}"
        if msg.code != EXIT_PEER_GONE:
            self._suspects.pop(msg.job, None)
            self.core.fail(self._now(), msg.job, reason)
            return
        held = self._suspects.get(msg.job)
        if held is not None and held.starts == rec.starts:  # one of an earlier start is replaced below
            self._ended_under_suspect(msg)
            return
        # This rank failed because a peer went away: the cause is another rank's failure, on its way
        # here, or a node that died (its own report never comes; the pings make it show). Wait for the
        # job's other ranks to end, and name this reason if none of them was the cause.
        others = set(range(rec.job.processes_on(len(rec.nodes)))) - rec.ranks_ok - {msg.rank}
        if not others:  # every other rank ended cleanly: none of them is a cause still to come
            self.core.fail(self._now(), msg.job, reason)
            return
        self._suspects[msg.job] = _Suspect(rec.starts, reason, others)
        for n in dict.fromkeys(rec.nodes):
            if n not in self.core.down:
                self._send(n, Ping())
        self.lt.loop.call_later(SUSPECT_GRACE_REAL_S, self._fail_suspect, msg.job, rec.starts)

    def _ended_under_suspect(self, msg: ProcExit) -> None:
        """A rank of a job whose failure waits for its cause ended, not as that cause."""
        suspect = self._suspects.get(msg.job)
        if suspect is not None and suspect.starts == msg.attempt:
            suspect.running.discard(msg.rank)
            if not suspect.running:
                self._fail_suspect(msg.job, msg.attempt)

    def _fail_suspect(self, job_id: str, starts: int) -> None:
        suspect = self._suspects.get(job_id)
        if suspect is None or suspect.starts != starts:
            return
        del self._suspects[job_id]
        rec = self.core.jobs.get(job_id)
        if rec is not None and rec.starts == starts:
            self.core.fail(self._now(), job_id, suspect.reason)  # no-op unless it still runs

    def _fault(self, node: int, what: FaultKind) -> None:
        """A scripted fault: the node's agent kills its processes and refuses new ones while down."""
        if self.core.ended:
            return
        if what == FaultKind.DOWN:
            if node in self.core.down:
                return
            self._send(node, SetDown(True, ev.SCRIPTED_FAULT)).result(timeout=30)
            self.core.node_down(self._now(), node, ev.SCRIPTED_FAULT)
        else:
            if node not in self.core.down or node in self._dead:
                return  # an agent that died stays down
            self._send(node, SetDown(False)).result(timeout=30)
            self.core.node_up(self._now(), node)

    def _health(self) -> None:
        if self.core.ended:
            return
        for n in range(self.nodes):
            if n not in self.core.down:
                self._send(n, Ping())
        self.lt.loop.call_later(HEALTH_PERIOD_REAL_S, self._health)

    def _node_died(self, node: int, why: str) -> None:
        self._dead.add(node)
        self.core.node_down(self._now(), node, f"its agent died ({why})")

    def _end(self, reason: str) -> None:
        if self.core.ended:
            return
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        self.core.end(self._now(), reason)
        cf.wait(self._stops, timeout=10)

    # ----------------------------------------------------------------------------------------------------
    # Loop thread: the core's backend

    def _emit(self, kind: str, t: float, **fields) -> None:
        self.events.emit(kind, t=t, **fields)

    def policy_consulted(self) -> None:
        if self._tick_handle is not None:
            self._tick_handle.cancel()
            self._tick_handle = None
        nxt = self.policy.next_tick()
        if nxt is not None and not self.core.ended:
            self._tick_handle = self.lt.loop.call_at(self.clock.real_at(nxt), self._tick)

    def launch(self, job: Job, nodes: tuple[int, ...]) -> None:
        if self.first_start_real is None:
            self.first_start_real = time.monotonic()
        placed = self._placed(job, nodes)
        nics = [self.nics[n] for n in placed]
        attempt = self.core.jobs[job.job_id].starts
        # When the policy started the job (emulated s): a kind whose model starts its clock there, not
        # when its processes are up (the divisible head's link), reads it as TB_START_S.
        started = start_env(self._now())
        for rank, node in enumerate(placed):
            launch = job.launch(rank, nics)
            env = {**launch.env, **started}
            peers = {n: self.nics[n] for n in nodes if n != node}  # not the head: outside the cluster
            cmd = StartProc(
                job.job_id, rank, tuple(launch.argv), env, job.spec.job_class, attempt, job.spec, peers
            )
            fut = self._send(node, cmd)
            fut.add_done_callback(lambda f, j=job.job_id, r=rank, n=node: self._started(f, j, r, n))

    def kill(self, job: Job, nodes: tuple[int, ...], reason: str) -> None:
        attempt = self.core.jobs[job.job_id].starts  # the start being stopped (a restart comes after)
        for node in self._placed(job, nodes):
            self._stops.append(self._send(node, KillJob(job.job_id, reason, attempt)))
        self._stops = [f for f in self._stops if not f.done()]

    def _placed(self, job: Job, nodes: tuple[int, ...]) -> tuple[int, ...]:
        """Where the job's ranks run: its allocated nodes, then the head node (numbered ``self.nodes``,
        outside the policy's view) for a kind with a head process (ProgramKind.head)."""
        return (*nodes, self.nodes) if job.kind.head else tuple(nodes)

    def dispatch(self, d: Dispatch, down: Collection[int]) -> None:
        nodes = [n for n in d.allowed if n not in down]  # each node hears of its own jobs (SwitchSlot)
        for o in self.observers:
            o.dispatched(d.slot, nodes)
        for node in nodes:
            self._send(node, SwitchSlot(d.at, d.slot, tuple(sorted(d.allowed[node]))))

    def _started(self, fut: cf.Future, job_id: str, rank: int, node: int) -> None:
        exc = fut.exception()
        if exc is not None and not _is_dead_actor(exc):
            why = f"could not start rank {rank} on node {node}: {type(exc).__name__}: {exc}"
            self.lt.loop.call_soon_threadsafe(lambda: self.core.fail(self._now(), job_id, why))

    def _send(self, node: int, cmd: NodeCommand) -> cf.Future:
        fut = self.handles[node].send(cmd)
        fut.add_done_callback(lambda f: self._check_node(f, node))
        return fut

    def _check_node(self, fut: cf.Future, node: int) -> None:
        exc = fut.exception()
        if exc is not None and _is_dead_actor(exc):
            self.lt.loop.call_soon_threadsafe(self._on_dead, node, f"{type(exc).__name__}")

    def _on_dead(self, node: int, why: str) -> None:
        if node >= self.nodes:  # the head node: no policy knows it, so the run cannot go on as planned
            self._abort(f"the head node's agent (node {node}) died ({why})")
            return
        if node not in self._dead and not self.core.ended:
            self._node_died(node, why)

    # ----------------------------------------------------------------------------------------------------
    # Observers (testbed/core/observe.py): the coordinator's Prometheus metrics when the scenario monitors
    # the run

    def _init_observers(self, mon: dict | None, jobs: Sequence[Job]) -> None:
        self.observers: list[Observer] = []
        self._metrics_address: str | None = None
        if mon:
            from testbed.monitoring.observers import CoordinatorMetricsObserver

            obs = CoordinatorMetricsObserver(
                self.sched_name, self.tdf, {j.job_id: j.spec.job_class for j in jobs}, mon,
                job_counts=self._job_counts, down=lambda: self.core.down,
                dedicated=self.dedicated.time if self.dedicated is not None else None,
            )  # fmt: skip
            self._metrics_address = obs.address
            self.observers.append(obs)
        for o in self.observers:
            self.events.subscribe(o.event)
        if self.observers:
            self.core.on_decision = self._decided

    def _decided(self, seconds: float) -> None:
        for o in self.observers:
            o.decided(seconds)

    def _reported(self, msg) -> None:
        for o in self.observers:
            o.reported(msg)

    def _tick_observer(self, o: Observer) -> None:
        try:
            o.tick()
        finally:
            self.lt.loop.call_later(o.period_s, self._tick_observer, o)

    def _job_counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for rec in self.core.jobs.values():
            key = (rec.state, rec.job.spec.job_class)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def _status(self) -> dict:
        self._end_if_stuck()
        counts = self.core.counts()
        final = sum(counts.get(s, 0) for s in FINAL)
        return {
            "now": self._now() if self.clock else 0.0,
            "counts": counts,
            "total": len(self.core.jobs),
            "final": final,
            "done": final == len(self.core.jobs) or self.core.ended is not None,
            "ended": self.core.ended,
            "error": self.error,
            "down": dict(self.core.down),
            "first_start_real": self.first_start_real,
        }

    def _end_if_stuck(self) -> None:
        """A queue that can never move again ends the run with one error naming the job and why: a node is
        down with no scripted fault left to bring it back, nothing runs or is still to arrive, and a queued
        job is wider than the nodes up (DecisionCore.never_startable). Checked at each status poll."""
        if self.core.ended or not self.core.down or self.clock is None:
            return
        if any(f.at_s > self._now() for f in self.faults):
            return
        if any(r.state in (JobState.PENDING, JobState.RUNNING) for r in self.core.jobs.values()):
            return
        why = self.core.never_startable()
        if why is not None:
            self.error = why
            self._end(why)


def _is_dead_actor(exc: BaseException) -> bool:
    name = type(exc).__name__
    return "ActorDied" in name or "ActorUnavailable" in name or "RayActorError" in name
