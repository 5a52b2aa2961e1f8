"""Paper 004's schedulers for a non-dedicated cluster (docs/policies.md, "Cooperating coscheduling (CCS)"):
DYNAMIC, dynamic coscheduling alone, and CCS, which adds to it the local users' protection and the events
between cooperating nodes. The global side of both is native local scheduling's.

What each node's OS does here is CFS (the paper's Linux 2.2 ran epochs: CFS's virtual runtime is its
modern form of "priority falls with the CPU used"), so a policy sets shares the way CFS takes them:
through nice values, whose CFS weights are the shares' ratio (schedulers/cfs.py). The simulator models
the same weights, so both backends share the CPU alike.

- **DYNAMIC** raises a receiver's priority by the messages queued for it: each unconsumed message lowers
  its nice value by ``boost_per_message``, down to ``boost_nice``; it falls back as it consumes them.
- **CCS**, on top:
  - *Local users' share.* While the node has a local user's process (``ProcAdded.local``), its parallel
    processes together weigh ``L`` of the CPU against the local processes' ``1 - L`` (the paper's quanta
    ``DEF_QUANTUM_i * L`` and ``* (1 - L)``). CFS is work-conserving, so each side uses what the other
    leaves, as in the paper. Meanwhile no queued message boosts a parallel process: its boost would come
    out of the local users' share (the paper's quantum limits bound the dynamic coscheduling too).
    ``DEF_QUANTUM_i = DEF_QUANTUM / W_i`` sizes a time slice: under CFS the slice is the kernel's, and
    what the quanta decide, the shares, is what the weights set.
  - *Events.* When local activity begins on the node (its first local process), it sends LOCAL for
    every parallel job that runs here to that job's other nodes; NO_LOCAL when it ends (its last local
    process exits); a parallel job that starts while it lasts gets its LOCAL then.
  - *Rules 1-2.* A node that runs several parallel processes gives the process of a job named by LOCAL
    ``L`` times the weight of the others, until it has received as many NO_LOCAL as LOCAL for that job:
    the job is held back on one node anyway, and the CPU it could not use goes to the other jobs here.

  - *Memory, rules 3-5.* A process's memory is its job's declared ``memory_mb`` (``ProcAdded.spec``;
    a local user's session's is its profile's), the same figures the simulator's paging model reads
    (testbed/core/paging.py). The node *swaps* while the processes it lets run need more than its memory
    ``M_i``; the parallel pool is ``M_D = min_i(M_i) x L`` (``LocalPolicy.cluster``: the same on every
    node). While the node swaps and its running parallel processes need more than ``M_D``, it stops one
    parallel job's process here, its *swapping task* (the one with most memory, a job named by a STOP
    first: rule 3), and sends STOP for it; once that no longer holds with the task back in, it lets it
    run again and sends RESUME. A stopped process's memory counts as free (its pages leave memory: what
    stopping it buys). One swapping task at a time, as in the paper.
  - *Rule 1 for STOP.* A node that runs several parallel processes gives a job named by STOP a quantum
    of zero until as many RESUME came: it is stopped somewhere, so whatever it got here would be wasted.
    CFS has no weight zero: nice 19 (weight 15, 1.5 % beside one process at nice 0). It is not stopped,
    so its memory stays resident: rule 3 makes it the one to stop should the node swap.
  - *Rule 4.* A swapping node that hears STOP for another job here stops that one instead and lets its
    own swapping task run again (RESUME for it, STOP for the new one): one job stopped across the cluster
    rather than one per node. Ours, stated: only a job that comes before the node's own swapping task in
    job-id order takes its place (and not one rule 5 just let go), so two nodes that stopped different
    jobs at once agree on one rather than swap them back and forth.
  - *Rule 5.* A swapping node that hears RESUME for its own swapping task lets it run and picks another
    (not that one) if it still swaps. Ours, stated: only once no other node stops it (as many RESUME as
    STOP heard for it): while another still does, the job is held there anyway, and eight slow nodes of
    two jobs each, all swapping, otherwise traded the two jobs back and forth at every link latency
    forever (Wrk3, seen: 600 MB of log at t = 66 s).
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import CoopEvent, CoopReceived, LocalDecision, LocalEvent, Proc, ProcAdded, ProcExited
from .cfs import NICE_MAX, NICE_MIN, cfs_weight, nearest_nice
from .cosched import BoostParams, CoschedLocal, _Cosched
from .local import LocalParams
from .params import param

# --------------------------------------------------------------------------------------------------------
# Parameters


class DynamicParams(BoostParams, LocalParams):
    """boost_nice (BoostParams): the lowest nice value queued messages bring a receiver to."""

    boost_per_message: int = param(
        5, "nice steps a receiver gains for each message queued for it", noun="a whole number", ge=0, le=39
    )


class CcsParams(DynamicParams):
    share_l: float = param(
        0.5,
        "L: the CPU share guaranteed to parallel processes on a node while a local user is active (the "
        "local processes get 1 - L)",
        noun="a fraction",
        gt=0,
        lt=1,
    )


# --------------------------------------------------------------------------------------------------------
# Events between cooperating nodes


@dataclass(frozen=True)
class Local(CoopEvent):
    """Local user activity began on node ``node``, where a process of ``job_id`` runs."""

    node: int


@dataclass(frozen=True)
class NoLocal(CoopEvent):
    """Local user activity ended on node ``node``."""

    node: int


@dataclass(frozen=True)
class Stop(CoopEvent):
    """Node ``node`` stopped its process of ``job_id``, its swapping task (memory ran out)."""

    node: int


@dataclass(frozen=True)
class Resume(CoopEvent):
    """Node ``node`` let its swapping task, its process of ``job_id``, run again."""

    node: int


# --------------------------------------------------------------------------------------------------------
# Local policies


class DynamicLocal(CoschedLocal):
    """DYNAMIC: a receiver's nice value falls by ``boost_per_message`` per message queued for it."""

    params: DynamicParams

    def base_nice(self, proc: Proc) -> int:
        return self.normal_nice

    def nice_of(self, proc: Proc) -> int:
        base = self.base_nice(proc)
        queued = self.unconsumed.get(proc, 0)
        if not queued:
            return base
        return max(min(base, self.params.boost_nice), base - queued * self.params.boost_per_message, NICE_MIN)


class CcsLocal(DynamicLocal):
    """CCS (module docstring): DYNAMIC, the local users' share ``L`` and the LOCAL/NO_LOCAL rules."""

    params: CcsParams

    def __init__(self, node: int, params: CcsParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.local: set[Proc] = set()  # the local users' processes here
        self.jobs: dict[str, int] = {}  # parallel jobs here: their processes' count
        self.told: dict[str, int] = {}  # per job: LOCAL received minus NO_LOCAL received
        self.nices: dict[Proc, int] = {}
        self.outbox: list[CoopEvent] = []
        self.memory: dict[Proc, float] = {}  # each process's declared memory, MB
        self.stopped: dict[str, int] = {}  # per job: STOP received minus RESUME received
        self.swapping: str | None = None  # the job whose process here is this node's swapping task
        self.spared: str | None = None  # rule 5: the swapping task RESUME let go, not picked again

    def on_event(self, now: float, event: LocalEvent) -> LocalDecision:
        if isinstance(event, CoopReceived):
            self._heard(event.event)
            decision = self._decision()
        else:
            decision = super().on_event(now, event)
        if not self.outbox:
            return decision
        coop, self.outbox = tuple(self.outbox), []
        return LocalDecision(run=decision.run, nice=decision.nice, wakeup=decision.wakeup, coop=coop)

    def react(self, now: float, event: LocalEvent) -> None:
        if isinstance(event, ProcAdded):
            self.memory[event.proc] = event.spec.memory_mb if event.spec is not None else 0.0
            if event.local:
                if not self.local:
                    self.outbox += [Local(job, self.node) for job in sorted(self.jobs)]
                self.local.add(event.proc)
            else:
                job = event.proc.job_id
                if self.local and job not in self.jobs:
                    self.outbox.append(Local(job, self.node))
                self.jobs[job] = self.jobs.get(job, 0) + 1
        elif isinstance(event, ProcExited):
            self._exited(event.proc)
        else:
            return  # a message's event: nothing of the shares or the memory changes
        self._swap()
        self._shares()

    def _exited(self, proc: Proc) -> None:
        if proc in self.local:
            self.local.discard(proc)
            if not self.local:
                self.outbox += [NoLocal(job, self.node) for job in sorted(self.jobs)]
            return
        job = proc.job_id
        left = self.jobs.get(job, 0) - 1
        if left > 0:
            self.jobs[job] = left
        else:
            self.jobs.pop(job, None)
            self.told.pop(job, None)
            self.stopped.pop(job, None)
            if self.swapping == job:
                self.swapping = None  # it ended (killed): nothing to resume, its nodes drop it as it ends
            if self.spared == job:
                self.spared = None

    def _heard(self, event: CoopEvent) -> None:
        job = event.job_id
        if job not in self.jobs:
            return
        if isinstance(event, Local | NoLocal):
            step = 1 if isinstance(event, Local) else -1
            self.told[job] = self.told.get(job, 0) + step  # rule 2: held until balanced
        elif isinstance(event, Stop | Resume):
            self.stopped[job] = self.stopped.get(job, 0) + (1 if isinstance(event, Stop) else -1)
            swapping = self.swapping
            if isinstance(event, Stop) and swapping is not None and job < swapping and job != self.spared:
                self._release()  # rule 4: the named job takes the place of this node's swapping task
                self._stop(job)
            elif isinstance(event, Resume) and job == self.swapping and self.stopped[job] <= 0:
                self._release()  # rule 5: let it run, and pick another if the node still swaps
                self.spared = job
        self._swap()
        self._shares()

    # -- memory (rules 3-5) ------------------------------------------------------------------------------

    def _pool_mb(self) -> float | None:
        """M_D: L times the smallest node's memory (this node's when the cluster is not known)."""
        mems = [i.memory_mb for i in self.cluster] or [self.info.memory_mb]
        if any(m is None for m in mems):
            return None
        return min(mems) * self.params.share_l

    def zeroed(self) -> set[str]:
        """Rule 1 for STOP: the jobs named by STOP that a node with several parallel processes does not
        run (their quantum is zero)."""
        if sum(self.jobs.values()) <= 1:
            return set()
        return {job for job, n in self.stopped.items() if n > 0}

    def _swaps(self) -> bool:
        """Whether the node swaps with every process in (its swapping task too), its parallel processes
        then exceeding M_D: the condition to have a swapping task."""
        mem, pool = self.info.memory_mb, self._pool_mb()
        if mem is None or pool is None:
            return False
        parallel = sum(m for p, m in self.memory.items() if p not in self.local)
        local = sum(self.memory.get(p, 0.0) for p in self.local)
        return local + parallel > mem * (1 + 1e-12) and parallel > pool * (1 + 1e-12)

    def _swap(self) -> None:
        """Keeps the swapping task as the memory asks: resumed once the node would not swap with it back,
        one picked when the node swaps (rule 3: a job named by STOP first, then the most memory)."""
        if self.swapping is not None and not self._swaps():
            self._release()
        if self.swapping is None and self._swaps():
            pick = self._pick()
            if pick is not None:
                self._stop(pick)
        if self.spared is not None and not self._swaps():
            self.spared = None  # the memory fits again: it may be picked later

    def _pick(self) -> str | None:
        mb: dict[str, float] = {}
        for p, m in self.memory.items():
            if p not in self.local and p.job_id != self.spared:
                mb[p.job_id] = mb.get(p.job_id, 0.0) + m
        if not mb:
            return None
        return min(mb, key=lambda j: (self.stopped.get(j, 0) <= 0, -mb[j], j))

    def _stop(self, job: str) -> None:
        self.swapping = job
        self.outbox.append(Stop(job, self.node))

    def _release(self) -> None:
        if self.swapping is not None:
            self.outbox.append(Resume(self.swapping, self.node))
            self.swapping = None

    def _decision(self) -> LocalDecision:
        d = super()._decision()
        if self.swapping is None:
            return d
        run = frozenset(p for p in self.procs if p in self.local or p.job_id != self.swapping)
        return LocalDecision(run=run, nice=d.nice, wakeup=d.wakeup, coop=d.coop)

    def _shares(self) -> None:
        """Each process's nice value from the weights the rules give (module docstring)."""
        L = self.params.share_l
        parallel = [p for p in self.procs if p not in self.local]
        several = len(parallel) > 1
        weight = {p: L if several and self.told.get(p.job_id, 0) > 0 else 1.0 for p in parallel}
        scale = 1.0
        if self.local and parallel:
            # sum(parallel weights) : sum(local weights) = L : 1 - L, the local processes at nice 0
            scale = L * len(self.local) / ((1 - L) * sum(weight.values()))
        base = cfs_weight(self.normal_nice)
        self.nices = {p: nearest_nice(base * scale * w) for p, w in weight.items()}
        zeroed = self.zeroed()
        for p in parallel:
            if p.job_id in zeroed:
                self.nices[p] = NICE_MAX  # rule 1 for STOP: CFS's nearest to a quantum of zero

    def base_nice(self, proc: Proc) -> int:
        return self.nices.get(proc, self.normal_nice)

    def nice_of(self, proc: Proc) -> int:
        # A boost would take from the local users' 1 - L (the shares alone while they are here), or lift a
        # job rule 1 holds at a quantum of zero.
        if self.local or self.nices.get(proc) == NICE_MAX:
            return self.base_nice(proc)
        return super().nice_of(proc)

    def forget(self, proc: Proc) -> None:
        self.nices.pop(proc, None)
        self.memory.pop(proc, None)


# --------------------------------------------------------------------------------------------------------
# The schedulers


class Dynamic(_Cosched):
    name = "dynamic"
    summary = "paper 004's DYNAMIC: a receiver's priority rises with the messages queued for it"
    local_policy = DynamicLocal
    Params = DynamicParams
    wait_mode = "block"


class Ccs(_Cosched):
    name = "ccs"
    summary = "paper 004's cooperating coscheduling: DYNAMIC, local users' share 1 - L, memory pool, 4 events"
    local_policy = CcsLocal
    Params = CcsParams
    wait_mode = "block"
