"""Discrete-event simulator of the emulated cluster (DESIGN.md, decision 1).

It drives the very policy objects the emulator drives (one global policy, one local policy per node) and
writes the same event log. Model:

* each node is a uniprocessor of rate ``cpu_rate`` shared by weighted processor sharing among the processes
  that are allowed to run (the local policy's ``run``) and want the CPU (computing, or spinning while
  waiting for a message); weights follow the Linux CFS nice table;
* each process runs its job's :class:`~testbed.jobs.SyntheticApp`: ``iterations`` x {compute; ``gio``
  writes of ``io_time_ms`` each (wall time, no CPU); barrier: every rank sends to rank 0, rank 0 answers
  all once it has heard from all; each message takes ``latency_s``; each message is one receive, which
  waits in the job's ``wait_mode`` if the message is not there yet}; with a point-to-point ``pattern``
  (paper 000), the barrier step is ``msgs`` rounds of that pattern (:func:`testbed.jobs.pattern_plan`):
  each message takes ``latency_s + msg_bytes / bandwidth_Bps`` (no bandwidth: latency only; a node's
  incoming link is not serialised), each is one receive as above (any source, the round's tag), and
  there are no collective enter/leave events (they are not collectives);
* a job with a ``send_wait`` (CC's sender) sends its messages one at a time, each followed by a wait
  for the receiving NIC's acknowledgement, which comes one ``latency_s`` after the message arrives (a
  round trip after the send; the acknowledgement is a header: no transmission time). The sender waits
  in that mode: spinning (using CPU) for up to ``spin_time_us`` in "spin-block", then blocked (the node
  sees SenderBlocked, and SenderWoken when the acknowledgement wakes it); "none" (the default) sends
  every message of a step at once and does not wait, as before;
* a stopped process does nothing: it does not compute, issue its next write, send or consume a message
  (a write already issued completes, a message in flight arrives);
* a new process runs unless its node's local policy stops it (as a forked process does), and a
  decision's ``run=None`` leaves every process as it was; a decision's ``wakeup`` replaces the pending one;
* for a global policy that ``wants_utilization``, each node, at each slot switch, reports every process
  that was allowed to run (or used CPU) in the quantum just ended with its exact CPU share over it
  (``GlobalPolicy.utilization``), before the new slot takes effect;
* ``node_memory_mb`` is handed to the global policy (``set_node_memory``); memory itself is not modelled
  (a policy that places a job where it does not fit is not slowed by swapping).

The simulation is exact up to floating point: a heap of timed events; a node's completion time is
recomputed only when something on that node changes.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from testbed import events as ev
from testbed.events import EventWriter
from testbed.jobs import WORK_UNIT_S, Job, pattern_plan
from testbed.schedulers.base import (
    CollectiveEnter,
    CollectiveLeave,
    Dispatch,
    GlobalAction,
    GlobalPolicy,
    LocalDecision,
    LocalEvent,
    LocalPolicy,
    MessageArrived,
    MessageConsumed,
    Proc,
    ProcAdded,
    ProcExited,
    ReceiverBlocked,
    ReceiverWaiting,
    Reject,
    Scheduler,
    SenderBlocked,
    SenderWoken,
    SlotStart,
    Start,
    Timer,
)

#: Linux CFS load weight by nice value (kernel/sched/core.c, sched_prio_to_weight), nice -20 first.
CFS_WEIGHTS = (
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916,
    9548, 7620, 6100, 4904, 3906, 3121, 2501, 1991, 1586, 1277,
    1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
    110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
)  # fmt: skip

#: Remaining CPU work (CPU-seconds at rate 1) below which a compute phase counts as done; covers the
#: rounding of predicted completion times.
EPS = 1e-9

KILLED_REASON = ev.DURATION_REACHED
STALL_LIMIT = 20_000  # periodic events in a row with nothing else pending: nothing can progress

# Process phases. _LEAVE and _ROUND_END follow a completed receive, after the sends that go with it (a
# sender that waits for acknowledgements may spend time there).
_COMPUTE, _IO, _BARRIER, _WAIT, _DONE, _XWAIT, _LEAVE, _ROUND_END = range(8)
_WAITING = (_WAIT, _XWAIT)  # waiting for a message: in a barrier, or in a point-to-point round

# Heap event kinds. Periodic ones (ticks, slot switches, timers) recur on their own and cannot by
# themselves show progress; the rest can.
_SUBMIT, _COMPLETE, _IO_DONE, _MSG, _SPIN_END, _TICK, _SLOT, _TIMER, _ACK, _ACK_SPIN_END = range(10)
_PERIODIC = (_TICK, _SLOT, _TIMER)


def cfs_weight(nice: int) -> int:
    return CFS_WEIGHTS[min(19, max(-20, nice)) + 20]


class _JobRun:
    __slots__ = ("job", "procs", "exited", "state", "nodes")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.procs: list[_Process] = []
        self.exited = 0
        self.state = "new"  # new | queued | running | finished | rejected
        self.nodes: tuple[int, ...] = ()


class _Process:
    __slots__ = (
        "run", "rank", "node", "proc", "app", "size", "phase", "work", "it", "writes_left", "io_busy",
        "need", "inbox", "spinning", "waiting", "spin_ver", "cpu_s", "barriers", "nice", "allowed",
        "q_cpu", "q_t0", "q_ran", "plan", "rounds", "rnd", "tag", "tagbox", "post", "outbox", "acking",
        "ack_spin", "ack_ver",
    )  # fmt: skip

    def __init__(self, run: _JobRun, rank: int, node: _Node) -> None:
        self.run = run
        self.rank = rank
        self.node = node
        self.proc = Proc(run.job.job_id, rank)
        self.app = run.job.app
        self.size = run.job.spec.size
        self.phase = _COMPUTE
        self.work = self.app.gcomp * WORK_UNIT_S
        self.it = 0  # iterations completed
        self.writes_left = 0
        self.io_busy = False
        self.need = 0  # messages still to consume in this barrier
        self.inbox = 0  # messages arrived, not consumed
        self.spinning = False  # waiting and burning CPU
        self.waiting = False  # waiting announced for this barrier
        self.spin_ver = 0
        self.cpu_s = 0.0
        self.barriers = 0
        self.nice = 0
        self.allowed = True  # a new process runs unless stopped
        # Utilisation of the current quantum (policies that want it): CPU time and time at its start,
        # and whether the process was allowed to run for some time in it.
        self.q_cpu = 0.0
        self.q_t0 = 0.0
        self.q_ran = False
        # Point-to-point patterns: this rank's plan of one round, rounds so far (the tag is their parity,
        # as in the worker), the round within the iteration, messages arrived and not consumed by tag, and
        # the receivers rank 0 of rank0 answers once it has heard from all.
        p2p = self.app.barrier and self.app.pattern != "barrier"
        self.plan = pattern_plan(self.app.pattern, rank, self.size) if p2p else None
        self.rounds = 0
        self.rnd = 0
        self.tag = 0
        self.tagbox = [0, 0]
        self.post: tuple[_Process, ...] = ()
        # send_wait: messages still to send one by one (receiver, tag or None for the barrier's), and the
        # wait for the acknowledgement of the last one sent: on, spinning, its version (stale events).
        self.outbox: deque[tuple[_Process, int | None]] = deque()
        self.acking = False
        self.ack_spin = False
        self.ack_ver = 0

    def wants_cpu(self) -> bool:
        return self.allowed and (
            self.phase == _COMPUTE or (self.phase in _WAITING and self.spinning) or self.ack_spin
        )


class _Node:
    __slots__ = ("idx", "policy", "msg_events", "procs", "queue", "last", "active", "shares", "ver", "due",
                 "finishing", "timer_ver", "writer")  # fmt: skip

    def __init__(self, idx: int, policy: LocalPolicy, writer: EventWriter) -> None:
        self.idx = idx
        self.policy = policy
        self.msg_events = bool(type(policy).wants_message_events)
        self.procs: dict[Proc, _Process] = {}
        self.queue: deque[LocalEvent] = deque()
        self.last = 0.0  # time up to which CPU use is accounted
        self.active: list[_Process] = []  # processes sharing the CPU since ``last``
        self.shares: list[float] = []  # their fractions of the CPU
        self.ver = 0  # completion events of older versions are stale
        self.due = math.inf  # time of the pending completion event
        self.finishing: list[_Process] = []  # the processes that end their compute phase then
        self.timer_ver = 0
        self.writer = writer


class Simulation:
    """One run. Use :func:`simulate`; the class is public so tests can inspect the state after a run."""

    def __init__(
        self,
        jobs: Sequence[Job],
        scheduler: type[Scheduler],
        params: Mapping[str, Any],
        *,
        nodes: int,
        cpu_rate: float = 1.0,
        seed: int = 0,
        duration: float | None = None,
        latency_s: float = 50e-6,
        switch_skew_s: float = 0.0,
        node_memory_mb: float | None = None,
        bandwidth_Bps: float | None = None,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"nodes: a cluster needs at least 1 node, got {nodes}")
        if not cpu_rate > 0:
            raise ValueError(f"cpu_rate: must be > 0, got {cpu_rate}")
        if latency_s < 0 or switch_skew_s < 0:
            raise ValueError("latency_s and switch_skew_s must be >= 0")
        self.cpu_rate = float(cpu_rate)
        self.latency = float(latency_s)
        if bandwidth_Bps is not None and not bandwidth_Bps > 0:
            raise ValueError(f"bandwidth_Bps: must be > 0 or None, got {bandwidth_Bps}")
        self.bandwidth = bandwidth_Bps
        self.skew = float(switch_skew_s)
        self.duration = duration
        self.events: list[dict] = []
        self.coord = EventWriter(None, "coordinator")
        self.gp: GlobalPolicy = scheduler.make_global(nodes, params, seed)
        self.gp.set_node_memory(node_memory_mb)
        self._util = bool(type(self.gp).wants_utilization)
        self.nodes = [
            _Node(n, scheduler.make_local(n, params, seed), EventWriter(None, f"node{n}"))
            for n in range(nodes)
        ]
        self.runs: dict[str, _JobRun] = {}
        for job in jobs:
            if job.job_id in self.runs:
                raise ValueError(f"jobs: job id {job.job_id!r} appears twice")
            self.runs[job.job_id] = _JobRun(job)
        self.now = 0.0
        self._heap: list[tuple] = []
        self._seq = 0
        self._nonperiodic = 0  # non-periodic events in the heap
        self._dirty: dict[int, _Node] = {}
        self._pending_nodes: dict[int, _Node] = {}  # nodes with local events to feed
        self._finished: deque[_JobRun] = deque()
        self._tick_at: float | None = None
        self._tick_ver = 0
        self._asked_global = False
        self._open = len(self.runs)  # jobs not yet finished or rejected
        for job in jobs:
            self._push(job.spec.submit_time, _SUBMIT, self.runs[job.job_id])

    # ----------------------------------------------------------------------------------------------------
    # Event log

    def _emit(self, writer: EventWriter, kind: str, t: float, **fields: Any) -> None:
        record = writer.emit(kind, t=t, **fields)
        # There is no real time in a simulation; the emulated time keeps the log deterministic.
        record["wall"] = record["t"]
        self.events.append(record)

    # ----------------------------------------------------------------------------------------------------
    # Heap

    def _push(self, t: float, kind: int, *payload: Any) -> None:
        self._seq += 1
        if kind not in _PERIODIC:
            self._nonperiodic += 1
        heapq.heappush(self._heap, (t, self._seq, kind, payload))

    def run(self) -> list[dict]:
        stalled = 0
        same_time_ticks = 0
        handlers = {
            _SUBMIT: self._on_submit,
            _COMPLETE: self._on_complete,
            _IO_DONE: self._on_io_done,
            _MSG: self._on_msg,
            _SPIN_END: self._on_spin_end,
            _TICK: self._on_tick,
            _SLOT: self._on_slot,
            _TIMER: self._on_timer,
            _ACK: self._on_ack,
            _ACK_SPIN_END: self._on_ack_spin_end,
        }
        stall_reason = None
        while self._heap:
            t, _seq, kind, payload = self._heap[0]
            if self.duration is not None and t > self.duration:
                break
            heapq.heappop(self._heap)
            if kind not in _PERIODIC:
                self._nonperiodic -= 1
                stalled = 0
            elif self._nonperiodic == 0 and self.duration is None:
                stalled += 1
                if stalled > STALL_LIMIT:
                    stall_reason = "simulation stalled: only periodic events remain, no process can progress"
                    break
            if kind == _TICK:
                same_time_ticks = same_time_ticks + 1 if t == self.now else 0
                if same_time_ticks > 10_000:
                    raise RuntimeError(
                        f"global policy asks for tick() at {t} again and again (next_tick <= now)"
                    )
            self.now = t
            if self._open == 0 and kind != _SLOT:
                # Every job ended. Switches already planned still happen on the nodes (and are logged);
                # timers and ticks could recur forever and change nothing.
                continue
            handlers[kind](*payload)
            self._settle()
        if self.duration is not None and (not self._heap or self._heap[0][0] > self.duration):
            self._end(self.duration, KILLED_REASON)
        else:
            self._end(self.now, stall_reason or "simulation stalled: no event left and the job never ended")
        return self.events

    def _end(self, t: float, reason: str) -> None:
        """Kills what is left at time ``t`` (the scenario's end)."""
        live = [r for r in self.runs.values() if r.state in ("queued", "running")]
        if not live:
            return
        self.now = t
        for node in self.nodes:
            self._sync(node)
        for r in live:
            for p in r.procs:
                if p.phase != _DONE:
                    p.phase = _DONE
                    self._emit(
                        p.node.writer,
                        ev.PROC_EXITED,
                        t,
                        job=r.job.job_id,
                        rank=p.rank,
                        node=p.node.idx,
                        code=-9,
                        cpu_s=p.cpu_s,
                        reason=f"killed: {reason}",
                    )
            r.state = "killed"
            self._emit(self.coord, ev.JOB_KILLED, t, job=r.job.job_id, reason=reason)

    # ----------------------------------------------------------------------------------------------------
    # Global side

    def _on_submit(self, r: _JobRun) -> None:
        spec = r.job.spec
        r.state = "queued"
        self._emit(
            self.coord, ev.JOB_SUBMITTED, self.now, job=spec.job_id, size=spec.size, job_class=spec.job_class
        )
        self._apply_global(self.gp.submit(self.now, spec))

    def _on_tick(self, ver: int) -> None:
        if ver != self._tick_ver:
            return
        self._tick_at = None
        self._apply_global(self.gp.tick(self.now))

    def _apply_global(self, actions: list[GlobalAction]) -> None:
        self._asked_global = True  # its next tick may have moved
        for a in actions:
            if isinstance(a, Start):
                self._start(a)
            elif isinstance(a, Dispatch):
                self._dispatch(a)
            elif isinstance(a, Reject):
                r = self._run_of(a.job_id)
                r.state = "rejected"
                self._open -= 1
                self._emit(self.coord, ev.JOB_REJECTED, self.now, job=a.job_id, reason=a.reason)
            else:
                raise TypeError(f"global policy returned {a!r}, not Start, Reject or Dispatch")

    def _run_of(self, job_id: str) -> _JobRun:
        r = self.runs.get(job_id)
        if r is None:
            raise RuntimeError(f"global policy acted on unknown job {job_id!r}")
        return r

    def _start(self, a: Start) -> None:
        r = self._run_of(a.job_id)
        spec = r.job.spec
        if r.state != "queued":
            raise RuntimeError(f"global policy started job {a.job_id} in state {r.state}")
        if len(a.nodes) != spec.size or any(not 0 <= n < len(self.nodes) for n in a.nodes):
            raise RuntimeError(f"global policy started job {a.job_id} (size {spec.size}) on nodes {a.nodes}")
        r.state = "running"
        r.nodes = tuple(a.nodes)
        self._emit(self.coord, ev.JOB_STARTED, self.now, job=a.job_id, nodes=list(a.nodes))
        if r.job.app.iterations <= 0:
            r.procs = []
            self._finished.append(r)
            return
        for rank, n in enumerate(a.nodes):
            node = self.nodes[n]
            p = _Process(r, rank, node)
            r.procs.append(p)
            self._touch(node)
            p.q_t0 = self.now
            node.procs[p.proc] = p
            self._emit(node.writer, ev.PROC_STARTED, self.now, job=a.job_id, rank=rank, node=n, pid=None)
            self._feed(node, ProcAdded(p.proc))

    def _dispatch(self, d: Dispatch) -> None:
        self._emit(self.coord, ev.SLOT_PLANNED, self.now, slot=d.slot, at=d.at, rows=list(d.rows))
        spread = self.skew / max(1, len(self.nodes) - 1)
        # One heap entry per distinct switch time, not per node: with no skew, one for the whole cluster.
        by_time: dict[float, list[tuple[_Node, frozenset[str]]]] = {}
        for n in sorted(d.allowed):
            # A deterministic spread: node 0 switches on time, the last node switch_skew_s late.
            effect = max(self.now, d.at + spread * n)
            by_time.setdefault(effect, []).append((self.nodes[n], frozenset(d.allowed[n])))
        for effect, switches in by_time.items():
            self._push(effect, _SLOT, switches, d.slot, d.at)

    def _settle(self) -> None:
        """Feeds queued local events and ends finished jobs until nothing is left to do at this instant,
        then replans completion times and the next global tick."""
        while True:
            if self._pending_nodes:
                n = next(iter(self._pending_nodes))
                self._drain(self._pending_nodes.pop(n))
                continue
            if self._finished:
                r = self._finished.popleft()
                r.state = "finished"
                self._open -= 1
                self._emit(self.coord, ev.JOB_FINISHED, self.now, job=r.job.job_id)
                self._apply_global(self.gp.finished(self.now, r.job.job_id))
                continue
            break
        for node in self._dirty.values():
            self._replan(node)
        self._dirty.clear()
        if not self._asked_global:
            return
        self._asked_global = False
        t = self.gp.next_tick()
        if t != self._tick_at:
            self._tick_ver += 1
            self._tick_at = t
            if t is not None:
                self._push(max(t, self.now), _TICK, self._tick_ver)

    # ----------------------------------------------------------------------------------------------------
    # CPU sharing

    def _sync(self, node: _Node) -> None:
        """Accounts the CPU used on ``node`` from ``node.last`` to now, at the current shares."""
        dt = self.now - node.last
        if dt > 0 and self._util:
            for p in node.procs.values():
                if p.allowed:
                    p.q_ran = True
        if dt > 0:
            rate = self.cpu_rate
            for p, share in zip(node.active, node.shares, strict=True):
                used = share * dt
                p.cpu_s += used
                if p.phase == _COMPUTE:
                    p.work -= used * rate
        node.last = self.now

    def _touch(self, node: _Node) -> None:
        """Call before changing anything on ``node`` that may change who uses its CPU."""
        if node.idx not in self._dirty:
            self._sync(node)
            self._dirty[node.idx] = node

    def _replan(self, node: _Node) -> None:
        active = [p for p in node.procs.values() if p.wants_cpu()]
        node.active = active
        node.finishing = []
        if not active:
            node.shares = []
            due = math.inf
        else:
            if len(active) == 1:
                node.shares = [1.0]
            else:
                weights = [cfs_weight(p.nice) for p in active]
                total = sum(weights)
                node.shares = [w / total for w in weights]
            rate = self.cpu_rate
            left = [
                (max(0.0, p.work) / (share * rate), p)
                for p, share in zip(active, node.shares, strict=True)
                if p.phase == _COMPUTE
            ]
            soonest = min((dt for dt, _ in left), default=math.inf)
            due = self.now + soonest
            # Who ends at ``due``, so the completion event can end them exactly: late in a long run,
            # now + a tiny remainder rounds back to now.
            node.finishing = [p for dt, p in left if dt <= soonest * (1 + 1e-9)]
        # Most changes (a message, a blocked receiver) leave the next completion where it was: keep its
        # heap entry rather than push a new one and leave a stale one behind.
        if due == node.due or abs(due - node.due) <= 1e-12 * max(1.0, abs(due)):
            return
        node.ver += 1
        node.due = due
        if due < math.inf:
            self._push(due, _COMPLETE, node, node.ver)

    def _on_complete(self, node: _Node, ver: int) -> None:
        if ver != node.ver:
            return
        node.due = math.inf
        self._touch(node)
        for p in node.finishing:
            if p.phase == _COMPUTE:
                p.work = 0.0
        self._pending_nodes[node.idx] = node

    # ----------------------------------------------------------------------------------------------------
    # Local side

    def _feed(self, node: _Node, event: LocalEvent) -> None:
        self._touch(node)
        node.queue.append(event)
        self._pending_nodes[node.idx] = node

    def _drain(self, node: _Node) -> None:
        """Feeds the node's queued events to its local policy, then advances its runnable processes,
        until neither produces anything new. Events go first so that a process the policy stops on
        arrival (ProcAdded) or on a message takes no step it was not allowed."""
        queue = node.queue
        while True:
            while queue:
                self._apply_local(node, node.policy.on_event(self.now, queue.popleft()))
            for p in list(node.procs.values()):
                if p.allowed:
                    self._advance(p)
            if not queue:
                return

    def _apply_local(self, node: _Node, d: LocalDecision) -> None:
        if d.run is not None:
            for proc, p in node.procs.items():
                p.allowed = proc in d.run
        for proc, nice in d.nice.items():
            p = node.procs.get(proc)
            if p is not None:
                p.nice = nice
        if d.wakeup is not None:
            node.timer_ver += 1
            self._push(max(d.wakeup, self.now), _TIMER, node, node.timer_ver)

    def _on_timer(self, node: _Node, ver: int) -> None:
        if ver == node.timer_ver:
            self._feed(node, Timer())

    def _on_slot(self, switches: list[tuple[_Node, frozenset[str]]], slot: int, at: float) -> None:
        late_ms = (self.now - at) * 1000.0
        for node, allowed in switches:
            self._emit(
                node.writer,
                ev.SLOT_SWITCH,
                self.now,
                node=node.idx,
                slot=slot,
                at=at,
                effect=self.now,
                late_ms=late_ms,
            )
            if self._util:
                self._report_utilization(node)
            self._feed(node, SlotStart(slot, allowed))

    def _report_utilization(self, node: _Node) -> None:
        """The quantum ends on ``node``: each process that ran in it reports its CPU share over it."""
        self._touch(node)  # accounts CPU (and marks who ran) up to now
        reports = []
        for p in node.procs.values():
            interval = self.now - p.q_t0
            used = p.cpu_s - p.q_cpu
            if (p.q_ran or used > 0) and interval > 0:
                reports.append((p.proc.job_id, p.rank, used / interval, interval))
            p.q_cpu = p.cpu_s
            p.q_t0 = self.now
            p.q_ran = False
        for job_id, rank, util, interval in reports:
            self._apply_global(self.gp.utilization(self.now, job_id, rank, util, interval))

    def _on_io_done(self, p: _Process) -> None:
        if p.phase == _DONE:
            return
        self._touch(p.node)
        p.io_busy = False
        self._pending_nodes[p.node.idx] = p.node

    def _on_msg(self, receivers: Sequence[_Process], src_rank: int, tag: int | None = None) -> None:
        for p in receivers:
            if p.phase == _DONE:
                continue
            node = p.node
            self._touch(node)
            p.inbox += 1
            if tag is not None:
                p.tagbox[tag] += 1
            if node.msg_events:
                node.queue.append(MessageArrived(p.proc, src_rank, p.inbox))
            self._pending_nodes[node.idx] = node

    def _on_spin_end(self, p: _Process, ver: int) -> None:
        if ver != p.spin_ver or p.phase not in _WAITING or not p.spinning:
            return
        node = p.node
        self._touch(node)
        p.spinning = False
        if node.msg_events:
            node.queue.append(ReceiverBlocked(p.proc))
        self._pending_nodes[node.idx] = node

    def _send(self, p: _Process, receivers: Sequence[_Process]) -> None:
        """Messages sent together arrive together: one heap entry for all of them (a sender that waits
        for acknowledgements sends them one by one instead, from ``_advance``)."""
        if p.app.send_wait != "none":
            p.outbox.extend((r, None) for r in receivers)
            return
        self._push(self.now + self.latency, _MSG, receivers, p.rank)

    def _send_p2p(self, p: _Process, receivers: Sequence[_Process], tag: int) -> None:
        if p.app.send_wait != "none":
            p.outbox.extend((r, tag) for r in receivers)
            return
        self._push(self.now + self._p2p_delay(p), _MSG, receivers, p.rank, tag)

    def _p2p_delay(self, p: _Process) -> float:
        delay = self.latency
        if self.bandwidth:
            delay += p.app.msg_bytes / self.bandwidth
        return delay

    def _send_next(self, p: _Process, q: deque[LocalEvent] | None) -> None:
        """Sends the next message of ``p.outbox`` and starts waiting for its acknowledgement."""
        r, tag = p.outbox.popleft()
        if tag is None:
            delay = self.latency
            self._push(self.now + delay, _MSG, (r,), p.rank)
        else:
            delay = self._p2p_delay(p)
            self._push(self.now + delay, _MSG, (r,), p.rank, tag)
        p.acking = True
        p.ack_ver += 1
        self._push(self.now + delay + self.latency, _ACK, p, p.ack_ver)
        mode = p.app.send_wait
        if mode == "spin" or (mode == "spin-block" and p.app.spin_time_us > 0):
            p.ack_spin = True
            if mode == "spin-block":
                self._push(self.now + p.app.spin_time_us / 1e6, _ACK_SPIN_END, p, p.ack_ver)
        else:  # block, or spin-block with no spin time
            p.ack_spin = False
            if q is not None:
                q.append(SenderBlocked(p.proc))

    def _on_ack(self, p: _Process, ver: int) -> None:
        if ver != p.ack_ver or not p.acking or p.phase == _DONE:
            return
        node = p.node
        self._touch(node)
        blocked = not p.ack_spin
        p.acking = False
        p.ack_spin = False
        if blocked and node.msg_events:
            node.queue.append(SenderWoken(p.proc))
        self._pending_nodes[node.idx] = node

    def _on_ack_spin_end(self, p: _Process, ver: int) -> None:
        if ver != p.ack_ver or not p.acking or not p.ack_spin or p.phase == _DONE:
            return
        node = p.node
        self._touch(node)
        p.ack_spin = False
        if node.msg_events:
            node.queue.append(SenderBlocked(p.proc))
        self._pending_nodes[node.idx] = node

    def _begin_round(self, p: _Process) -> None:
        sends_first, dests, srcs = p.plan
        p.tag = p.rounds & 1
        p.rounds += 1
        targets = tuple(p.run.procs[d] for d in dests)
        if sends_first:
            self._send_p2p(p, targets, p.tag)
            p.post = ()
        else:
            p.post = targets
        p.need = len(srcs)
        p.phase = _XWAIT
        p.waiting = False

    def _advance(self, p: _Process) -> None:
        """Runs ``p`` (allowed to run) through its zero-time steps until it needs CPU or waits."""
        node = p.node
        app = p.app
        q = node.queue if node.msg_events else None
        while p.allowed:
            if p.acking:
                return  # waiting for the acknowledgement of a send
            if p.outbox:
                self._send_next(p, q)
                continue
            phase = p.phase
            if phase == _COMPUTE:
                if p.work > EPS:
                    return
                p.work = 0.0
                p.phase = _IO
                p.writes_left = app.gio
            elif phase == _IO:
                if p.io_busy:
                    return
                if p.writes_left > 0:
                    p.writes_left -= 1
                    p.io_busy = True
                    self._push(self.now + app.io_time_ms / 1000.0, _IO_DONE, p)
                    return
                p.phase = _BARRIER
            elif phase == _BARRIER:
                if p.plan is not None:
                    if p.size == 1 or app.msgs == 0:
                        self._end_iteration(p)
                        continue
                    p.rnd = 0
                    self._begin_round(p)
                    continue
                if not app.barrier or p.size == 1:
                    self._end_iteration(p)
                    continue
                if q is not None:
                    q.append(CollectiveEnter(p.proc, "barrier"))
                if p.rank != 0:
                    self._send(p, p.run.procs[:1])
                    p.need = 1
                else:
                    p.need = p.size - 1
                p.phase = _WAIT
                p.waiting = False
            elif phase == _WAIT:
                if not self._receive(p, q, tagged=False):
                    return
                p.spinning = False
                p.spin_ver += 1
                if p.rank == 0:
                    self._send(p, p.run.procs[1:])
                p.phase = _LEAVE
            elif phase == _LEAVE:
                if q is not None:
                    q.append(CollectiveLeave(p.proc, "barrier"))
                self._end_iteration(p)
            elif phase == _XWAIT:
                tag = p.tag
                if not self._receive(p, q, tagged=True):
                    return
                p.spinning = False
                p.spin_ver += 1
                if p.post:
                    self._send_p2p(p, p.post, tag)
                    p.post = ()
                p.phase = _ROUND_END
            elif phase == _ROUND_END:
                p.rnd += 1
                if p.rnd < app.msgs:
                    self._begin_round(p)
                else:
                    self._end_iteration(p)
            else:
                return

    def _receive(self, p, q, tagged: bool) -> bool:
        """Consumes arrived messages (of ``p.tag`` when ``tagged``) toward ``p.need``; True once all have
        arrived. Each message is one receive, as on the NIC: a receive that completed is followed by a new
        one, which waits (and spins) afresh."""
        consumed = False
        while p.need > 0 and (p.tagbox[p.tag] if tagged else p.inbox) > 0:
            if tagged:
                p.tagbox[p.tag] -= 1
            p.inbox -= 1
            p.need -= 1
            consumed = True
            if q is not None:
                q.append(MessageConsumed(p.proc, p.inbox))
        if p.need > 0:
            if not p.waiting or consumed:
                self._start_waiting(p, q)
            return False
        return True

    def _start_waiting(self, p: _Process, q: deque[LocalEvent] | None) -> None:
        p.waiting = True
        mode = p.app.wait_mode
        if q is not None:
            q.append(ReceiverWaiting(p.proc, mode))
        if mode == "spin":
            p.spinning = True
        elif mode == "spin-block" and p.app.spin_time_us > 0:
            p.spinning = True
            p.spin_ver += 1
            self._push(self.now + p.app.spin_time_us / 1e6, _SPIN_END, p, p.spin_ver)
        else:  # block, or spin-block with no spin time
            p.spinning = False
            if q is not None:
                q.append(ReceiverBlocked(p.proc))

    def _end_iteration(self, p: _Process) -> None:
        p.it += 1
        app = p.app
        if app.barrier and p.plan is None:
            p.barriers += 1
            unit, value = "barriers", p.barriers
        elif p.plan is not None:
            unit, value = "iterations", p.it
        else:
            unit, value = None, 0
        # Every 10th and the last, like the real worker's reports but fewer.
        if unit is not None and (value % 10 == 0 or value == app.iterations):
            self._emit(
                p.node.writer,
                ev.PROGRESS,
                self.now,
                node=p.node.idx,
                job=p.proc.job_id,
                rank=p.rank,
                unit=unit,
                value=value,
            )
        if p.it >= app.iterations:
            self._exit(p)
        else:
            p.phase = _COMPUTE
            p.work = app.gcomp * WORK_UNIT_S

    def _exit(self, p: _Process) -> None:
        node = p.node
        p.phase = _DONE
        p.allowed = False
        del node.procs[p.proc]
        self._emit(
            node.writer,
            ev.PROC_EXITED,
            self.now,
            job=p.proc.job_id,
            rank=p.rank,
            node=node.idx,
            code=0,
            cpu_s=p.cpu_s,
            reason=None,
        )
        node.queue.append(ProcExited(p.proc))
        self._pending_nodes[node.idx] = node
        r = p.run
        r.exited += 1
        if r.exited == len(r.procs):
            self._finished.append(r)


def simulate(*args: Any, **kwargs: Any) -> list[dict]:
    """Simulates ``jobs`` under ``scheduler`` on ``nodes`` uniprocessor nodes; returns the event log in
    the emulator's format (:class:`testbed.events.EventWriter`), ordered by emulated time.

    Takes :class:`Simulation`'s arguments: jobs, scheduler, params, *, nodes, cpu_rate=1.0, seed=0,
    duration=None, latency_s=50e-6, switch_skew_s=0.0, node_memory_mb=None, bandwidth_Bps=None.

    ``switch_skew_s`` delays node n's slot switches by ``switch_skew_s * n / (nodes - 1)``, so the
    switch skew across the cluster is ``switch_skew_s``. With ``duration``, the run stops then and jobs
    not finished are killed (``job_killed``). ``node_memory_mb`` is each node's memory, told to the global
    policy for memory-aware allocation (None: unknown, no memory checks). ``bandwidth_Bps`` (emulated
    bytes per second; None: infinite) adds ``msg_bytes / bandwidth_Bps`` to each point-to-point message.
    """
    return Simulation(*args, **kwargs).run()
