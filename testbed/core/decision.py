"""The decision core: the job table, the job-state machine, and the one place where a global policy's
actions are checked and carried out (docs/architecture.md, "One decision core").

The coordinator (real processes) and the simulator both own a :class:`DecisionCore` and differ only in
their :class:`Backend`: how a job's processes start and stop, how a slot plan reaches the nodes, and how
the next policy tick is timed. Everything else, in the same order in both, happens here: the job events
of the log (submitted, rejected, started, finished, failed, killed, requeued), which policy method hears
of what, and the refusal of an action that cannot be carried out, with an error that names the policy.

Job states::

    pending --arrives--> queued --Start--> running --all ranks exit 0--> finished
                           |  ^               |--a rank fails---------> failed
                  Reject   |  |  Requeue /    |--Kill-----------------> killed
                           v  |  node down    |--the run ends---------> killed
                       rejected  (requeue)    `--its node goes down---> failed (or queued again)
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Protocol

from testbed.core import events as ev
from testbed.core.jobs import FINAL, Job, JobState
from testbed.core.kinds import OnNodeDown
from testbed.schedulers.base import Dispatch, GlobalAction, GlobalPolicy, Kill, Reject, Requeue, Start


class PolicyError(RuntimeError):
    """A policy asked for something that cannot be done; the message names the policy and the action."""


class Backend(Protocol):
    """How one backend carries out what the core decided."""

    def launch(self, job: Job, nodes: tuple[int, ...]) -> None:
        """Start the job's processes now, rank i on ``nodes[i]``."""

    def kill(self, job: Job, nodes: tuple[int, ...], reason: str) -> None:
        """Kill whatever is left of the job's processes on ``nodes`` (the live ones)."""

    def dispatch(self, plan: Dispatch, down: Collection[int]) -> None:
        """Send the slot plan to the nodes of ``plan.allowed`` but those in ``down`` (the nodes down now:
        read at once, not kept). Not a list of the nodes it goes to: a plan given by job
        (:attr:`Dispatch.by_job`) goes to every node, which a backend that switches by job never lists."""

    def policy_consulted(self) -> None:
        """The policy was just asked something: its next tick may have moved."""


@dataclass
class JobRecord:
    job: Job
    state: JobState = JobState.PENDING
    nodes: tuple[int, ...] = ()
    ranks_ok: set[int] = field(default_factory=set)
    starts: int = 0


class DecisionCore:
    """The job table of one run and the application of its global policy's actions.

    ``emit(kind, t, **fields)`` writes a job event to the log; ``on_node_down`` is the scenario's choice
    for the jobs of a node that goes down. Inputs (each ``now`` is emulated time): :meth:`submit`,
    :meth:`tick`, :meth:`utilization`, :meth:`rank_exited`, :meth:`fail`, :meth:`node_down`,
    :meth:`node_up`, :meth:`end`."""

    def __init__(
        self,
        jobs: Iterable[Job],
        policy: GlobalPolicy,
        policy_name: str,
        nodes: int,
        backend: Backend,
        emit: Callable[..., Any],
        on_node_down: OnNodeDown = OnNodeDown.FAIL,
    ) -> None:
        on_node_down = OnNodeDown(on_node_down)  # a plain string from a caller is checked here
        self.policy = policy
        self.name = policy_name
        self.nodes = nodes
        self.backend = backend
        self.emit = emit
        self.on_node_down = on_node_down
        self.jobs: dict[str, JobRecord] = {}
        for job in jobs:
            if job.job_id in self.jobs:
                raise ValueError(f"jobs: job id {job.job_id!r} appears twice")
            self.jobs[job.job_id] = JobRecord(job)
        self.down: dict[int, str] = {}
        self.ended: str | None = None
        self.open = len(self.jobs)  # jobs not in a final state
        #: Called with the seconds each policy call took (the coordinator's decision-time metric).
        self.on_decision: Callable[[float], None] | None = None
        #: A session's id -> the same user's next session, arrived while it still ran (Job.after).
        self._held: dict[str, str] = {}
        self._cap = policy.max_jobs_per_node()
        self._load = [0] * nodes  # running jobs holding each node (with a bounded capacity)
        # With one job a node (batch), the nodes taken, as a set: a job's check and its start and end are
        # set operations, not a step per node (677 nodes a job, 100,000 jobs: benchmarks/sim_scale.py).
        self._taken: set[int] | None = set() if self._cap == 1 else None
        self._node_numbers = frozenset(range(nodes))  # a Start's nodes are checked against it

    # ----------------------------------------------------------------------------------------------------
    # Inputs

    def submit(self, now: float, job_id: str) -> None:
        rec = self.jobs[job_id]
        if self.ended or rec.state != JobState.PENDING:
            return
        spec = rec.job.spec
        rec.state = JobState.QUEUED
        extra = {"realtime": True} if spec.realtime is not None else {}
        if spec.owner_node is not None:
            extra["owner_node"] = spec.owner_node
        self.emit(ev.JOB_SUBMITTED, now, job=job_id, size=spec.size, job_class=spec.job_class, **extra)
        if spec.owner_node is not None:
            before = self.jobs.get(rec.job.after) if rec.job.after is not None else None
            if before is not None and before.state not in FINAL:
                # Its user is still in the previous session (slowed down past this one's drawn arrival):
                # it starts when that one ends, not beside it.
                self._held[before.job.job_id] = job_id
                return
            self._start_owned(now, rec, spec.owner_node)
            return
        self._ask(now, self.policy.submit, spec)
        if rec.state != JobState.REJECTED and not self.policy.admits_at_start:
            self.emit(ev.JOB_ADMITTED, now, job=job_id)

    def tick(self, now: float) -> None:
        if not self.ended:
            self._ask(now, self.policy.tick)

    def utilization(self, now: float, job_id: str, rank: int, util: float, interval: float) -> None:
        """A process's CPU share over the quantum that just ended (policies that want it)."""
        rec = self.jobs.get(job_id)
        if rec is not None and rec.state == JobState.RUNNING and not self.ended:
            self._ask(now, self.policy.utilization, job_id, rank, util, interval)

    def rank_exited(
        self,
        now: float,
        job_id: str,
        rank: int,
        ok: bool,
        reason: str | None = None,
        attempt: int | None = None,
    ) -> None:
        """A process of a running job ended by itself: the job finishes once every rank has exited
        cleanly, and fails at the first that did not (the others are killed). ``attempt``: the start of
        the job the process belonged to; a process of an earlier start (requeued since) is ignored."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.state != JobState.RUNNING or (attempt is not None and attempt != rec.starts):
            return
        if not ok:
            self.fail(now, job_id, reason or f"rank {rank} failed")
            return
        self._ranks_ok(now, rec, (rank,))

    def ranks_exited(self, now: float, job_id: str, ranks: Sequence[int]) -> None:
        """Processes of a running job ended by themselves, cleanly, at once: :meth:`rank_exited` of each,
        in one call (a simulated job run as one piece ends its lane's ranks together: 677 a job on
        average in benchmarks/sim_scale.py's 100,000-job run)."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.state != JobState.RUNNING:
            return
        self._ranks_ok(now, rec, ranks)

    def _ranks_ok(self, now: float, rec: JobRecord, ranks: Sequence[int]) -> None:
        """Ranks of a running job exited cleanly: the job finishes once all of its ranks have."""
        every = rec.job.processes_on(len(rec.nodes))
        # All of them at once (a one-phase job run as one piece: 677 ranks a job in benchmarks/
        # sim_scale.py's 100,000): the job is done without a set of its ranks.
        done = not rec.ranks_ok and ranks == range(every)
        if not done:
            rec.ranks_ok.update(ranks)
            done = len(rec.ranks_ok) == every
        if done:
            job_id = rec.job.job_id
            self._final(rec, JobState.FINISHED)
            self.emit(ev.JOB_FINISHED, now, job=job_id)
            if not _owned(rec):
                self._ask(now, self.policy.finished, job_id)
            self._start_held(now, job_id)

    def fail(self, now: float, job_id: str, reason: str) -> None:
        """The running job fails (a rank failed, could not start, or lost its node)."""
        rec = self.jobs.get(job_id)
        if rec is None or rec.state != JobState.RUNNING:
            return
        self._final(rec, JobState.FAILED)
        self.emit(ev.JOB_FAILED, now, job=job_id, reason=reason)
        self._stop(rec, reason)
        if not self.ended and not _owned(rec):
            self._ask(now, self.policy.finished, job_id)
        self._start_held(now, job_id)

    def node_down(self, now: float, node: int, reason: str) -> None:
        """``node`` failed (a scripted fault, or its agent died): the policy hears of it, then its jobs
        fail or go back to the queue, as the scenario says. In that order: a job ending frees its other
        nodes, and a policy that had not heard would place a queued job on the dead one."""
        if node in self.down or self.ended:
            return
        self.down[node] = reason
        self.emit(ev.NODE_DOWN, now, node=node, reason=reason)
        self._ask(now, self.policy.node_down, node)
        why = f"node {node} went down ({reason})"
        requeued = []
        for rec in [r for r in self.jobs.values() if r.state == JobState.RUNNING and node in r.nodes]:
            if self.on_node_down == OnNodeDown.REQUEUE and not _owned(rec):  # an owner's session just fails
                self._requeue(now, rec, why)
                self._ask(now, self.policy.finished, rec.job.job_id)
                requeued.append(rec)
            else:
                self.fail(now, rec.job.job_id, why)
        for rec in requeued:  # after their end: a job is queued once
            self._ask(now, self.policy.submit, rec.job.spec)

    def node_up(self, now: float, node: int) -> None:
        if node not in self.down or self.ended:
            return
        del self.down[node]
        self.emit(ev.NODE_UP, now, node=node)
        self._ask(now, self.policy.node_up, node)

    def end(self, now: float, reason: str) -> None:
        """The run ends now (duration reached, interrupted, an error): every running or queued job is
        killed with ``reason``."""
        if self.ended:
            return
        self.ended = reason
        for rec in self.jobs.values():
            if rec.state == JobState.RUNNING:
                self._final(rec, JobState.KILLED)
                self.emit(ev.JOB_KILLED, now, job=rec.job.job_id, reason=reason)
                self._stop(rec, reason)
            elif rec.state == JobState.QUEUED:
                self._final(rec, JobState.KILLED)
                self.emit(ev.JOB_KILLED, now, job=rec.job.job_id, reason=f"{reason} before it started")

    # ----------------------------------------------------------------------------------------------------
    # Queries

    def never_startable(self) -> str | None:
        """When nothing is left to happen (no event, no fault to come): the first queued job wider than the
        nodes still up, and why it can never start, in one line; None if there is none."""
        up = self.nodes - len(self.down)
        for rec in self.jobs.values():
            size = rec.job.spec.size
            if rec.state == JobState.QUEUED and size > up:
                down = ", ".join(str(n) for n in sorted(self.down))
                return (
                    f"job {rec.job.job_id} can never start: it needs {size} nodes and {up} of {self.nodes} "
                    f"are up (node(s) {down} went down and no fault brings them back)"
                )
        return None

    def counts(self) -> dict[str, int]:
        """How many jobs are in each state, in the order the states first occur in the job table (asked
        every quarter of a second for the progress display: 100,000 jobs counted in C, not a step each)."""
        return dict(Counter(map(_STATE, self.jobs.values())))

    # ----------------------------------------------------------------------------------------------------
    # Applying the policy's actions

    def _ask(self, now: float, method, *args) -> None:
        if self.on_decision is None:
            actions = method(now, *args)
        else:
            t = time.perf_counter()
            actions = method(now, *args)
            self.on_decision(time.perf_counter() - t)
        self.backend.policy_consulted()
        self.apply(now, actions)

    def apply(self, now: float, actions: Sequence[GlobalAction]) -> None:
        for a in actions:
            if isinstance(a, Start):
                self._start(now, a)
            elif isinstance(a, Dispatch):
                self._dispatch(now, a)
            elif isinstance(a, Reject):
                rec = self._record(a, JobState.QUEUED)
                self._final(rec, JobState.REJECTED)
                self.emit(ev.JOB_REJECTED, now, job=a.job_id, reason=a.reason)
            elif isinstance(a, Kill):
                rec = self._record(a, JobState.RUNNING)
                reason = f"{ev.POLICY_KILL}: {a.reason}"
                self._final(rec, JobState.KILLED)
                self.emit(ev.JOB_KILLED, now, job=a.job_id, reason=reason)
                self._stop(rec, reason)
            elif isinstance(a, Requeue):
                self._requeue(now, self._record(a, JobState.RUNNING), a.reason)
            else:
                raise PolicyError(
                    f"scheduler '{self.name}': returned {a!r}, not Start, Reject, Dispatch, Kill or Requeue"
                )

    def _refuse(self, action, why: str) -> PolicyError:
        return PolicyError(f"scheduler '{self.name}': {type(action).__name__} of job {action.job_id}: {why}")

    def _record(self, action, state: str) -> JobRecord:
        rec = self.jobs.get(action.job_id)
        if rec is None or _owned(rec):  # an owner's session is no job of the global policy's
            raise self._refuse(action, "no such job")
        if rec.state != state:
            raise self._refuse(action, f"the job is {rec.state}, not {state}")
        return rec

    def _start(self, now: float, a: Start) -> None:
        rec = self._record(a, JobState.QUEUED)
        nodes = tuple(a.nodes)
        size = rec.job.spec.size
        if rec.job.spec.moldable:
            if not 1 <= len(nodes) <= size:
                raise self._refuse(a, f"{len(nodes)} nodes {list(nodes)} for a moldable job of 1..{size}")
        elif len(nodes) != size:
            raise self._refuse(a, f"{len(nodes)} nodes {list(nodes)} for a job of size {size}")
        # One set of the job's nodes for every check and the update: a set's stored hashes, not the tuple's
        # ints compared (min and max) or hashed again for each (677 nodes a job, 100,000 jobs).
        distinct = set(nodes)
        if not distinct <= self._node_numbers:
            bad = [n for n in nodes if n not in self._node_numbers]
            raise self._refuse(a, f"node(s) {bad} out of range (the cluster has nodes 0..{self.nodes - 1})")
        if self.down and not self.down.keys().isdisjoint(distinct):
            raise self._refuse(a, f"node(s) {[n for n in nodes if n in self.down]} are down")
        taken = self._taken
        if taken is not None and len(distinct) == len(nodes):
            if not taken.isdisjoint(distinct):
                full = sorted(taken.intersection(distinct))
                raise self._refuse(
                    a, f"node(s) {full} would hold more than {self._cap} job(s), the policy's own limit"
                )
            taken |= distinct
        elif self._cap is not None:
            # Counted once: nodes.count(n) per node grew with the square of a job's width (a 10,000-node
            # job: 10^8 steps; benchmarks/sim_scale.py's 100,000-job run spent most of its time here).
            full = sorted(n for n, k in Counter(nodes).items() if self._load[n] + k > self._cap)
            if full:
                raise self._refuse(
                    a, f"node(s) {full} would hold more than {self._cap} job(s), the policy's own limit"
                )
            for n in nodes:
                self._load[n] += 1
        rec.state, rec.nodes = JobState.RUNNING, nodes
        rec.ranks_ok = set()
        rec.starts += 1
        if rec.starts == 1 and self.policy.admits_at_start:
            self.emit(ev.JOB_ADMITTED, now, job=a.job_id)
        self.emit(ev.JOB_STARTED, now, job=a.job_id, nodes=list(nodes))
        self.backend.launch(rec.job, nodes)

    def _start_owned(self, now: float, rec: JobRecord, node: int) -> None:
        """A local user's session (``JobSpec.owner_node``) starts on its owner's node as it arrives: no
        global policy admits, places or hears of it (docs/architecture.md, "Local users: the owner's
        jobs"); on a node that is down, or out of range, it is turned away."""
        job_id = rec.job.job_id
        if not 0 <= node < self.nodes or node in self.down:
            why = f"its owner's node {node} is down" if node in self.down else f"no node {node}"
            rec.state = JobState.QUEUED
            self._final(rec, JobState.REJECTED)
            self.emit(ev.JOB_REJECTED, now, job=job_id, reason=why)
            self._start_held(now, job_id)
            return
        rec.state, rec.nodes = JobState.RUNNING, (node,)
        rec.ranks_ok = set()
        rec.starts += 1
        self.emit(ev.JOB_ADMITTED, now, job=job_id)
        self.emit(ev.JOB_STARTED, now, job=job_id, nodes=[node])
        self.backend.launch(rec.job, rec.nodes)

    def _start_held(self, now: float, job_id: str) -> None:
        """The next session of ``job_id``'s user, if it arrived while ``job_id`` ran: it starts now."""
        nxt = self._held.pop(job_id, None)
        if nxt is not None and not self.ended:
            rec = self.jobs[nxt]
            if rec.state == JobState.QUEUED:
                self._start_owned(now, rec, rec.job.spec.owner_node)

    def _dispatch(self, now: float, d: Dispatch) -> None:
        by_job = d.by_job
        if by_job is None:
            bad = [n for n in d.allowed if not 0 <= n < self.nodes]
            unknown = sorted({j for jobs in d.allowed.values() for j in jobs if j not in self.jobs})
        else:
            bad, unknown = self._by_job_faults(by_job)
        if bad:
            raise PolicyError(
                f"scheduler '{self.name}': Dispatch of slot {d.slot}: node(s) {bad} out of range "
                f"(the cluster has nodes 0..{self.nodes - 1})"
            )
        if unknown:
            raise PolicyError(f"scheduler '{self.name}': Dispatch of slot {d.slot}: no such job(s) {unknown}")
        self.emit(ev.SLOT_PLANNED, now, slot=d.slot, at=d.at, rows=list(d.rows))
        self.backend.dispatch(d, self.down.keys())

    def _by_job_faults(self, by_job: Mapping[str, Sequence[int]]) -> tuple[list[int], list[str]]:
        """A plan by job's nodes out of range and unknown jobs, in as many steps as it has jobs: a job's
        nodes that are the very tuple its Start gave were checked then (GangGlobal hands over its own)."""
        bad: set[int] = set()
        unknown: list[str] = []
        for job_id, nodes in by_job.items():
            rec = self.jobs.get(job_id)
            if rec is None:
                unknown.append(job_id)
            elif nodes is not rec.nodes:
                bad.update(n for n in nodes if n not in self._node_numbers)
        return sorted(bad), sorted(unknown)

    def _requeue(self, now: float, rec: JobRecord, reason: str) -> None:
        self._release(rec)
        rec.state = JobState.QUEUED
        self.emit(ev.JOB_REQUEUED, now, job=rec.job.job_id, reason=reason)
        self.backend.kill(rec.job, self._live(rec), reason)
        rec.nodes = ()

    def _stop(self, rec: JobRecord, reason: str) -> None:
        self.backend.kill(rec.job, self._live(rec), reason)

    def _live(self, rec: JobRecord) -> tuple[int, ...]:
        return tuple(n for n in dict.fromkeys(rec.nodes) if n not in self.down)

    def _final(self, rec: JobRecord, state: str) -> None:
        if rec.state == JobState.RUNNING:
            self._release(rec)
        # Nothing asks an ended job's ranks again: a job of 677 ranks kept a 32 kB set, which 100,000 such
        # jobs took to 2 GB in benchmarks/sim_scale.py's scale run.
        rec.ranks_ok.clear()
        rec.state = state
        self.open -= 1

    def _release(self, rec: JobRecord) -> None:
        if self._taken is not None and rec.state == JobState.RUNNING and not _owned(rec):
            self._taken.difference_update(rec.nodes)
        elif self._cap is not None and rec.state == JobState.RUNNING and not _owned(rec):
            for n in rec.nodes:
                self._load[n] -= 1


_STATE = attrgetter("state")


def _owned(rec: JobRecord) -> bool:
    """Whether the job is a node owner's (a local user's session), which the global policy never sees."""
    return rec.job.spec.owner_node is not None
