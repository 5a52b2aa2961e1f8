"""Discrete-event simulator of the emulated cluster (docs/architecture.md, "Policy and mechanism").

It drives the very policy objects the emulator drives (one global policy, one local policy per node) and
writes the same event log. Model:

* each node is a uniprocessor of its own rate (``cpu_rate``, or each node's in ``node_info``: a scenario's
  ``cluster.groups``) shared by weighted processor sharing among the processes
  that are allowed to run (the local policy's ``run``) and want the CPU (computing, or spinning while
  waiting for a message); weights follow the Linux CFS nice table;
* each process runs its program kind's model (``ProgramKind.model``, apps/base.py): a generator of
  operations, each run to completion before the next is asked for. Compute burns CPU at the node's
  share; Sleep takes emulated time without CPU (the synthetic kind's real writes); each message of a
  Send takes ``latency_s + nbytes / bandwidth_Bps`` (no bandwidth: latency only; a node's incoming link
  is not serialised); each message of a Recv is one receive, which waits in the job's ``wait_mode`` if
  the message is not there yet; a Collective's enter or leave is told to the node's local policy, a
  Progress written to the log (a kind's collectives, such as the synthetic barrier through rank 0, are
  the point-to-point messages its model yields);
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
* each node's rate and memory (``node_info``) are handed to the policies (``Scheduler.make_global``,
  ``make_local``, with every node's); a node whose running processes declare more memory than it has
  computes at a reduced rate (the paging model, testbed/core/paging.py; ``node_paging`` events).

The simulation is exact up to floating point: a heap of timed events; a node's completion time is
recomputed only when something on that node changes.
"""

from __future__ import annotations

import enum
import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.apps.base import Collective, Compute, Lockstep, Progress, Recv, Send, SimContext, Sleep
from testbed.core import coop, paging
from testbed.core import events as ev
from testbed.core.backend import ALL_JOBS_ENDED, INTERRUPTED, Hooks, Outcome, wall_limit_reached
from testbed.core.decision import DecisionCore
from testbed.core.interrupts import interruptible
from testbed.core.jobs import FINAL, Job
from testbed.core.kinds import Fault, FaultKind, OnNodeDown
from testbed.schedulers import registry
from testbed.schedulers.base import (
    ClusterInfo,
    CollectiveEnter,
    CollectiveLeave,
    CoopEvent,
    CoopReceived,
    Dispatch,
    GlobalPolicy,
    LocalDecision,
    LocalEvent,
    LocalPolicy,
    MessageArrived,
    MessageConsumed,
    NodeInfo,
    Proc,
    ProcAdded,
    ProcExited,
    ReceiverBlocked,
    ReceiverWaiting,
    RunAll,
    Scheduler,
    SenderBlocked,
    SenderWoken,
    SlotStart,
    Timer,
)
from testbed.schedulers.cfs import cfs_weight
from testbed.schedulers.gang import GangGlobal, GangLocal
from testbed.sim.wakeup import WakeTurns, blocked_for

if TYPE_CHECKING:
    from testbed.scenario import Scenario

#: Remaining CPU work (CPU-seconds at rate 1) below which a compute phase counts as done; covers the
#: rounding of predicted completion times.
EPS = 1e-9

KILLED_REASON = ev.DURATION_REACHED
STALL_LIMIT = 20_000  # periodic events in a row with nothing else pending: nothing can progress

# Heap event kinds. Periodic ones (ticks, slot switches, timers) recur on their own and cannot by
# themselves show progress; the rest can.
_SUBMIT, _COMPLETE, _IO_DONE, _MSG, _SPIN_END, _TICK, _SLOT, _TIMER, _ACK, _ACK_SPIN_END, _FAULT, _COOP = (
    range(12)
)
_FLUID_END = 12  # a job on the job-level fast path ends (:class:`_Fluid`)
_WAKE = 13  # a woken process's turn comes (testbed/sim/wakeup.py)
_PERIODIC = (_TICK, _SLOT, _TIMER)
#: Changes of a job on the fast path looked ahead at most from one of its heap events to the next: a long
#: job with no Progress costs one event per this many, not a look-ahead over all its steps at every start.
PROJECTION_STEPS = 64
_IDX = attrgetter("idx")  # a node's number
_ORDER = attrgetter("order")  # where a switch by job takes a piece (_Fluid.order)


class _FastPath(enum.Enum):
    """When the ranks of a job on the job-level fast path run (:class:`_Fluid`)."""

    ALWAYS = enum.auto()  # from start to end: an exclusive allocation, every process running (batch)
    BY_SLOT = enum.auto()  # while the latest slot allows the job: strict gang, every node switching at once


def _fast_path(
    scheduler: type[Scheduler], gp: GlobalPolicy, skew: float, jobs: Sequence[Job]
) -> _FastPath | None:
    """Whether the policies guarantee a running rank its node's whole CPU, and when it runs. None where
    they do not (several processes share a node, a local user's session may join one, a policy wants each
    quantum's CPU use or hears of messages): every job then runs rank by rank."""
    if type(gp).wants_utilization or any(j.spec.owner_node is not None for j in jobs):
        return None
    local = scheduler.local_policy
    if local is RunAll and gp.max_jobs_per_node() == 1:
        return _FastPath.ALWAYS
    if local is GangLocal and type(gp) is GangGlobal and skew == 0:
        # One job per node and slot (the matrix's cells), every node of a job allowed by the same
        # Dispatch, and with no skew every node switches at the same instant (one heap entry).
        return _FastPath.BY_SLOT
    return None


class _JobRun:
    """The processes of one start of a job (a requeued job gets a new one when it starts again)."""

    __slots__ = ("job", "procs")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.procs: list[_Process] = []


class _Process:
    """One process: its kind's model (a generator of operations, apps/base.py) and the state of the
    operation in progress."""

    __slots__ = (
        "run", "rank", "node", "proc", "wait", "gen", "op", "begun", "done", "work", "sleeping", "need",
        "tag", "inbox", "tagbox", "spinning", "waiting", "spin_ver", "cpu_s", "nice", "allowed", "q_cpu",
        "q_t0", "q_ran", "outbox", "acking", "ack_spin", "ack_ver", "held",
    )  # fmt: skip

    def __init__(self, run: _JobRun, rank: int, node: _Node, ctx: SimContext) -> None:
        self.run = run
        self.rank = rank
        self.node = node
        self.proc = Proc(run.job.job_id, rank)
        self.wait = run.job.wait
        self.gen = run.job.kind.model(run.job.app, ctx)
        self.op = None  # the operation in progress; None once the model has no more
        self.begun = False  # whether the operation in progress has started (its side effects done)
        self.done = False
        self.work = 0.0  # CPU work left in a Compute (CPU-seconds at rate 1)
        self.sleeping = False
        self.need = 0  # messages still to consume in a Recv
        self.tag = 0
        self.inbox = 0  # messages arrived, not consumed (all tags)
        self.tagbox: dict[int, int] = {}  # the same, by tag
        self.spinning = False  # waiting and burning CPU
        self.waiting = False  # waiting announced for this Recv
        self.spin_ver = 0
        self.cpu_s = 0.0
        self.nice = 0
        self.allowed = True  # a new process runs unless stopped
        # Utilisation of the current quantum (policies that want it): CPU time and time at its start,
        # and whether the process was allowed to run for some time in it.
        self.q_cpu = 0.0
        self.q_t0 = 0.0
        self.q_ran = False
        # A job whose sends wait for acknowledgements: messages still to send one by one (receiver, bytes,
        # tag), and the wait for the acknowledgement of the last one sent: on, spinning, its version.
        self.outbox: deque[tuple[_Process, int, int]] = deque()
        self.acking = False
        self.ack_spin = False
        self.ack_ver = 0
        self.held = False  # woken, waiting for its turn on the CPU (testbed/sim/wakeup.py)
        self.next_op()

    def next_op(self) -> None:
        """Asks the model for its next operation. A Compute's work is set at once: it is the process's
        state from now on, whether or not it is allowed to run."""
        op = next(self.gen, None)
        self.op = op
        self.begun = False
        if type(op) is Compute:
            self.work = op.cpu_s

    def wants_cpu(self) -> bool:
        return self.allowed and (type(self.op) is Compute or self.spinning or self.ack_spin)


class _Lane:
    """Rank 0 of a job on the job-level fast path, or every other rank of it at once (they do the same
    things at the same times): where it is in its steps."""

    __slots__ = ("step", "work", "due", "inbox", "since", "cpu", "end", "said", "due_set", "sent")

    def __init__(self, work: float, now: float) -> None:
        self.step = 1  # the step in progress, 1..steps
        self.work: float | None = work  # CPU work left in the step's compute (rate 1); None: in the barrier
        self.due = math.inf  # when the compute ends, while it runs
        self.inbox: float | None = None  # when the message its barrier waits for arrives; None: not sent
        self.since = now  # the time up to which ``cpu`` is accounted
        self.cpu = 0.0  # emulated seconds it has held its CPU
        self.end: float | None = None  # when it exited
        self.said = 0  # the Progress it reported last (steps done)
        # When ``due`` was set and when the message in ``inbox`` was sent: rank by rank, when the heap
        # event of each was pushed, which orders it against a switch at the same instant.
        self.due_set = now
        self.sent = now

    def copy(self) -> _Lane:
        c = _Lane.__new__(_Lane)
        c.step, c.work, c.due, c.inbox = self.step, self.work, self.due, self.inbox
        c.since, c.cpu, c.end, c.said = self.since, self.cpu, self.end, self.said
        c.due_set, c.sent = self.due_set, self.sent
        return c


class _Fluid:
    """A job on the job-level fast path (docs/architecture.md, "The simulator's job-level fast path"): its
    model is a :class:`~testbed.apps.base.Lockstep` (``ProgramKind.lockstep``), or one compute phase
    (``ProgramKind.compute_only``), and each of its ranks is alone on its node's CPU whenever it runs,
    every node of the job at the same rate and stopped and continued at the same instants. Every rank but
    rank 0 then does the same at the same times, so the job is two lanes (rank 0, the others; one without
    a barrier), advanced step by step between the job's state changes (start, stop and continue under
    gang, a lane's end) with the same arithmetic as rank by rank, each change one heap event at most,
    none per rank, step, barrier or message."""

    __slots__ = ("job", "nodes", "ids", "rate", "plan", "delay", "lanes", "running", "ver", "gone",
                 "ends_at_switch", "told", "ahead", "order")  # fmt: skip

    def __init__(
        self,
        job: Job,
        nodes: Sequence[_Node],
        plan: Lockstep,
        delay: float,
        now: float,
        ends_at_switch: bool,
        ids: Sequence[int] | None = None,
    ) -> None:
        self.job = job
        self.nodes = nodes  # rank r runs on nodes[r]
        self.ids: Sequence[int] = [node.idx for node in nodes] if ids is None else ids  # their numbers
        self.rate = nodes[0].rate
        self.plan = plan
        self.delay = delay  # an empty message's time on the link
        self.lanes = [_Lane(plan.work, now) for _ in range(2 if plan.barrier else 1)]
        self.running = False
        self.ver = 0  # end events of older versions are stale
        # Ranks that exited, or died with their node; all of them as a range once they ended together.
        self.gone: set[int] | range = set()
        self.told = [0] * len(self.lanes)  # each lane's Progress logged so far
        # One compute phase whose work ends at the instant of the switch that stops it ends then (the
        # docs' section on this path, (3)); a lockstep step's compute ends when the job next runs.
        self.ends_at_switch = ends_at_switch
        # The last projection (:meth:`next_shown`): its lanes and the time it reached; None once the lanes
        # have changed since.
        self.ahead: tuple[list[_Lane], float] | None = None
        # Where a switch by job takes it (Simulation._switch_by_job): its lowest node with a live rank, and
        # its start's number (set there).
        self.order = (0, 0)

    def lane_of(self, rank: int) -> _Lane:
        return self.lanes[min(rank, len(self.lanes) - 1)]

    def ranks_of(self, lane: int) -> range:
        return range(1, len(self.nodes)) if lane else range(1 if len(self.lanes) > 1 else len(self.nodes))

    def _step(self, lanes: list[_Lane], lane: _Lane, at: float) -> None:
        """``lane`` (of ``lanes``) changes at ``at``: its compute ends, or it takes its barrier's message."""
        plan = self.plan
        if lane.work is not None:
            lane.cpu += at - lane.since
            lane.since = at
            lane.work = None
            lane.due = math.inf
            if plan.barrier:
                if lane is not lanes[0]:  # every other rank sends rank 0 its message
                    lanes[0].inbox = at + self.delay
                    lanes[0].sent = at
                return
        else:
            lane.inbox = None
            if lane is lanes[0]:  # rank 0 heard from all: its replies
                lanes[1].inbox = at + self.delay
                lanes[1].sent = at
        if plan.unit is not None and (lane.step % plan.every == 0 or lane.step == plan.steps):
            lane.said = lane.step
        if lane.step == plan.steps:
            lane.end = at
            return
        lane.step += 1
        lane.work = plan.work
        lane.since = at
        lane.due = at + plan.work / self.rate
        lane.due_set = at

    def _run(self, lanes: list[_Lane], until: float, before: float, limit: int = 0) -> float:
        """Runs ``lanes`` through their changes before ``until``, and those at ``until`` whose heap event
        would have been pushed before ``before`` (inf: all, -inf: none); with a ``limit``, up to the first
        that the log shows (a Progress, an end) or ``limit`` changes. Returns the time of the last change
        (inf: none)."""
        last = math.inf
        first = lanes[0]
        second = lanes[1] if len(lanes) > 1 else None
        while True:
            # When each lane, running, next changes (inline: this loop takes every step of every piece,
            # 139,000 in the NASA replay under EASY, half of them projections, and a function call per lane
            # and step was a third of it): its compute ends, or it takes its barrier's message.
            lane = first
            if first.end is not None:
                at = math.inf
            elif first.work is not None:
                at = first.due
            elif first.inbox is None:
                at = math.inf
            else:
                at = first.since if first.since > first.inbox else first.inbox  # max(inbox, since)
            if second is not None and second.end is None:
                if second.work is not None:
                    other = second.due
                elif second.inbox is None:
                    other = math.inf
                else:
                    other = second.since if second.since > second.inbox else second.inbox
                if other < at:
                    lane, at = second, other
            if at > until or at == math.inf:
                return last
            if at == until and not (lane.due_set if lane.work is not None else lane.sent) < before:
                return last
            said = lane.said
            self._step(lanes, lane, at)
            last = at
            if limit:
                limit -= 1
                if not limit or lane.end is not None or lane.said != said:
                    return last

    def run_to(self, t: float, before: float) -> None:
        ahead, self.ahead = self.ahead, None
        if not self.running:
            return
        if ahead is not None and ahead[1] == t and before == math.inf:
            # The projection went undisturbed to ``t`` (every change at or before it taken, none held back
            # by ``before``): its lanes are where these would be after the same steps, in the same order,
            # so they are taken, not stepped again (half the steps of the NASA replay were taken twice).
            self.lanes = ahead[0]
        self._run(self.lanes, t, before)

    def next_shown(self) -> float:
        """When the job, running on undisturbed, next does something the log shows (a Progress, a lane's
        end), or a bound number of steps ahead (a checkpoint: the projection's cost stays bounded)."""
        lanes = [lane.copy() for lane in self.lanes]
        at = self._run(lanes, math.inf, math.inf, limit=PROJECTION_STEPS)
        self.ahead = (lanes, at)
        return at

    def sync(self, t: float, before: float = -math.inf) -> None:
        """Accounts the running computes' CPU up to ``t``, as touching the nodes does rank by rank (after
        the changes at ``t`` pushed before ``before``)."""
        self.run_to(t, before)
        if not self.running:
            return
        for lane in self.lanes:
            if lane.end is None and lane.work is not None:
                dt = t - lane.since
                lane.cpu += dt
                lane.work -= dt * self.rate
                lane.since = t

    def stop(self, t: float, switch: bool, before: float = -math.inf) -> None:
        """Stops at ``t``, by a slot ``switch`` (pushed at ``before``) or for good."""
        self.sync(t, before)
        self.running = False
        for lane in self.lanes:
            lane.due = math.inf
        lane = self.lanes[0]
        if switch and self.ends_at_switch and lane.end is None and lane.work is not None and lane.work <= EPS:
            self._step(self.lanes, lane, t)

    def start(self, t: float) -> None:
        """Continues at ``t``: a compute with nothing left ends now, a message that came meanwhile is read."""
        self.ahead = None
        self.running = True
        for lane in self.lanes:
            if lane.end is None:
                lane.since = t
                if lane.work is not None:
                    lane.due = t if lane.work <= EPS else t + lane.work / self.rate
                    lane.due_set = t
        self._run(self.lanes, t, math.inf)


class _Placed:
    """A piece's nodes, rank r's at ``[r]``, looked up as they are asked for: the job's node numbers are
    kept, not a list of its nodes made at each start (677 a job in benchmarks/sim_scale.py's 100,000 jobs),
    of which a batch run reads the first (the rate, a record's source)."""

    __slots__ = ("cluster", "ids")

    def __init__(self, cluster: list[_Node], ids: Sequence[int]) -> None:
        self.cluster = cluster
        self.ids = ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, rank: int) -> _Node:
        return self.cluster[self.ids[rank]]

    def __iter__(self) -> Iterator[_Node]:
        return map(self.cluster.__getitem__, self.ids)

    def index(self, node: _Node) -> int:
        return self.ids.index(node.idx)


class _Node:
    __slots__ = ("idx", "policy", "rate", "msg_events", "procs", "queue", "last", "active", "shares", "ver",
                 "due", "finishing", "timer_ver", "src", "lazy_slots", "pending_slot", "fluid",
                 "slot_allowed", "memory", "paging", "heard")  # fmt: skip

    def __init__(self, idx: int, policy: LocalPolicy, rate: float, memory: float | None = None) -> None:
        self.idx = idx
        self.policy = policy
        self.rate = rate  # CPU-seconds of rate-1.0 work per second of the whole CPU
        self.memory = memory  # MB; None: unknown, never pages
        self.paging = 1.0  # the paging model's factor on the rate, since ``last`` (testbed/core/paging.py)
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
        self.src = f"node{idx}"  # the log's source name, as the emulator's node agents write it
        # A policy that keeps only the latest SlotStart gets it when something next happens on an idle
        # node (LocalPolicy.slot_start_keeps_latest_only), not at every quantum.
        self.lazy_slots = bool(type(policy).slot_start_keeps_latest_only)
        self.pending_slot: SlotStart | None = None
        self.fluid: dict[str, _Fluid] = {}  # jobs on the fast path with a live rank here
        self.slot_allowed: frozenset[str] = frozenset()  # the jobs the latest slot lets run here
        self.heard = 0  # switches by job its policy heard of (Simulation._switch_by_job)


#: A switch by node: each of the nodes whose switch comes at one instant, with the jobs it may run.
_Switches = list[tuple[_Node, frozenset[str]]]


def _check_args(
    nodes: int,
    cpu_rate: float,
    latency_s: float,
    switch_skew_s: float,
    bandwidth_Bps: float | None,
    paging_cost: float,
) -> None:
    if nodes < 1:
        raise ValueError(f"nodes: a cluster needs at least 1 node, got {nodes}")
    if not cpu_rate > 0:
        raise ValueError(f"cpu_rate: must be > 0, got {cpu_rate}")
    if latency_s < 0 or switch_skew_s < 0:
        raise ValueError("latency_s and switch_skew_s must be >= 0")
    if bandwidth_Bps is not None and not bandwidth_Bps > 0:
        raise ValueError(f"bandwidth_Bps: must be > 0 or None, got {bandwidth_Bps}")
    if not 0 <= paging_cost <= paging.MAX_PAGING_COST:
        raise ValueError(f"paging_cost: must be in 0..{paging.MAX_PAGING_COST:g}, got {paging_cost}")


class Simulation:
    """One run. Use :func:`simulate`; the class is public so tests can inspect the state after a run.

    The class itself is the simulator's backend for the runner (:class:`testbed.core.backend.Backend`):
    :meth:`run_scenario` builds a simulation of a scenario and runs it into a results folder."""

    #: The summary's ``backend``.
    name = "sim"

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
        node_info: Sequence[NodeInfo] | None = None,
        bandwidth_Bps: float | None = None,
        faults: Sequence[Fault] = (),
        on_node_down: OnNodeDown = OnNodeDown.FAIL,
        sink: Callable[[dict], Any] | None = None,
        wall_limit_s: float | None = None,
        fast_path: bool = True,
        wakeup_turn_s: float = 0.0,
        wakeup_crowd: int = 1,
        paging_cost: float = paging.PAGE_FAULT_COST,
        host_speed_s: float | None = None,
    ) -> None:
        """``sink(record)`` receives each event as it happens (e.g. a file, so that a run of millions of
        events, or an interrupted one, keeps its log without holding it); by default they are kept in
        :attr:`events`. ``node_info`` gives each node's rate and memory (a heterogeneous cluster); without
        it every node has ``cpu_rate`` and ``node_memory_mb``. ``fast_path=False`` runs every job rank by
        rank (:class:`_Fluid`; the tests check that the two agree). ``paging_cost``: the paging model's
        page-fault cost (testbed/core/paging.py; a scenario's ``cluster.paging_cost``). ``host_speed_s``:
        the speed of the host the run stands for, told to the programs' models (apps/speed.py; a
        scenario's ``cluster.host_speed_s``)."""
        _check_args(nodes, cpu_rate, latency_s, switch_skew_s, bandwidth_Bps, paging_cost)
        self.cpu_rate = float(cpu_rate)
        self.latency = float(latency_s)
        self.bandwidth = bandwidth_Bps
        self.skew = float(switch_skew_s)
        self.duration = duration
        #: Real seconds the run may take, as on real processes: a scenario whose events never thin out
        #: (a tiny quantum over a long job) ends with the limit, not when the user gives up.
        self.wall_limit_s = wall_limit_s
        #: Why the run stopped with jobs queued forever (a job wider than the nodes still up), if it did.
        self.never_started: str | None = None
        self.events: list[dict] = []
        # A sink (the log file) takes the ranks of a lane and the nodes of a switch as grouped records
        # (testbed/core/events.py, GROUPED), and a switch by job as one record of every node; kept, each is
        # kept as the records it stands for (what a test reads rank by rank and node by node).
        self._sink = sink if sink is not None else self._keep
        self._per_node = ev.PerNode(nodes)
        self.coord = "coordinator"
        if node_info is None:
            node_info = (NodeInfo(self.cpu_rate, node_memory_mb),) * nodes
        self._init_policies(scheduler, params, seed, node_info, nodes)
        self.paging_cost = float(paging_cost)
        self.host_speed_s = host_speed_s
        # Paging is modelled only where some process declares memory and some node's is known.
        self._paging = any(j.spec.memory_mb > 0 for j in jobs) and any(i.memory_mb for i in node_info)
        # The head node (number ``nodes``, outside every policy's view) runs the jobs' head processes
        # (ProgramKind.head) with plain OS scheduling; it exists only if some job has a head.
        heads = any(job.kind.head for job in jobs)
        fastest = max(n.rate for n in self.nodes)  # the head node's: outside the cluster, not rationed
        self.head = _Node(nodes, RunAll(nodes, {}, seed), fastest) if heads else None
        self._all_nodes = [*self.nodes, self.head] if heads else self.nodes
        self.core = DecisionCore(
            jobs, self.gp, scheduler.name, nodes, self, self._emit_job, on_node_down=on_node_down
        )
        self._init_state()
        self._init_fast_path(scheduler, jobs, faults, fast_path)
        # Wake-up turns (testbed/sim/wakeup.py); none: a woken process computes at once, at its share.
        self._turns = WakeTurns(wakeup_turn_s, wakeup_crowd) if wakeup_turn_s > 0 else None
        # Under gang, when each slot switch still to come was pushed, by its time (:meth:`_on_fluid_end`).
        self._slots_pushed: dict[float, deque[float]] = {}
        self._tick_at: float | None = None
        self._tick_ver = 0
        self._asked_global = False
        self._push_inputs(jobs, faults)

    def _init_policies(
        self,
        scheduler: type[Scheduler],
        params: Mapping[str, Any],
        seed: int,
        node_info: Sequence[NodeInfo],
        nodes: int,
    ) -> None:
        """The global policy, and each node with its local policy, told every node's rate and memory."""
        if len(node_info) != nodes:
            raise ValueError(f"node_info: needs one NodeInfo per node ({nodes}), got {len(node_info)}")
        self.gp: GlobalPolicy = scheduler.make_global(nodes, params, seed, node_info)
        self._util = bool(type(self.gp).wants_utilization)
        cluster = ClusterInfo(node_info)  # checked once, not once per node
        self.nodes = [
            _Node(n, scheduler.make_local(n, params, seed, info, cluster), float(info.rate), info.memory_mb)
            for n, info in enumerate(node_info)
        ]

    def _push_inputs(self, jobs: Sequence[Job], faults: Sequence[Fault]) -> None:
        """The run's inputs on the heap: each job's submission and each scripted fault."""
        for job in jobs:
            self._push(job.spec.submit_time, _SUBMIT, job.job_id)
        for f in faults:
            if not 0 <= f.node < len(self.nodes):
                raise ValueError(f"faults: {f}: needs a node 0..{len(self.nodes) - 1}")
            self._push(f.at_s, _FAULT, f.node, FaultKind(f.kind))

    def _init_fast_path(
        self, scheduler: type[Scheduler], jobs: Sequence[Job], faults: Sequence[Fault], fast_path: bool
    ) -> None:
        """Whether and how jobs run as pieces (docs/architecture.md, "The simulator's job-level fast
        path"), and what the pieces need kept."""
        self._fast = _fast_path(scheduler, self.gp, self.skew, jobs) if fast_path else None
        self._lockstep = self._fast is _FastPath.ALWAYS or (
            self._fast is _FastPath.BY_SLOT and self._all_pieces(jobs)
        )
        self.fluid: dict[str, _Fluid] = {}  # the running jobs on the fast path
        # Each node's pieces (_Node.fluid) are read by a slot switch (gang) and a node going down only: a
        # run with neither keeps none (a job of 677 ranks, two dict changes a rank, 100,000 times).
        self._node_fluid = self._fast is _FastPath.BY_SLOT or bool(faults)
        self._one_rate = all(node.rate == self.nodes[0].rate for node in self.nodes)
        # Strict gang with no node faults switches by job (:meth:`_switch_by_job`). A fault switches node by
        # node: a node down when a slot is planned keeps what it had, and a job started again elsewhere
        # would be allowed only where the plan placed it.
        self._by_job = self._fast is _FastPath.BY_SLOT and not faults
        self._slot_jobs: frozenset[str] = frozenset()  # the jobs the latest switch by job runs
        self._slot_start: SlotStart | None = None  # its SlotStart, for a node's policy to hear of
        self._switched = 0  # switches by job so far (a node's policy heard of _Node.heard of them)
        self._launched = 0  # pieces started so far: the second of _Fluid.order

    def _init_state(self) -> None:
        """The run's moving parts, empty: the clock, the heap, and what the steps between events share."""
        self.runs: dict[str, _JobRun] = {}  # job id -> its processes, while it runs
        self.now = 0.0
        self._clock = lambda: self.now  # what a kind's model reads as the time (SimContext.now)
        self._heap: list[tuple] = []
        self._seq = 0
        self._nonperiodic = 0  # non-periodic events in the heap
        self._busy = 0  # nodes of the cluster with a live rank (a process, or a piece's rank)
        self._dirty: dict[int, _Node] = {}
        self._pending_nodes: dict[int, _Node] = {}  # nodes with local events to feed
        # (job, ranks) that ended by themselves, for the core: one rank of a process, a lane's of a piece
        self._exits: deque[tuple[str, Sequence[int]]] = deque()
        # The wall limit inside _advance, where a process's operations that take no time (steps of at most
        # EPS of CPU, messages already arrived) run without a heap event: the real time by which the run
        # must end (set by run()), the operations advanced so far (the clock is read every 1,024), and
        # whether _advance found the limit reached (run() then ends as at its own check).
        self._deadline = math.inf
        self._ops = 0
        self._wall_hit = False

    # ----------------------------------------------------------------------------------------------------
    # The runner's interface (testbed/core/backend.py)

    @classmethod
    def run_scenario(cls, scn: Scenario, jobs: Sequence[Job], run_dir: Path, hooks: Hooks) -> Outcome:
        """Simulates ``scn``'s ``jobs`` into ``run_dir``. The simulation is built here, so one that cannot
        be built ends with its outcome too. Events are streamed to ``run_dir/events.jsonl`` (or, with
        ``results.events: zstd``, ``events.jsonl.zst``) as they happen (in time order): a run of millions of
        events is not held, and what an interrupted one simulated is kept."""
        outcome = Outcome(tdf=1.0, envelope="modelled")
        sink = ev.open_sink(ev.log_file(run_dir, scn.results.events))
        try:
            with interruptible():  # where Ctrl-C stops the run (testbed/core/interrupts.py)
                sched = registry.get(scn.scheduler.name)
                sim = cls(jobs, sched, scn.scheduler.params, sink=sink, **_options(scn))
                sim.run(on_status=hooks.on_status)
        except KeyboardInterrupt as exc:
            outcome.ended, outcome.cause = INTERRUPTED, exc
        except Exception as exc:  # noqa: BLE001 - a policy (or the model) raised: the run's outcome
            outcome.error = f"the simulation stopped: {ev.describe_error(exc)}"
            outcome.ended, outcome.cause = f"error: {outcome.error}", exc
        else:
            # Said as a real run says it: the duration, a stall (the simulator's own reason), or every job
            # ended.
            outcome.ended = sim.core.ended or ALL_JOBS_ENDED
            if sim.never_started is not None:  # a queue that could never move again: the run's one error
                outcome.error = sim.never_started
        finally:
            sink.close()
        return outcome

    # ----------------------------------------------------------------------------------------------------
    # Event log

    def _keep(self, record: dict) -> None:
        self.events.extend(self._per_node(record))

    def _emit(self, src: str, kind: str, t: float, **fields: Any) -> None:
        t = round(t, 9)
        # The emulator's record (testbed/core/events.py); there is no real time in a simulation: the emulated
        # time stands for it and keeps the log deterministic.
        self._sink({"t": t, "wall": t, "src": src, "kind": kind, **fields})

    # ----------------------------------------------------------------------------------------------------
    # Heap

    def _push(self, t: float, kind: int, *payload: Any) -> None:
        self._seq += 1
        if kind not in _PERIODIC:
            self._nonperiodic += 1
        heapq.heappush(self._heap, (t, self._seq, kind, payload))

    def run(self, on_status: Callable[[dict], Any] | None = None, every_s: float = 0.25) -> list[dict]:
        """Runs to the end; returns the events kept (none with a ``sink``). ``on_status(status)`` is called
        about every ``every_s`` real seconds with the jobs' progress and the emulated time (a progress
        display), the same shape as the coordinator's status."""
        stalled = 0
        steps = 0
        next_status = time.monotonic() + every_s
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
            _FAULT: self._on_fault,
            _COOP: self._on_coop,
            _FLUID_END: self._on_fluid_end,
            _WAKE: self._on_wake,
        }
        stall_reason = None
        deadline = None if self.wall_limit_s is None else time.monotonic() + self.wall_limit_s
        self._deadline = math.inf if deadline is None else deadline
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
            if self.core.open == 0 and kind != _SLOT:
                # Every job ended. Switches already planned still happen on the nodes (and are logged);
                # timers and ticks could recur forever and change nothing.
                continue
            handlers[kind](*payload)
            self._settle()
            if self._wall_hit:  # reached inside _advance, amid one event's many operations
                stall_reason = wall_limit_reached(self.wall_limit_s)
                break
            steps += 1
            if not steps & 0x3FF:
                if deadline is not None and time.monotonic() > deadline:
                    stall_reason = wall_limit_reached(self.wall_limit_s)
                    break
                if on_status is not None and time.monotonic() >= next_status:
                    on_status(self.status())
                    next_status = time.monotonic() + every_s
        if on_status is not None:
            on_status(self.status())
        if (
            stall_reason is None
            and self.duration is not None
            and (not self._heap or self._heap[0][0] > self.duration)
        ):
            self._end(self.duration, KILLED_REASON)
        else:
            # Nothing left to happen: a job too wide for the nodes still up is why, when there is one.
            blocked = None if stall_reason is not None or not self.core.down else self.core.never_startable()
            stuck = "simulation stalled: no event left and the job never ended"
            self._end(self.now, stall_reason or blocked or stuck)
            self.never_started = blocked
        return self.events

    def status(self) -> dict:
        counts = self.core.counts()
        final = sum(counts.get(s, 0) for s in FINAL)
        total = len(self.core.jobs)
        return {"now": self.now, "counts": counts, "total": total, "final": final, "done": final == total}

    def _end(self, t: float, reason: str) -> None:
        """Kills what is left at time ``t`` (the scenario's end)."""
        if self.core.open == 0:
            return
        self.now = t
        for node in self._all_nodes:
            self._sync(node)
        self.core.end(t, reason)

    def _emit_job(self, kind: str, t: float, **fields: Any) -> None:
        self._emit(self.coord, kind, t, **fields)

    # ----------------------------------------------------------------------------------------------------
    # Global side: the simulator as the decision core's backend (testbed/core/decision.py)

    def _on_submit(self, job_id: str) -> None:
        self.core.submit(self.now, job_id)

    def _on_tick(self, ver: int) -> None:
        if ver != self._tick_ver:
            return
        self._tick_at = None
        self.core.tick(self.now)

    def policy_consulted(self) -> None:
        self._asked_global = True  # its next tick may have moved

    def launch(self, job: Job, nodes: tuple[int, ...]) -> None:
        if self._fast is not None and self._launch_fluid(job, nodes):
            return
        r = _JobRun(job)
        self.runs[job.job_id] = r
        placed = [self.nodes[n] for n in nodes] + ([self.head] if job.kind.head else [])
        size = len(placed)
        for rank, node in enumerate(placed):
            n = node.idx
            p = _Process(r, rank, node, SimContext(rank, size, self._clock, self.host_speed_s))
            r.procs.append(p)
            self._touch(node)
            p.q_t0 = self.now
            self._busy += not node.procs and not node.fluid and node is not self.head
            node.procs[p.proc] = p
            self._emit(node.src, ev.PROC_STARTED, self.now, job=job.job_id, rank=rank, node=n, pid=None)
            self._feed(node, ProcAdded(p.proc, job.spec, local=job.spec.owner_node is not None))

    def kill(self, job: Job, nodes: tuple[int, ...], reason: str) -> None:
        f = self.fluid.get(job.job_id)
        if f is not None:
            f.stop(self.now, switch=False)  # accounts its CPU up to now
            self._fluid_exit(f, -9, f"killed: {reason}")
            return
        r = self.runs.pop(job.job_id, None)
        if r is None:
            return
        for p in r.procs:
            if not p.done:
                self._kill(p, reason)

    def _kill(self, p: _Process, reason: str) -> None:
        self._touch(p.node)
        self._ended(p, -9, f"killed: {reason}")
        self._feed(p.node, ProcExited(p.proc))

    def _ended(self, p: _Process, code: int, reason: str | None) -> None:
        """Takes ``p`` off its node and logs its end."""
        node = p.node
        p.done = True
        p.allowed = False
        del node.procs[p.proc]
        self._busy -= not node.procs and not node.fluid and node is not self.head
        # cpu_s as the kernel counts it on real processes: CPU seconds at rate 1.0 (the node's CPU held
        # for p.cpu_s emulated seconds, at its rate), so results divide by each node's rate alike.
        self._emit(node.src, ev.PROC_EXITED, self.now, job=p.proc.job_id, rank=p.rank, node=node.idx,
                   code=code, cpu_s=p.cpu_s * node.rate, reason=reason)  # fmt: skip

    def dispatch(self, d: Dispatch, down: Collection[int]) -> None:
        if self._by_job:
            jobs = d.by_job
            assert jobs is not None, "GangGlobal plans its slots by job (SlotJobs)"
            self._push_switch(max(self.now, d.at), jobs, d)  # with no skew every node at once
            return
        spread = self.skew / max(1, len(self.nodes) - 1)
        # One heap entry per distinct switch time, not per node: with no skew, one for the whole cluster.
        by_time: dict[float, _Switches] = {}
        for n in sorted(n for n in d.allowed if n not in down):
            # A deterministic spread: node 0 switches on time, the last node switch_skew_s late.
            effect = max(self.now, d.at + spread * n)
            by_time.setdefault(effect, []).append((self.nodes[n], frozenset(d.allowed[n])))
        for effect, switches in by_time.items():
            self._push_switch(effect, switches, d)

    def _push_switch(
        self, effect: float, switch: _Switches | Mapping[str, Sequence[int]], d: Dispatch
    ) -> None:
        """Plans ``d``'s ``switch`` at ``effect``: by node, or by job (the plan's jobs and their nodes)."""
        self._push(effect, _SLOT, switch, d.slot, d.at)
        if self._fast is _FastPath.BY_SLOT:
            self._slots_pushed.setdefault(effect, deque()).append(self.now)

    # ----------------------------------------------------------------------------------------------------
    # The job-level fast path (:class:`_Fluid`)

    def _launch_fluid(self, job: Job, nodes: tuple[int, ...]) -> bool:
        """Starts ``job`` as one piece if it can run so; False when it must run rank by rank."""
        if job.kind.head:
            return False
        placed = _Placed(self.nodes, nodes)
        rate = placed[0].rate
        if not self._one_rate and any(node.rate != rate for node in placed):
            return False  # ranks at different rates drift apart
        if self._paging and any(
            paging.factor(job.spec.memory_mb, node.memory, self.paging_cost) < 1 for node in placed
        ):
            return False  # alone on its nodes and still paging: the paging model runs rank by rank
        plan, ends_at_switch = self._fluid_plan(job, len(placed))
        if plan is None:
            return False
        running = True
        if self._by_job:
            # GangLocal runs a new process iff the latest slot allowed its job on its node: by job, on all
            # of the job's nodes or none (a job the plan placed is where the plan placed it).
            running = job.job_id in self._slot_jobs
        elif self._fast is _FastPath.BY_SLOT:
            # One answer for every node of the job, or the ranks would drift apart.
            running = job.job_id in placed[0].slot_allowed
            if any((job.job_id in node.slot_allowed) != running for node in placed):
                return False
        job_id = job.job_id
        f = _Fluid(job, placed, plan, self._delay(0), self.now, ends_at_switch, nodes)
        self.fluid[job_id] = f
        if self._node_fluid:
            idle = 0
            for node in placed:
                idle += not node.fluid and not node.procs
                node.fluid[job_id] = f
            self._busy += idle
        if self._by_job:
            f.order = (min(nodes), self._launched)
            self._launched += 1
        self._emit_ranks(f, range(len(placed)), ev.PROC_STARTED, pid=None)
        self._fluid_set(f, running)
        return True

    def _emit_ranks(self, f: _Fluid, ranks: Sequence[int], kind: str, **fields: Any) -> None:
        """Logs the same record of each of ``f``'s ``ranks`` (in order) at once: one record with their
        nodes for each run of consecutive ranks (testbed/core/events.py, GROUPED), the record of one rank
        as a process's."""
        nodes = f.nodes
        if type(ranks) is range and len(ranks) > 1:  # a lane's ranks, none gone: one run (its nodes' slice)
            run = list(f.ids[ranks.start : ranks.stop])
            src = nodes[ranks.start].src
            self._emit(src, kind, self.now, job=f.job.job_id, rank=ranks.start, nodes=run, **fields)
            return
        i = 0
        while i < len(ranks):
            j = i + 1
            while j < len(ranks) and ranks[j] == ranks[j - 1] + 1:
                j += 1
            first = ranks[i]
            if j - i == 1:
                node = nodes[first]
                self._emit(node.src, kind, self.now, job=f.job.job_id, rank=first, node=node.idx, **fields)
            else:
                run = [f.ids[r] for r in ranks[i:j]]
                src = nodes[first].src
                self._emit(src, kind, self.now, job=f.job.job_id, rank=first, nodes=run, **fields)
            i = j

    def _all_pieces(self, jobs: Sequence[Job]) -> bool:
        """Whether every job of the run can run as one piece. Under gang, lockstep jobs run so only then:
        a process's event on a node (a write that ends while it is stopped) splits the compute of the
        piece running there into two sums on that node alone, and with steps and quanta of whole
        seconds which of a step's end and a switch comes first is decided by those last bits
        (docs/architecture.md, "The simulator's job-level fast path")."""
        rate = self.nodes[0].rate
        if self._paging or any(node.rate != rate for node in self.nodes):
            return False
        return all(not job.kind.head and self._piece(job, job.spec.size) for job in jobs)

    def _piece(self, job: Job, size: int) -> bool:
        if self._lockstep_plan(job, size) is not None:
            return True
        work = job.kind.compute_only(job.app, size)
        return work is not None and work > EPS

    @staticmethod
    def _lockstep_plan(job: Job, size: int) -> Lockstep | None:
        plan = job.kind.lockstep(job.app, size)
        if plan is not None and plan.barrier and (job.wait.mode != "block" or job.wait.send_wait != "none"):
            return None  # a spinning or acknowledged wait: its CPU and sends are not modelled here
        return plan

    def _fluid_plan(self, job: Job, size: int) -> tuple[Lockstep | None, bool]:
        """The job's model as a piece (and whether it is one compute phase), or None: rank by rank."""
        plan = self._lockstep_plan(job, size) if self._lockstep else None
        if plan is not None:
            return plan, False
        work = job.kind.compute_only(job.app, size)
        if work is None or not work > EPS:
            # A job of no work ends within its start's instant rank by rank, before the core hears of
            # anything else: one piece would end one heap event later.
            return None, False
        return Lockstep(1, work, False, None), True

    def _fluid_set(self, f: _Fluid, running: bool, pushed: float = -math.inf) -> None:
        """Starts or stops ``f``'s ranks, all at once (by a switch pushed at ``pushed``); a start plans its
        next change the log shows."""
        if running == f.running:
            if running:
                # Rank by rank the switch touches the nodes, splitting the compute in progress (the
                # same sums, to the last bit, decide which of a step's end and a switch comes first).
                f.sync(self.now, pushed)
            return
        f.ver += 1
        if running:
            f.start(self.now)
        else:
            f.stop(self.now, True, pushed)
        self._fluid_ended(f)

    def _on_fluid_end(self, f: _Fluid, ver: int) -> None:
        if ver != f.ver or self.fluid.get(f.job.job_id) is not f:
            return
        # A switch at this instant still to come goes first for the changes rank by rank pushed after it;
        # those are left for after it (the next event, planned anew, comes after the switch's).
        pending = self._slots_pushed.get(self.now)
        f.run_to(self.now, pending[0] if pending else math.inf)
        f.ver += 1
        self._fluid_ended(f)

    def _fluid_ended(self, f: _Fluid) -> None:
        """Logs what ``f``'s lanes did by now that the log shows (each rank's Progress, its end), hands the
        ends to the core, and plans the next such change while it runs."""
        job_id = f.job.job_id
        for i, lane in enumerate(f.lanes):
            said = lane.said if lane.said > f.told[i] else 0
            if not said and lane.end is None:
                continue
            f.told[i] = lane.said
            # A lane's ranks do the same at this instant: one record for them all (each rank's Progress
            # then its end, rank by rank, before).
            # Its live ranks: its whole range, a step for each of the few gone ranks (rank 0's, once its lane
            # ended first), not for each of its ranks, unless some of them died with their node.
            ranks = f.ranks_of(i)
            if any(r in ranks for r in f.gone):
                ranks = [r for r in ranks if r not in f.gone]
            if said:
                self._emit_ranks(f, ranks, ev.PROGRESS, unit=f.plan.unit, value=said)
            if lane.end is not None:
                self._fluid_gone(f, ranks, 0, None)
                self._exits.append((job_id, ranks))
        if len(f.gone) == len(f.nodes):
            f.running = False
            del self.fluid[job_id]
        elif f.running:
            self._push(f.next_shown(), _FLUID_END, f, f.ver)

    def _fluid_gone(self, f: _Fluid, ranks: Sequence[int], code: int, reason: str | None) -> None:
        """Takes ``f``'s ``ranks`` (of one lane) off their nodes and logs their ends, as :meth:`_ended`
        logs a process's."""
        job_id = f.job.job_id
        if not f.gone and len(ranks) == len(f.nodes):
            f.gone = range(len(f.nodes))  # every rank at once (the job's end): no set of 677 ranks
        elif ranks:  # (none left to add once all have gone: a lane of no ranks ends with the others)
            f.gone.update(ranks)
        if self._node_fluid:
            idle = 0
            for rank in ranks:
                node = f.nodes[rank]
                del node.fluid[job_id]
                idle += not node.fluid and not node.procs
            self._busy -= idle
        if self._by_job and len(f.gone) < len(f.nodes) and any(f.ids[r] == f.order[0] for r in ranks):
            # Its lowest node's rank went (rank 0's lane ends first): its lowest node with a live rank now.
            f.order = (min(n for r, n in enumerate(f.ids) if r not in f.gone), f.order[1])
        if ranks:
            cpu_s = f.lane_of(ranks[0]).cpu * f.rate
            self._emit_ranks(f, ranks, ev.PROC_EXITED, code=code, cpu_s=cpu_s, reason=reason)

    def _fluid_exit(self, f: _Fluid, code: int, reason: str | None) -> None:
        """Ends ``f`` (stopped): its live ranks' ends are logged, none is handed to the core."""
        f.ver += 1
        del self.fluid[f.job.job_id]
        for i in range(len(f.lanes)):
            self._fluid_gone(f, [r for r in f.ranks_of(i) if r not in f.gone], code, reason)

    def _fluid_node_down(self, node: _Node, reason: str) -> None:
        """The ranks on ``node`` of jobs on the fast path die with it (the core then ends their jobs)."""
        for f in list(node.fluid.values()):
            f.sync(self.now)
            self._fluid_gone(f, [f.nodes.index(node)], -9, f"killed: {reason}")

    def _on_fault(self, node: int, what: FaultKind) -> None:
        if what == FaultKind.UP:
            self.core.node_up(self.now, node)
            return
        if node in self.core.down:
            return
        reason = ev.SCRIPTED_FAULT
        self._fluid_node_down(self.nodes[node], f"node {node} went down ({reason})")
        for p in list(self.nodes[node].procs.values()):
            self._kill(p, f"node {node} went down ({reason})")
        self.core.node_down(self.now, node, reason)

    def _settle(self) -> None:
        """Feeds queued local events and ends finished jobs until nothing is left to do at this instant,
        then replans completion times and the next global tick."""
        while True:
            if self._pending_nodes:
                n = next(iter(self._pending_nodes))
                self._drain(self._pending_nodes.pop(n))
                continue
            if self._exits:
                job_id, ranks = self._exits.popleft()
                self.core.ranks_exited(self.now, job_id, ranks)
                if self.core.jobs[job_id].state in FINAL:
                    self.runs.pop(job_id, None)
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
            rate = node.rate * node.paging
            for p, share in zip(node.active, node.shares, strict=True):
                used = share * dt
                p.cpu_s += used
                if type(p.op) is Compute:
                    p.work -= used * rate
        node.last = self.now

    def _touch(self, node: _Node) -> None:
        """Call before changing anything on ``node`` that may change who uses its CPU."""
        if node.idx not in self._dirty:
            self._sync(node)
            self._dirty[node.idx] = node

    def _replan(self, node: _Node) -> None:
        if self._paging and node.memory is not None:
            self._page(node)
        active = [
            p
            for p in node.procs.values()
            if p.allowed and (type(p.op) is Compute or p.spinning or p.ack_spin)  # p.wants_cpu(), inlined
        ]
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
            rate = node.rate * node.paging
            left = [
                (max(0.0, p.work) / (share * rate), p)
                for p, share in zip(active, node.shares, strict=True)
                if type(p.op) is Compute
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

    def _page(self, node: _Node) -> None:
        """The paging model's factor for ``node`` from the memory of the processes allowed to run."""
        demand = sum(p.run.job.spec.memory_mb for p in node.procs.values() if p.allowed)
        f = paging.factor(demand, node.memory, self.paging_cost)
        if f != node.paging:
            node.paging = f
            self._emit(node.src, ev.NODE_PAGING, self.now, node=node.idx, demand_mb=demand,
                       memory_mb=node.memory, factor=f)  # fmt: skip

    def _on_complete(self, node: _Node, ver: int) -> None:
        if ver != node.ver:
            return
        node.due = math.inf
        self._touch(node)
        for p in node.finishing:
            if type(p.op) is Compute:
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
        pending = self._unheard_slot(node)
        if pending is not None:
            queue.appendleft(pending)  # it came before anything queued since
        while True:
            while queue:
                self._apply_local(node, node.policy.on_event(self.now, queue.popleft()))
            if self._turns is not None:
                self._hold(node)
            for p in list(node.procs.values()):
                if p.allowed and not p.held:
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
        for event in d.coop:
            self._send_coop(node, event)

    def _send_coop(self, node: _Node, event: CoopEvent) -> None:
        """A CoopEvent to the other nodes of its job, as on real processes: logged, then each of them
        receives it one link time later (its encoded bytes at the link's bandwidth, testbed/core/coop.py)."""
        rec = self.core.jobs.get(event.job_id)
        to = sorted({n for n in (rec.nodes if rec is not None else ()) if n != node.idx})
        self._emit(node.src, ev.COOP_SENT, self.now, node=node.idx, to=to, **coop.log_fields(event))
        if to:
            delay = self._delay(len(coop.encode(event, node.idx)))
            for n in to:
                self._push(self.now + delay, _COOP, self.nodes[n], node.idx, event)

    def _on_coop(self, node: _Node, src: int, event: CoopEvent) -> None:
        fields = coop.log_fields(event)
        self._emit(node.src, ev.COOP_RECEIVED, self.now, node=node.idx, from_node=src, **fields)
        self._feed(node, CoopReceived(src, event))

    def _on_timer(self, node: _Node, ver: int) -> None:
        if ver == node.timer_ver:
            self._feed(node, Timer())

    def _on_slot(self, switch: _Switches | Mapping[str, Sequence[int]], slot: int, at: float) -> None:
        late_ms = (self.now - at) * 1000.0
        pushed = -math.inf
        if self._fast is _FastPath.BY_SLOT:
            queue = self._slots_pushed[self.now]
            pushed = queue.popleft()
            if not queue:
                del self._slots_pushed[self.now]
        if self._by_job:
            self._switch_by_job(switch, slot, at, late_ms, pushed)
        else:
            self._switch_by_node(switch, slot, at, late_ms, pushed)

    def _switch_by_node(
        self, switches: _Switches, slot: int, at: float, late_ms: float, pushed: float
    ) -> None:
        """Each of ``switches``' nodes switches to its jobs (a Dispatch's nodes whose switch comes now)."""
        by_slot = self._fast is _FastPath.BY_SLOT
        fluid: dict[str, tuple[_Fluid, bool]] = {}
        # The nodes that log this switch, by the jobs it lets them run: one record for each such set
        # (testbed/core/events.py, GROUPED), not one per node (one slot of 1,000 nodes, 1,000 lines). Where
        # the policy wants each quantum's CPU use, the node's reports follow its own record, as before.
        grouped: dict[frozenset[str], list[int]] | None = None if self._util else {}
        for node, allowed in switches:
            node.slot_allowed = allowed
            if by_slot and node.fluid:
                # A job on the fast path switches once however many of its nodes switch: with no skew
                # one Dispatch reaches all of them at this instant, with the same answer for the job.
                fluid.update((job_id, (f, job_id in allowed)) for job_id, f in node.fluid.items())
            lazy = node.lazy_slots and not node.procs and not node.queue
            if lazy:
                # No process here for the policy to switch: it hears of the slot when something next
                # happens on the node, and the log records switches of nodes that had something to
                # switch (a fast-path job's rank counts, as its process would).
                node.pending_slot = SlotStart(slot, allowed)
                if not node.fluid:
                    continue
            if grouped is not None:
                grouped.setdefault(allowed, []).append(node.idx)
            else:
                self._emit(
                    node.src,
                    ev.SLOT_SWITCH,
                    self.now,
                    node=node.idx,
                    slot=slot,
                    at=at,
                    effect=self.now,
                    late_ms=late_ms,
                    jobs=sorted(allowed),
                )
                self._report_utilization(node)
            if not lazy:
                self._feed(node, SlotStart(slot, allowed))
        for allowed, idx in (grouped or {}).items():
            where = {"node": idx[0]} if len(idx) == 1 else {"nodes": idx}
            self._emit(
                f"node{idx[0]}",
                ev.SLOT_SWITCH,
                self.now,
                **where,
                slot=slot,
                at=at,
                effect=self.now,
                late_ms=late_ms,
                jobs=sorted(allowed),
            )
        for f, running in fluid.values():
            self._fluid_set(f, running, pushed)

    def _switch_by_job(
        self, jobs: Mapping[str, Sequence[int]], slot: int, at: float, late_ms: float, pushed: float
    ) -> None:
        """Every node switches to ``jobs`` (each on its nodes, every other node idle; docs/architecture.md,
        "Gang switches scheduled ahead") in as many steps as the pieces it starts, stops or keeps running
        and the nodes with processes run rank by rank, none for the others: the same as node by node."""
        run = frozenset(jobs)
        ran, self._slot_jobs = self._slot_jobs, run
        # Every node's policy hears of the slot's jobs, each node's among them: GangLocal runs a process
        # iff its job is one of them, and a job of the plan is on its node iff the plan placed it there.
        start = self._slot_start = SlotStart(slot, run)
        self._switched += 1
        if self._busy:  # the nodes with a live rank log it, as node by node (testbed/core/events.py)
            self._emit(ev.EVERY_NODE, ev.SLOT_SWITCH, self.now, slot=slot, at=at, effect=self.now,
                       late_ms=late_ms, jobs=sorted(run), **{ev.SWITCHED_FIELD: self._busy})  # fmt: skip
        # A node with processes hears of it now, the others when something next happens there (in node
        # order, as node by node).
        for node in sorted({p.node for r in self.runs.values() for p in r.procs if not p.done}, key=_IDX):
            if node is not self.head:
                node.heard = self._switched
                self._feed(node, start)
        # Each piece that starts, stops or keeps running, in the order node by node takes them (its lowest
        # node with a live rank, then its start): who goes first decides ties among their next events.
        pieces = [f for j in (*run, *(ran - run)) if (f := self.fluid.get(j)) is not None]
        pieces.sort(key=_ORDER)
        for f in pieces:
            self._fluid_set(f, f.job.job_id in run, pushed)

    def _unheard_slot(self, node: _Node) -> SlotStart | None:
        """The latest slot's start, if ``node``'s policy has not heard of it (the node had nothing to
        switch then: it hears of it when something next happens there), now taken."""
        if self._by_job:
            if node.heard == self._switched:
                return None
            node.heard = self._switched
            return self._slot_start
        pending, node.pending_slot = node.pending_slot, None
        return pending

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
            self.core.utilization(self.now, job_id, rank, util, interval)

    def _on_io_done(self, p: _Process) -> None:
        if p.done:
            return
        self._touch(p.node)
        p.sleeping = False
        if self._turns is not None:
            self._turns.woke(p)
        self._pending_nodes[p.node.idx] = p.node

    def _on_msg(self, receivers: Sequence[_Process], src_rank: int, tag: int) -> None:
        for p in receivers:
            if p.done:
                continue
            node = p.node
            self._touch(node)
            p.inbox += 1
            p.tagbox[tag] = p.tagbox.get(tag, 0) + 1
            if self._turns is not None and blocked_for(p, tag):
                self._turns.woke(p)  # a blocked receiver's message
            if node.msg_events:
                node.queue.append(MessageArrived(p.proc, src_rank, p.inbox))
            self._pending_nodes[node.idx] = node

    def _hold(self, node: _Node) -> None:
        """Holds the processes woken on ``node`` at this instant that must wait for their turn."""
        for p, wait in self._turns.holds(node):
            p.held = True
            self._push(self.now + wait, _WAKE, p)

    def _on_wake(self, p: _Process) -> None:
        if p.done or not p.held:
            return
        self._touch(p.node)
        p.held = False
        self._pending_nodes[p.node.idx] = p.node

    def _on_spin_end(self, p: _Process, ver: int) -> None:
        if ver != p.spin_ver or type(p.op) is not Recv or not p.spinning:
            return
        node = p.node
        self._touch(node)
        p.spinning = False
        if node.msg_events:
            node.queue.append(ReceiverBlocked(p.proc))
        self._pending_nodes[node.idx] = node

    def _delay(self, nbytes: int) -> float:
        """A message's time on the link: latency, plus its bytes at the link's bandwidth."""
        delay = self.latency
        if self.bandwidth:
            delay += nbytes / self.bandwidth
        return delay

    def _send(self, p: _Process, op: Send) -> bool:
        """Starts a Send; True when it is over at once. Messages sent together arrive together: one heap
        entry for all of them. A sender that waits for acknowledgements sends them one by one instead,
        from ``_advance``, and the Send lasts until the last is acknowledged."""
        receivers = [p.run.procs[d] for d in op.dests]
        if p.wait.send_wait != "none":
            p.outbox.extend((r, op.nbytes, op.tag) for r in receivers)
            return False
        self._push(self.now + self._delay(op.nbytes), _MSG, receivers, p.rank, op.tag)
        return True

    def _send_next(self, p: _Process, q: deque[LocalEvent] | None) -> None:
        """Sends the next message of ``p.outbox`` and starts waiting for its acknowledgement."""
        r, nbytes, tag = p.outbox.popleft()
        delay = self._delay(nbytes)
        self._push(self.now + delay, _MSG, (r,), p.rank, tag)
        p.acking = True
        p.ack_ver += 1
        self._push(self.now + delay + self.latency, _ACK, p, p.ack_ver)
        mode = p.wait.send_wait
        if mode == "spin" or (mode == "spin-block" and p.wait.spin_us > 0):
            p.ack_spin = True
            if mode == "spin-block":
                self._push(self.now + p.wait.spin_us / 1e6, _ACK_SPIN_END, p, p.ack_ver)
        else:  # block, or spin-block with no spin time
            p.ack_spin = False
            if q is not None:
                q.append(SenderBlocked(p.proc))

    def _on_ack(self, p: _Process, ver: int) -> None:
        if ver != p.ack_ver or not p.acking or p.done:
            return
        node = p.node
        self._touch(node)
        blocked = not p.ack_spin
        p.acking = False
        p.ack_spin = False
        if blocked and self._turns is not None:
            self._turns.woke(p)
        if blocked and node.msg_events:
            node.queue.append(SenderWoken(p.proc))
        self._pending_nodes[node.idx] = node

    def _on_ack_spin_end(self, p: _Process, ver: int) -> None:
        if ver != p.ack_ver or not p.acking or not p.ack_spin or p.done:
            return
        node = p.node
        self._touch(node)
        p.ack_spin = False
        if node.msg_events:
            node.queue.append(SenderBlocked(p.proc))
        self._pending_nodes[node.idx] = node

    def _advance(self, p: _Process) -> None:
        """Runs ``p`` (allowed to run) through its operations until one takes time (CPU, a sleep, a
        message, an acknowledgement) or the model ends. Every 1,024 operations (counted across calls) it
        reads the clock: past the wall limit it leaves ``p`` before its next operation and flags the run to
        end (a model of millions of steps of no time would otherwise run on in one event, past the limit)."""
        node = p.node
        q = node.queue if node.msg_events else None
        ops = self._ops
        try:
            while p.allowed:
                ops += 1
                if not ops & 0x3FF and time.monotonic() > self._deadline:
                    self._wall_hit = True
                    ops -= 1  # the next operation, of any process, reads the clock again: none is taken
                    return
                if p.acking:
                    return  # waiting for the acknowledgement of a send
                if p.outbox:
                    self._send_next(p, q)
                    continue
                op = p.op
                kind = type(op)
                if kind is Compute:
                    if p.work > EPS:
                        return
                    p.work = 0.0
                elif kind is Recv:
                    if not p.begun:
                        p.begun = True
                        p.need, p.tag = op.count, op.tag
                        p.waiting = False
                    if not self._receive(p, q):
                        return
                    p.spinning = False
                    p.spin_ver += 1
                elif kind is Send:
                    if not p.begun:
                        p.begun = True
                        if not self._send(p, op):
                            continue  # the outbox goes first, then the Send is over
                elif kind is Sleep:
                    if not p.begun:
                        p.begun = True
                        p.sleeping = True
                        self._push(self.now + op.seconds, _IO_DONE, p)
                        return
                    if p.sleeping:
                        return
                elif kind is Collective:
                    if q is not None:
                        q.append((CollectiveEnter if op.enter else CollectiveLeave)(p.proc, op.op))
                elif kind is Progress:
                    self._emit(
                        node.src,
                        ev.PROGRESS,
                        self.now,
                        node=node.idx,
                        job=p.proc.job_id,
                        rank=p.rank,
                        unit=op.unit,
                        value=op.value,
                    )
                elif op is None:
                    self._exit(p)
                    return
                else:
                    raise TypeError(f"program kind {p.run.job.kind.name!r} yielded {op!r}, not an operation")
                p.next_op()
        finally:
            self._ops = ops

    def _receive(self, p: _Process, q: deque[LocalEvent] | None) -> bool:
        """Consumes arrived messages of ``p.tag`` toward ``p.need``; True once all have arrived. Each
        message is one receive, as on the NIC: a receive that completed is followed by a new one, which
        waits (and spins) afresh."""
        consumed = False
        box = p.tagbox
        while p.need > 0 and box.get(p.tag, 0) > 0:
            box[p.tag] -= 1
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
        mode = p.wait.mode
        if q is not None:
            q.append(ReceiverWaiting(p.proc, mode))
        if mode == "spin":
            p.spinning = True
        elif mode == "spin-block" and p.wait.spin_us > 0:
            p.spinning = True
            p.spin_ver += 1
            self._push(self.now + p.wait.spin_us / 1e6, _SPIN_END, p, p.spin_ver)
        else:  # block, or spin-block with no spin time
            p.spinning = False
            if q is not None:
                q.append(ReceiverBlocked(p.proc))

    def _exit(self, p: _Process) -> None:
        node = p.node
        self._ended(p, 0, None)
        node.queue.append(ProcExited(p.proc))
        self._pending_nodes[node.idx] = node
        self._exits.append((p.proc.job_id, (p.rank,)))


def network_options(scn: Scenario) -> dict[str, Any]:
    """:class:`Simulation`'s ``latency_s`` and ``bandwidth_Bps`` from a scenario's ``cluster.network``."""
    net = scn.cluster.network
    return {
        "latency_s": net.latency_us * 1e-6,
        "bandwidth_Bps": net.bandwidth_mbps * 1e6 / 8 if net.bandwidth_mbps else None,
    }


def wakeup_options(scn: Scenario) -> dict[str, Any]:
    """:class:`Simulation`'s wake-up turns from a scenario's ``cluster.wakeup`` (testbed/sim/wakeup.py)."""
    w = scn.cluster.wakeup
    return {"wakeup_turn_s": w.turn_us * 1e-6, "wakeup_crowd": w.crowd}


def _options(scn: Scenario) -> dict[str, Any]:
    """:class:`Simulation`'s keyword arguments from a scenario (its cluster, network, duration, faults)."""
    c = scn.cluster
    return {
        "nodes": c.nodes,
        "node_info": c.node_info(),
        "seed": scn.workload.seed,
        "duration": scn.duration_s,
        **network_options(scn),
        "faults": scn.faults.faults(),
        "on_node_down": scn.faults.on_node_down,
        "wall_limit_s": scn.wall_limit_s,
        **wakeup_options(scn),
        "paging_cost": c.paging_cost,
        "host_speed_s": c.host_speed_s,
    }


def simulate(*args: Any, **kwargs: Any) -> list[dict]:
    """Simulates ``jobs`` under ``scheduler`` on ``nodes`` uniprocessor nodes; returns the event log in
    the emulator's format (:class:`testbed.core.events.EventWriter`), ordered by emulated time.

    Takes :class:`Simulation`'s arguments: jobs, scheduler, params, *, nodes, cpu_rate=1.0, seed=0,
    duration=None, latency_s=50e-6, switch_skew_s=0.0, node_memory_mb=None, node_info=None,
    bandwidth_Bps=None.

    ``switch_skew_s`` delays node n's slot switches by ``switch_skew_s * n / (nodes - 1)``, so the
    switch skew across the cluster is ``switch_skew_s``. With ``duration``, the run stops then and jobs
    not finished are killed (``job_killed``). ``node_memory_mb`` is each node's memory, told to the global
    policy for memory-aware allocation (None: unknown, no memory checks); ``node_info`` (one
    :class:`~testbed.schedulers.base.NodeInfo` per node) gives each node a rate and memory of its own
    instead of ``cpu_rate`` and ``node_memory_mb``. ``bandwidth_Bps`` (emulated
    bytes per second; None: infinite) adds ``msg_bytes / bandwidth_Bps`` to each point-to-point message.
    """
    return Simulation(*args, **kwargs).run()
