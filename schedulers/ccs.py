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

  The memory pool ``M_D``, the swapping task and the STOP and RESUME events (rules 3-5) are not here
  yet: the testbed models no paging (docs/policies.md says what remains).
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import CoopEvent, CoopReceived, LocalDecision, LocalEvent, Proc, ProcAdded, ProcExited
from .cfs import NICE_MIN, cfs_weight, nearest_nice
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

    def _heard(self, event: CoopEvent) -> None:
        if isinstance(event, Local | NoLocal) and event.job_id in self.jobs:
            step = 1 if isinstance(event, Local) else -1
            self.told[event.job_id] = self.told.get(event.job_id, 0) + step  # rule 2: held until balanced
        self._shares()

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

    def base_nice(self, proc: Proc) -> int:
        return self.nices.get(proc, self.normal_nice)

    def nice_of(self, proc: Proc) -> int:
        if self.local:  # a boost would take from the local users' 1 - L: the shares alone while they are here
            return self.base_nice(proc)
        return super().nice_of(proc)

    def forget(self, proc: Proc) -> None:
        self.nices.pop(proc, None)


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
    summary = "paper 004's cooperating coscheduling: DYNAMIC, local users' share 1 - L, LOCAL/NO_LOCAL events"
    local_policy = CcsLocal
    Params = CcsParams
    wait_mode = "block"
