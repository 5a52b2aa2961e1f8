"""The policy interface: events in, decisions out (docs/architecture.md, "Policy and mechanism").

Policies here are pure and deterministic. They never sleep, do I/O, read the wall clock or talk to Ray:
time arrives as the ``now`` argument (emulated seconds), randomness comes from the ``seed`` they are given.
The same objects drive the real-process emulator (``testbed.emulator.coordinator`` /
``testbed.emulator.agent``) and the discrete-event simulator (``testbed.sim``).

Two roles:

* a :class:`GlobalPolicy`, one per cluster, owned by the coordinator: admission, allocation of nodes to
  jobs, and (for time-sharing policies) the slot plan that says which jobs each node may run from when;
* a :class:`LocalPolicy`, one per node, owned by the node agent: which of the node's processes may run
  right now, and at which priority, given what happens on the node (process added/exited, a slot starts,
  a message arrives, a receiver waits or blocks, a collective is entered or left).

A :class:`Scheduler` bundles the two under one registered name.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from . import params as _params
from .params import PolicyConfigError, PolicyParams  # noqa: F401 - the policies import the error from here

# --------------------------------------------------------------------------------------------------------
# What the policies see


@dataclass(frozen=True)
class NodeInfo:
    """One node as the policies see it: its CPU rate and its memory. Nodes of a cluster may differ
    (the scenario's ``cluster.groups``); the owner hands every policy its nodes' descriptions when it makes
    it (:meth:`Scheduler.make_global`, :meth:`Scheduler.make_local`)."""

    #: CPU speed as a fraction of a rate-1.0 CPU: a process alone on the node does ``rate`` CPU-seconds
    #: of rate-1.0 work per emulated second (a work unit takes 1 / rate ms).
    rate: float = 1.0
    #: The node's memory in MB; None when unknown (no memory-aware allocation).
    memory_mb: float | None = None

    def __post_init__(self) -> None:
        r, m = self.rate, self.memory_mb
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r < math.inf:
            raise ValueError(f"node rate: needs a number > 0, got {r!r}")
        if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 < m < math.inf):
            raise ValueError(f"node memory: needs a number of MB > 0 or None, got {m!r}")


@dataclass(frozen=True)
class RealTime:
    """What a real-time pipelined job tells the policies (docs/policies.md, "Real-time and best-effort
    classes"): it must deliver ``buffer`` (b) frames every period ``buffer * period_s`` (Omega = b * d);
    rank i needs ``work_s[i]`` (phi) emulated seconds of its node's CPU per frame; a job still waiting
    in the queue after ``max_wait_s`` (w) is turned away. Filled by the program kind
    (``ProgramKind.realtime``) when the workload is built, so a policy never reads a kind's config."""

    period_s: float  # d: one frame is due every d
    buffer: int  # b: frames that must be out by the end of each period
    work_s: tuple[float, ...]  # phi per rank: CPU seconds per frame on a node of the cluster
    max_wait_s: float | None = None  # w; None: waits indefinitely

    @property
    def omega_s(self) -> float:
        """The period Omega = b * d."""
        return self.buffer * self.period_s

    @property
    def phi_max(self) -> float:
        return max(self.work_s, default=0.0)


@dataclass(frozen=True)
class DivisibleLoad:
    """What a divisible-load task of paper 001 tells its policies (docs/policies.md, "Divisible load"): the
    task T = (A, sigma, D) (A is the job's ``submit_time``) and its costs. ``data_size`` (sigma) units of
    data are sent by a head one chunk after another at ``cms`` emulated s per unit (plus ``setup_link`` per
    chunk) and computed at ``cps`` s of CPU per unit (plus ``setup_compute`` per node). Filled by the
    program kind (``ProgramKind.bind``, apps/divisible.py) when the workload is built.

    The deadline is here, not in :class:`JobSpec`: D is part of the task, only paper 001's policies read
    it, and the other papers' deadlines are of another kind (paper 000's are per frame: :class:`RealTime`).
    """

    data_size: float  # sigma: units of data
    cms: float  # emulated s to send one unit over a link
    cps: float  # emulated s of CPU to compute one unit
    #: Relative deadline D: the task should end by ``submit_time + deadline``; None = no deadline (the
    #: policies turn such a task away).
    deadline: float | None = None
    setup_link: float = 0.0  # ST: emulated s per chunk sent
    setup_compute: float = 0.0  # SC: emulated s per node's computation


@dataclass(frozen=True)
class JobSpec:
    """A job as the policies see it. Times are emulated seconds.

    The optional fields after ``job_class`` describe what some policies need of a job and others ignore;
    the program kind fills them when the workload is built (``ProgramKind.realtime`` for ``realtime``,
    ``ProgramKind.bind`` for the others). What only one paper's policies read is grouped in an object of
    its own (``realtime``, ``divisible``), so the fields every policy shares stay few."""

    job_id: str
    size: int  # number of processes; one per node on uniprocessor nodes (the most, when moldable)
    submit_time: float
    estimate: float | None = None  # runtime estimate (emulated s), for backfilling; None = unknown
    memory_mb: float = 0.0
    exclusive: bool = False  # never share a quantum with another job (paired gang)
    job_class: str = "compute"
    #: A real-time job's period, buffer and per-rank work (paper 000); None for a best-effort job.
    realtime: RealTime | None = None
    #: The policy chooses how many nodes the job gets, 1..``size`` (a divisible load), instead of exactly
    #: ``size``. Not in :class:`DivisibleLoad`: the decision core checks every policy's Start against it,
    #: and a job of any kind whose process count is settled at its start may be moldable.
    moldable: bool = False
    #: A divisible-load task's data, costs and deadline (paper 001); None = not a divisible load.
    divisible: DivisibleLoad | None = None
    #: The node whose owner runs this job (a local user's session, paper 004): the decision core starts
    #: its one process there as it arrives, and the global policy never sees it; only that node's local
    #: policy does (``ProcAdded.local``). None: a job the global policy admits and places.
    owner_node: int | None = None


@dataclass(frozen=True, order=True)
class Proc:
    """One process of a job: rank ``rank`` of ``job_id``."""

    job_id: str
    rank: int

    def __str__(self) -> str:
        return f"{self.job_id}:{self.rank}"


# --------------------------------------------------------------------------------------------------------
# Global decisions


@dataclass(frozen=True)
class Reject:
    job_id: str
    reason: str


@dataclass(frozen=True)
class Start:
    """Start the job's processes now; rank i runs on ``nodes[i]``."""

    job_id: str
    nodes: tuple[int, ...]


class SlotJobs(Mapping[int, frozenset[str]]):
    """A slot plan given by job: ``jobs`` maps each job the slot runs to its nodes (all of them), and every
    other node of the ``nodes`` runs nothing. Read as :attr:`Dispatch.allowed` it is node -> the jobs the
    node may run, for every node ``0..nodes-1`` (an empty set for an idle one), built on its first read.

    A slot then costs as many steps as it runs jobs: a backend that switches by job (the simulator,
    docs/architecture.md, "Gang switches scheduled ahead") reads ``jobs`` and never the nodes' view, which
    a gang slot of 10,000 nodes built at every quantum (benchmarks/sim_scale.py's scale run).
    """

    __slots__ = ("nodes", "jobs", "_by_node")

    def __init__(self, nodes: int, jobs: Mapping[str, Sequence[int]]) -> None:
        self.nodes = nodes
        self.jobs = jobs
        self._by_node: dict[int, frozenset[str]] | None = None

    def _view(self) -> dict[int, frozenset[str]]:
        if self._by_node is None:
            # One set per job, shared by its nodes, and one empty set for the idle ones: not two per node.
            empty: frozenset[str] = frozenset()
            allowed: dict[int, frozenset[str]] = dict.fromkeys(range(self.nodes), empty)
            for job_id, nodes in self.jobs.items():
                one = frozenset((job_id,))
                for n in nodes:
                    have = allowed.get(n, empty)
                    allowed[n] = have | one if have else one
            self._by_node = allowed
        return self._by_node

    def __getitem__(self, node: int) -> frozenset[str]:
        return self._view()[node]

    def __iter__(self) -> Iterator[int]:
        return iter(self._view())

    def __len__(self) -> int:
        return len(self._view())

    def __repr__(self) -> str:
        return f"SlotJobs({self.nodes}, {dict(self.jobs)!r})"


@dataclass(frozen=True)
class Dispatch:
    """From emulated time ``at`` on, node n may run only the jobs in ``allowed[n]``.

    Sent ahead of ``at`` so every node switches on its own timer (docs/architecture.md, "Gang switches
    scheduled ahead"). Nodes absent from ``allowed`` keep what they had. ``slot`` identifies the matrix row
    (for skew statistics). ``rows`` are the matrix rows that share this quantum (two when paired gang pairs
    them). A policy that plans whole slots by job gives ``allowed`` as a :class:`SlotJobs` (:attr:`by_job`).
    """

    at: float
    slot: int
    allowed: Mapping[int, frozenset[str]]
    rows: tuple[int, ...] = ()

    @property
    def by_job(self) -> Mapping[str, Sequence[int]] | None:
        """Each job the slot runs -> its nodes, every other node running nothing, where the policy gave the
        plan by job (:class:`SlotJobs`); None where it gave it by node only."""
        return self.allowed.jobs if isinstance(self.allowed, SlotJobs) else None


@dataclass(frozen=True)
class Kill:
    """End a running job now (its processes are killed); it ends as killed, with ``reason``. The policy has
    already released what the job held: the owner does not call :meth:`GlobalPolicy.finished` for it."""

    job_id: str
    reason: str


@dataclass(frozen=True)
class Requeue:
    """Stop a running job and put it back in the queue: its processes are killed and a later
    :class:`Start` runs it again from the beginning. The policy has already taken it back into its own
    queue: the owner does not call :meth:`GlobalPolicy.finished` or :meth:`GlobalPolicy.submit` for it."""

    job_id: str
    reason: str


GlobalAction = Reject | Start | Dispatch | Kill | Requeue


class GlobalPolicy(ABC):
    """Admission and allocation across the cluster.

    The owner calls :meth:`submit` when a job arrives, :meth:`finished` when one ends (any final state
    but one the policy caused by :class:`Kill` or :class:`Requeue`), :meth:`tick` at (or just after) the
    time last returned by :meth:`next_tick`, and :meth:`node_down` / :meth:`node_up` when a node fails or
    comes back. Each returns the actions to carry out, in order. The owner applies them in one place
    (testbed/core/decision.py), which refuses an action that cannot be carried out (an unknown job, a node
    out of
    range or down, a node beyond :meth:`max_jobs_per_node`) with an error naming the policy.
    """

    #: True when the policy needs each process's CPU use per quantum (:meth:`utilization`); owners skip
    #: the measurement otherwise.
    wants_utilization: ClassVar[bool] = False

    #: True when a job waiting in the queue is not admitted yet (it may still be turned away, as an RT job
    #: that waits longer than its w): the owner then logs its admission when it first starts, not when it
    #: arrives, so admitted and rejected jobs add up to the jobs that arrived.
    admits_at_start: ClassVar[bool] = False

    #: Memory of the smallest node in MB, or None when some node's is unknown (no memory-aware
    #: allocation); each node's own is in :attr:`node_info`.
    node_memory_mb: float | None = None

    #: Each node's rate and memory, node i at index i: all rate 1.0 with unknown memory until the owner
    #: tells the policy its cluster (:meth:`set_nodes`, called by :meth:`Scheduler.make_global`), right
    #: after construction and before the first job arrives.
    node_info: tuple[NodeInfo, ...] = ()

    #: The scheduler's validated parameters, an instance of its ``Params`` model
    #: (:meth:`Scheduler.make_global`); a policy narrows the annotation to the model it reads
    #: (``params: GangParams``) and reads attributes (``self.params.quantum_ms``).
    params: PolicyParams

    def __init__(self, nodes: int, params: PolicyParams | Mapping[str, Any], seed: int = 0) -> None:
        self.nodes = nodes
        self.params = _params.given(params)
        self.seed = seed
        self.node_info = (NodeInfo(),) * nodes
        #: Nodes that are down now (:meth:`node_down`); a policy must not place a job on one.
        self.down: set[int] = set()

    def max_jobs_per_node(self) -> int | None:
        """How many jobs may hold one node at once under this policy (1 for space sharing, the MPL for
        time sharing), or None when the policy does not bound it. The owner refuses a Start beyond it."""
        return None

    def node_down(self, now: float, node: int) -> list[GlobalAction]:
        """``node`` failed. From now on no job may be placed there. The jobs that ran on it end right
        after this call (failed, or stopped to be requeued, as the scenario says), with :meth:`finished`
        for each; the requeued ones are then submitted again. The default records it in :attr:`down`."""
        self.down.add(node)
        return []

    def node_up(self, now: float, node: int) -> list[GlobalAction]:
        """``node`` is back (empty) and may be used again. The default removes it from :attr:`down`."""
        self.down.discard(node)
        return []

    def set_nodes(self, info: Sequence[NodeInfo]) -> None:
        """Tells the policy each node's rate and memory (node i at index i, one entry per node)."""
        info = tuple(info)
        if len(info) != self.nodes or not all(isinstance(i, NodeInfo) for i in info):
            raise ValueError(f"node info: needs one NodeInfo per node ({self.nodes}), got {info!r}")
        self.node_info = info
        mems = [i.memory_mb for i in info]
        self.node_memory_mb = None if None in mems else float(min(mems))

    def set_node_memory(self, mb: float | None) -> None:
        """Tells the policy that every node has ``mb`` MB of memory (rates kept); None disables memory
        checks."""
        if mb is not None and (isinstance(mb, bool) or not isinstance(mb, (int, float)) or not mb > 0):
            raise ValueError(f"node memory: needs a number of MB > 0 or None, got {mb!r}")
        self.set_nodes([NodeInfo(i.rate, None if mb is None else float(mb)) for i in self.node_info])

    def utilization(
        self, now: float, job_id: str, rank: int, util: float, interval: float
    ) -> list[GlobalAction]:
        """A process's CPU use over its last quantum, as a fraction of its node's CPU.

        ``util`` is the CPU time rank ``rank`` of ``job_id`` consumed over the last ``interval`` emulated
        seconds (the quantum just ended, or the part of it since the process started), divided by
        ``interval`` (0..1 on a uniprocessor node). Owners call it once per process per quantum in which
        the job ran, at the switch that ends the quantum, and only for policies with
        :attr:`wants_utilization`. Returns the actions to carry out, in order.
        """
        return []

    @abstractmethod
    def submit(self, now: float, job: JobSpec) -> list[GlobalAction]: ...

    @abstractmethod
    def finished(self, now: float, job_id: str) -> list[GlobalAction]: ...

    def tick(self, now: float) -> list[GlobalAction]:
        return []

    def next_tick(self) -> float | None:
        """Emulated time at which :meth:`tick` must be called next, or None."""
        return None


# --------------------------------------------------------------------------------------------------------
# Local events and decisions


@dataclass(frozen=True)
class ProcAdded:
    """A process started on the node; ``spec`` is its job as the global policy saw it (what a local policy
    may need to know of the job: its class, a real-time job's period), None where the owner has none.
    ``local``: the process is the node owner's (a local user's session, ``JobSpec.owner_node``), not a
    parallel job's; a policy that does not tell them apart ignores it."""

    proc: Proc
    spec: JobSpec | None = None
    local: bool = False


@dataclass(frozen=True)
class ProcExited:
    proc: Proc


@dataclass(frozen=True)
class SlotStart:
    """A Dispatch took effect on this node: only these jobs may run now."""

    slot: int
    allowed: frozenset[str]


@dataclass(frozen=True)
class MessageArrived:
    proc: Proc  # the receiver
    src_rank: int
    unconsumed: int  # messages waiting for this receiver after this arrival


@dataclass(frozen=True)
class ReceiverWaiting:
    proc: Proc
    mode: str  # spin | block | spin-block


@dataclass(frozen=True)
class ReceiverBlocked:
    proc: Proc


@dataclass(frozen=True)
class MessageConsumed:
    proc: Proc
    unconsumed: int


@dataclass(frozen=True)
class SenderBlocked:
    """A send that waits for the receiving NIC's acknowledgement (a job with a ``send_wait``) stopped
    spinning and now blocks until the acknowledgement comes."""

    proc: Proc


@dataclass(frozen=True)
class SenderWoken:
    """The acknowledgement a blocked sender (:class:`SenderBlocked`) waits for reached its node: the NIC
    hands it over and wakes the sender."""

    proc: Proc


@dataclass(frozen=True)
class CollectiveEnter:
    proc: Proc
    op: str


@dataclass(frozen=True)
class CollectiveLeave:
    proc: Proc
    op: str


@dataclass(frozen=True)
class Timer:
    tag: str = ""


@dataclass(frozen=True)
class CoopEvent:
    """What a local policy tells its cooperating nodes: the other nodes that run a part of job ``job_id``
    (paper 004's LOCAL, NO_LOCAL, STOP, RESUME are subclasses). A policy returns them in
    :attr:`LocalDecision.coop`; each of those nodes' local policy receives it as :class:`CoopReceived`,
    one link latency later.

    Subclasses are frozen dataclasses whose fields are str, int, float, bool or tuples of them: on real
    processes the node's NIC carries them to the other nodes' NICs as JSON, named by their class
    (testbed/core/coop.py); the simulator hands them over as they are."""

    job_id: str


@dataclass(frozen=True)
class CoopReceived:
    """A :class:`CoopEvent` from node ``node``, a cooperating node of the event's job."""

    node: int
    event: CoopEvent


LocalEvent = (
    ProcAdded
    | ProcExited
    | SlotStart
    | MessageArrived
    | ReceiverWaiting
    | ReceiverBlocked
    | MessageConsumed
    | SenderBlocked
    | SenderWoken
    | CollectiveEnter
    | CollectiveLeave
    | Timer
    | CoopReceived
)


@dataclass(frozen=True)
class LocalDecision:
    """What the node should look like after an event.

    ``run``: the processes allowed to run (the rest are stopped); None leaves it unchanged.
    ``nice``: priority changes (nice values, -20..19; lower runs first), applied on top of ``run``.
    ``wakeup``: emulated time at which to deliver a :class:`Timer` event, or None.
    ``coop``: events for the cooperating nodes of each event's job (:class:`CoopEvent`).
    """

    run: frozenset[Proc] | None = None
    nice: Mapping[Proc, int] = field(default_factory=dict)
    wakeup: float | None = None
    coop: tuple[CoopEvent, ...] = ()


class LocalPolicy(ABC):
    """Which of one node's processes may run, and how urgently."""

    #: True when the policy needs every message arrival, wait and consumption (coscheduling); the NIC
    #: then reports them. False lets the NIC skip that work.
    wants_message_events: ClassVar[bool] = False
    #: True when the policy keeps nothing of a SlotStart but its allowed set, so on a node without
    #: processes only the latest one matters: the simulator then hands an idle node just the latest, when
    #: something next happens there (1,000 idle nodes need not each decide at every quantum).
    slot_start_keeps_latest_only: ClassVar[bool] = False

    #: The scheduler's validated parameters (:attr:`GlobalPolicy.params`).
    params: PolicyParams

    #: This node's rate and memory; the owner sets it (:meth:`Scheduler.make_local`) right after
    #: construction, before the first event.
    info: NodeInfo = NodeInfo()
    #: Every node's rate and memory, node i at index i (this one's is :attr:`info`), set with it; empty
    #: when the owner gave none. A policy that sizes something on the whole cluster reads it (CCS's memory
    #: pool is a fraction of the smallest node's memory, the same on every node).
    cluster: tuple[NodeInfo, ...] = ()

    def __init__(self, node: int, params: PolicyParams | Mapping[str, Any], seed: int = 0) -> None:
        self.node = node
        self.params = _params.given(params)
        self.seed = seed

    @abstractmethod
    def on_event(self, now: float, event: LocalEvent) -> LocalDecision: ...


class RunAll(LocalPolicy):
    """Every process of the node may run; the OS scheduler shares the CPU (native local scheduling)."""

    def __init__(self, node: int, params: PolicyParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.procs: set[Proc] = set()

    def on_event(self, now: float, event: LocalEvent) -> LocalDecision:
        if isinstance(event, ProcAdded):
            self.procs.add(event.proc)
        elif isinstance(event, ProcExited):
            self.procs.discard(event.proc)
        return LocalDecision(run=frozenset(self.procs))


# --------------------------------------------------------------------------------------------------------
# The registered unit


class Scheduler:
    """A named pair of policies. Subclasses set the class attributes; the registry finds them."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line for `testbed schedulers`
    global_policy: ClassVar[type[GlobalPolicy]]
    local_policy: ClassVar[type[LocalPolicy]] = RunAll
    #: The scheduler's parameters (:mod:`~testbed.schedulers.params`): types, bounds, rules, defaults and
    #: descriptions. The policies receive an instance, validated from the scenario's mapping.
    Params: ClassVar[type[PolicyParams]] = PolicyParams
    #: Parameter name -> default, derived from ``Params``. A scheduler may instead declare ``defaults`` as a
    #: plain dict: it then gets a model that checks the names only.
    defaults: ClassVar[Mapping[str, Any]] = {}
    #: How every job's processes wait for a message under this scheduler ("spin", "block", "spin-block";
    #: None keeps each job's own ``wait_mode``), and the spin time in us that goes with "spin-block" (None
    #: keeps the job's; a ``spin_time_us`` parameter of the scheduler, where it has one, wins). The runner
    #: forces them on every job, unless the scenario gives the job an explicit wait mode and
    #: ``allows_wait_mode_override`` is True (False where the scheme is tied to its wait mode, e.g. SB).
    wait_mode: ClassVar[str | None] = None
    spin_time_us: ClassVar[float | None] = None
    allows_wait_mode_override: ClassVar[bool] = True
    #: How every job's sends wait under this scheduler: "none" (a send returns once its frame is handed
    #: over, as always), or until the receiving node's NIC acknowledges the message: "spin", "block" or
    #: "spin-block" (spinning the job's spin time first). Always forced on the jobs (no scenario setting).
    send_wait: ClassVar[str] = "none"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = vars(cls)
        if "Params" in own:
            if "defaults" in own:
                raise TypeError(f"{cls.__name__}: declare Params or defaults, not both")
            cls.defaults = _params.defaults(cls.Params)
        elif "defaults" in own:
            cls.Params = _params.untyped(cls.__name__, cls.defaults)

    @classmethod
    def all_defaults(cls) -> dict[str, Any]:
        """Every parameter the scheduler accepts, with its default."""
        return _params.defaults(cls.Params)

    @classmethod
    def parse_params(cls, params: Mapping[str, Any] | PolicyParams) -> PolicyParams:
        """The scenario's ``scheduler.params`` as an instance of ``Params`` (defaults filled in; one given
        as such is kept), or :class:`PolicyConfigError` with one line per problem, each naming
        ``scheduler.params.<name>`` and the fix."""
        if isinstance(params, cls.Params):
            return params
        return _params.parse(cls.Params, params, getattr(cls, "name", cls.__name__))

    @classmethod
    def check_params(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter's validated value (defaults filled in) as a plain dict, or
        :class:`PolicyConfigError` as :meth:`parse_params`."""
        return cls.parse_params(params).model_dump()

    @classmethod
    def make_global(
        cls,
        nodes: int,
        params: Mapping[str, Any] | PolicyParams,
        seed: int,
        info: Sequence[NodeInfo] | None = None,
    ) -> GlobalPolicy:
        """The global policy, given the scenario's ``scheduler.params`` (validated here) and each node's
        rate and memory (``info``, one per node; None: rate 1.0, memory unknown)."""
        policy = cls.global_policy(nodes, cls.parse_params(params), seed)
        if info is not None:
            policy.set_nodes(info)
        return policy

    @classmethod
    def make_local(
        cls,
        node: int,
        params: Mapping[str, Any] | PolicyParams,
        seed: int,
        info: NodeInfo | None = None,
        cluster: Sequence[NodeInfo] | None = None,
    ) -> LocalPolicy:
        """Node ``node``'s local policy, given the scenario's ``scheduler.params`` (validated here), the
        node's rate and memory (``info``; None: rate 1.0, memory unknown) and every node's (``cluster``,
        node i at index i; None: not told)."""
        policy = cls.local_policy(node, cls.parse_params(params), seed)
        if info is not None:
            if not isinstance(info, NodeInfo):
                raise ValueError(f"node info: needs a NodeInfo, got {info!r}")
            policy.info = info
        if cluster is not None:
            policy.cluster = cluster if type(cluster) is ClusterInfo else ClusterInfo(cluster)
        return policy


class ClusterInfo(tuple):
    """Every node's :class:`NodeInfo` (node i at index i), checked once. :meth:`Scheduler.make_local` checks
    any other sequence it is given, for each node it makes: a simulator of 10,000 nodes paid 10^8 checks
    (170 of 197 s profiled, benchmarks/sim_scale.py's scale run; docs/measurements.md)."""

    __slots__ = ()

    def __new__(cls, infos: Iterable[NodeInfo]) -> ClusterInfo:
        infos = tuple(infos)
        if not all(isinstance(i, NodeInfo) for i in infos):
            raise ValueError(f"cluster info: needs one NodeInfo per node, got {infos!r}")
        return super().__new__(cls, infos)


def job_wait(
    scheduler: type[Scheduler],
    params: Mapping[str, Any] | PolicyParams,
    *,
    wait_mode: str,
    spin_time_us: float,
    explicit: bool,
) -> tuple[str, float]:
    """The wait mode and spin time (us) a job runs with under ``scheduler`` (with ``params``, the
    scenario's ``scheduler.params``), given its own (``explicit``: the scenario set its wait mode). See
    :class:`Scheduler`'s ``wait_mode``: a ``spin_time_us`` parameter wins when the scenario sets it."""
    forced = scheduler.wait_mode
    if forced is None or (explicit and scheduler.allows_wait_mode_override):
        return wait_mode, spin_time_us
    typed = scheduler.parse_params(params)
    spin = typed.spin_time_us if "spin_time_us" in typed.model_fields_set else scheduler.spin_time_us
    return forced, spin_time_us if spin is None else float(spin)
