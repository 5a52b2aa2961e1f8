"""The coordinator: accepts jobs at their arrival times, asks the global policy for admission, allocation
and slot plans, starts jobs on their nodes, announces gang switches ahead of time, detects completion,
failure and dead nodes, and records job events.

Plain Python; ``testbed.cluster`` wraps it as a Ray actor. Nodes are reached through proxies whose
``call(method, *args)`` returns a ``concurrent.futures.Future``, so this module does not depend on Ray.
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed import events as ev
from testbed.clock import Clock
from testbed.jobs import Job
from testbed.loop import LoopThread
from testbed.mechanism.priority import raise_process_nice, raise_thread_priority
from testbed.schedulers import registry
from testbed.schedulers.base import Dispatch, Reject, Start

# Dead nodes also surface on every call the coordinator makes (dispatches, starts); the ping only covers
# quiet periods, and each costs a Ray call on both sides: keep it rare.
HEALTH_PERIOD_REAL_S = 3.0


class NodeProxy:
    """How the coordinator reaches one node."""

    def call(self, method: str, *args) -> cf.Future:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass
class _JobRun:
    job: Job
    state: str = "pending"  # pending (not arrived) | queued | running | finished | failed | killed | rejected
    nodes: tuple[int, ...] = ()
    exited_ok: set[int] = field(default_factory=set)


FINAL = ("finished", "failed", "killed", "rejected")


class Coordinator:
    def __init__(
        self,
        run_dir: str,
        nodes: int,
        scheduler: str,
        params: dict,
        seed: int,
        jobs: Sequence[Job],
        proxies: Sequence[NodeProxy],
        nic_addresses: Sequence[str],
        tdf: float,
        duration_s: float | None = None,
        monitoring: dict | None = None,
        node_memory_mb: float | None = None,
    ) -> None:
        self.nodes = nodes
        self.sched_name = scheduler
        self.policy = registry.get(scheduler).make_global(nodes, params, seed)
        self.policy.set_node_memory(node_memory_mb)
        self.jobs = {j.job_id: _JobRun(j) for j in jobs}
        self.proxies = list(proxies)
        self.nics = list(nic_addresses)
        self.tdf = tdf
        self.duration_s = duration_s
        self.clock: Clock | None = None
        self.events = ev.EventWriter(Path(run_dir) / "events" / "coordinator.jsonl", "coordinator")
        self.down: dict[int, str] = {}
        self.ended: str | None = None
        self.first_start_real: float | None = None
        self.errors: list[str] = []
        self._tick_handle = None
        self._control0: tuple[float, float] | None = None
        sys.setswitchinterval(0.0005)  # the planning timer must get the GIL promptly (see agent.py)
        raise_process_nice()
        self.lt = LoopThread("coordinator", on_start=raise_thread_priority)
        # An exception in a loop callback (a policy's, or the coordinator's own) would only be logged by
        # asyncio while the run went on until wall_limit_s: it ends the run instead, with the error.
        self.error: str | None = None
        self.lt.loop.set_exception_handler(self._loop_error)
        self._init_metrics(monitoring)

    # ----------------------------------------------------------------------------------------------------
    # Public API (any thread)

    def start(self, t0: float) -> None:
        self.lt.call(self._start, t0)

    def on_node_event(self, kind: str, payload: dict) -> None:
        if kind == "proc_exited":
            self.lt.loop.call_soon_threadsafe(self._proc_exited, payload)
        elif kind == "switches" and self.metrics is not None:
            self.lt.loop.call_soon_threadsafe(self._switches, payload)
        elif kind == "utilization":
            self.lt.loop.call_soon_threadsafe(self._utilization, payload)
        elif kind == "error":  # a node's policy or agent raised: the run cannot go on as planned
            self.lt.loop.call_soon_threadsafe(self._abort, payload["error"], payload.get("traceback"))

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
            if self._metrics_server is not None:
                from testbed.monitoring.metrics import stop

                stop(self._metrics_server)
        return {"ended": reason}

    # ----------------------------------------------------------------------------------------------------
    # Loop thread

    def _loop_error(self, loop, context: dict) -> None:
        exc = context.get("exception")
        if exc is None:
            self._abort(f"coordinator: {context.get('message', 'error in the event loop')}")
            return
        import traceback

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
        for jr in self.jobs.values():
            loop.call_at(self.clock.real_at(jr.job.spec.submit_time), self._submit, jr)
        if self.duration_s is not None:
            loop.call_at(self.clock.real_at(self.duration_s), self._end, ev.DURATION_REACHED)
        loop.call_later(HEALTH_PERIOD_REAL_S, self._health)
        if self.metrics is not None:
            loop.call_later(self._metrics_period, self._metrics_tick)

    def _submit(self, jr: _JobRun) -> None:
        if self.ended:
            return
        spec = jr.job.spec
        jr.state = "queued"
        self.events.emit(ev.JOB_SUBMITTED, job=spec.job_id, size=spec.size, job_class=spec.job_class)
        self._do(self._decide(self.policy.submit, self._now(), spec))
        if self.metrics is not None and jr.state != "rejected":
            self.metrics.admission("admitted", spec.job_class)

    def _do(self, actions) -> None:
        for a in actions:
            if isinstance(a, Reject):
                jr = self.jobs[a.job_id]
                jr.state = "rejected"
                self.events.emit(ev.JOB_REJECTED, job=a.job_id, reason=a.reason)
                if self.metrics is not None:
                    self.metrics.admission("rejected", jr.job.spec.job_class)
            elif isinstance(a, Start):
                self._launch(self.jobs[a.job_id], a.nodes)
            elif isinstance(a, Dispatch):
                self.events.emit(ev.SLOT_PLANNED, slot=a.slot, at=a.at, rows=list(a.rows))
                if self.metrics is not None:
                    live = [n for n in a.allowed if n not in self.down]
                    self._skew.expect(a.slot, live, time.monotonic())
                for node, allowed in a.allowed.items():
                    if node not in self.down:
                        self._call(node, "dispatch", a.at, a.slot, sorted(allowed))
        self._arm_tick()

    def _arm_tick(self) -> None:
        if self._tick_handle is not None:
            self._tick_handle.cancel()
            self._tick_handle = None
        nxt = self.policy.next_tick()
        if nxt is not None and not self.ended:
            self._tick_handle = self.lt.loop.call_at(self.clock.real_at(nxt), self._tick)

    def _tick(self) -> None:
        self._tick_handle = None
        if not self.ended:
            self._do(self._decide(self.policy.tick, self._now()))

    def _launch(self, jr: _JobRun, nodes: tuple[int, ...]) -> None:
        spec = jr.job.spec
        jr.state, jr.nodes = "running", tuple(nodes)
        self.events.emit(ev.JOB_STARTED, job=spec.job_id, nodes=list(nodes))
        if self.first_start_real is None:
            self.first_start_real = time.monotonic()
        dead = [n for n in nodes if n in self.down]
        if dead:
            self._fail(jr, f"allocated node(s) {dead} are down")
            return
        nics = [self.nics[n] for n in nodes]
        app = {**jr.job.app.to_dict(), "job_class": spec.job_class}  # job_class: the nodes' metric label
        for rank, node in enumerate(nodes):
            fut = self._call(node, "start_proc", spec.job_id, rank, spec.size, nics, app)
            fut.add_done_callback(lambda f, jr=jr, rank=rank, node=node: self._started(f, jr, rank, node))

    def _started(self, fut: cf.Future, jr: _JobRun, rank: int, node: int) -> None:
        exc = fut.exception()
        if exc is not None:
            self.lt.loop.call_soon_threadsafe(
                self._fail, jr, f"could not start rank {rank} on node {node}: {type(exc).__name__}: {exc}"
            )

    def _call(self, node: int, method: str, *args) -> cf.Future:
        fut = self.proxies[node].call(method, *args)
        fut.add_done_callback(lambda f: self._check_node(f, node))
        return fut

    def _check_node(self, fut: cf.Future, node: int) -> None:
        exc = fut.exception()
        if exc is not None and _is_dead_actor(exc):
            self.lt.loop.call_soon_threadsafe(self._node_down, node, f"{type(exc).__name__}")

    def _health(self) -> None:
        if self.ended:
            return
        for n in range(self.nodes):
            if n not in self.down:
                self._call(n, "ping")
        self.lt.loop.call_later(HEALTH_PERIOD_REAL_S, self._health)

    def _node_down(self, node: int, why: str) -> None:
        if node in self.down or self.ended:
            return
        self.down[node] = why
        self.events.emit(ev.NODE_DOWN, node=node, reason=why)
        for jr in self.jobs.values():
            if jr.state == "running" and node in jr.nodes:
                self._fail(jr, f"node {node} went down ({why})")

    def _utilization(self, payload: dict) -> None:
        """Per-process CPU use of the quantum a node just ended (paired gang predicts from it)."""
        if self.ended:
            return
        now = self._now()
        for job_id, rank, util, interval in payload["samples"]:
            jr = self.jobs.get(job_id)
            if jr is not None and jr.state == "running":
                self._do(self.policy.utilization(now, job_id, rank, util, interval))

    def _proc_exited(self, rec: dict) -> None:
        jr = self.jobs.get(rec["job"])
        if jr is None or jr.state != "running":
            return
        if rec["code"] != 0:
            self._fail(
                jr, f"rank {rec['rank']} on node {rec['node']} failed: {rec.get('reason') or rec['code']}"
            )
            return
        jr.exited_ok.add(rec["rank"])
        if len(jr.exited_ok) == jr.job.spec.size:
            jr.state = "finished"
            self.events.emit(ev.JOB_FINISHED, job=jr.job.job_id)
            self._do(self._decide(self.policy.finished, self._now(), jr.job.job_id))

    def _fail(self, jr: _JobRun, reason: str) -> None:
        if jr.state in FINAL:
            return
        jr.state = "failed"
        self.events.emit(ev.JOB_FAILED, job=jr.job.job_id, reason=reason)
        self._kill_ranks(jr, reason)
        if not self.ended:
            self._do(self._decide(self.policy.finished, self._now(), jr.job.job_id))

    def _kill_ranks(self, jr: _JobRun, reason: str) -> None:
        for node in set(jr.nodes):
            if node not in self.down:
                self._call(node, "kill_job", jr.job.job_id, reason)

    def _end(self, reason: str) -> None:
        if self.ended:
            return
        self.ended = reason
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        waits = []
        for jr in self.jobs.values():
            if jr.state == "running":
                jr.state = "killed"
                self.events.emit(ev.JOB_KILLED, job=jr.job.job_id, reason=reason)
                for node in set(jr.nodes):
                    if node not in self.down:
                        waits.append(self._call(node, "kill_job", jr.job.job_id, reason))
            elif jr.state == "queued":
                jr.state = "killed"
                self.events.emit(ev.JOB_KILLED, job=jr.job.job_id, reason=f"{reason} before it started")
        cf.wait(waits, timeout=10)

    # ----------------------------------------------------------------------------------------------------
    # Metrics (monitoring/metrics.py)

    def _init_metrics(self, mon: dict | None) -> None:
        self.metrics = None
        self._metrics_server = None
        self._metrics_address: str | None = None
        self._decisions: list[float] = []
        if not mon:
            return
        from testbed.monitoring.metrics import CoordinatorMetrics, SwitchSkew, serve

        classes = {jr.job.spec.job_class for jr in self.jobs.values()} | set(mon.get("job_classes", ()))
        self.metrics = CoordinatorMetrics(self.sched_name, self.tdf, classes)
        self._skew = SwitchSkew()
        self._metrics_period = float(mon.get("scrape_interval_s", 1.0))
        # A slot some node never reported (it died, or its batch was lost) is closed after this long.
        self._skew_timeout = max(5.0, 3 * self._metrics_period)
        self._metrics_server, self._metrics_address = serve(
            self.metrics.registry, mon.get("host", "127.0.0.1"), mon.get("port")
        )
        self._update_job_metrics()

    def _decide(self, fn, *args):
        if self.metrics is None:
            return fn(*args)
        t = time.perf_counter()
        actions = fn(*args)
        self._decisions.append(time.perf_counter() - t)
        return actions

    def _switches(self, payload: dict) -> None:
        node = payload["node"]
        for slot, effect in payload["switches"]:
            spread = self._skew.report(node, slot, effect)
            if spread is not None:
                self.metrics.skew.observe(spread)

    def _update_job_metrics(self) -> None:
        counts: dict[tuple[str, str], int] = {}
        for jr in self.jobs.values():
            key = (jr.state, jr.job.spec.job_class)
            counts[key] = counts.get(key, 0) + 1
        self.metrics.set_jobs(counts)

    def _metrics_tick(self) -> None:
        self._update_job_metrics()
        self.metrics.observe_decisions(self._decisions)
        self._decisions.clear()
        for spread in self._skew.expire(time.monotonic(), self._skew_timeout, self.down):
            self.metrics.skew.observe(spread)
        self.lt.loop.call_later(self._metrics_period, self._metrics_tick)

    def _status(self) -> dict:
        counts: dict[str, int] = {}
        for jr in self.jobs.values():
            counts[jr.state] = counts.get(jr.state, 0) + 1
        final = sum(counts.get(s, 0) for s in FINAL)
        return {
            "now": self._now() if self.clock else 0.0,
            "counts": counts,
            "total": len(self.jobs),
            "final": final,
            "done": final == len(self.jobs) or self.ended is not None,
            "ended": self.ended,
            "error": self.error,
            "down": dict(self.down),
            "first_start_real": self.first_start_real,
        }


def _is_dead_actor(exc: BaseException) -> bool:
    name = type(exc).__name__
    return "ActorDied" in name or "ActorUnavailable" in name or "RayActorError" in name


class LocalProxy(NodeProxy):
    """Calls a NodeAgent in this process (tests, and the coordinator's own unit use)."""

    def __init__(self, agent, pool: cf.ThreadPoolExecutor) -> None:
        self.agent = agent
        self.pool = pool

    def call(self, method: str, *args) -> cf.Future:
        fn: Callable = getattr(self.agent, method)
        return self.pool.submit(fn, *args)
