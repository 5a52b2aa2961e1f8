"""Program kinds as plug-ins (docs/architecture.md, "Program kinds").

A *program kind* is what a job's processes run: the synthetic compute/I-O/barrier program today; a
pipelined real-time vision job, a divisible-load task, an MPI program or a local user's load next. Each
kind is one module in ``apps/`` with one :class:`ProgramKind` subclass that declares four things:

1. its **config model** (:attr:`ProgramKind.Config`), a frozen pydantic model with ``kind: Literal[name]``;
   the scenario's ``app:`` sections are the union of every registered kind's model, told apart by
   ``kind`` (absent: ``synthetic``). The resolved config is the typed spec a worker starts from: it goes
   to the worker as JSON and comes back as the same model, so no field is defined twice;
2. **how a worker starts** (:meth:`ProgramKind.launch`): by default the generic harness
   ``python -m testbed.apps.worker`` (apps/worker.py), which rebuilds the config and calls the kind's
   :meth:`ProgramKind.run` with a :class:`~testbed.apps.worker.WorkerContext` (rank, size, clock, messaging,
   memory, reports). A kind whose processes are not Python (an ``mpiexec`` rank) returns another command;
3. **what its workers report** (:attr:`ProgramKind.reports`): cumulative progress counters by unit
   (barriers, iterations, frames, bytes) and, by convention, deadlines as the two counters
   ``deadlines_met`` and ``deadlines_missed``. Results and monitoring understand exactly this vocabulary;
4. **its model in the simulator** (:meth:`ProgramKind.model`): a generator of the operations below, which
   the simulator's engine drives (CPU sharing, message latency and bandwidth, wait modes, the node's local
   policy), so the simulator knows nothing of any one kind.

A kind may add one process outside the nodes the policy allocates (:attr:`ProgramKind.head`: a
divisible-load head sending the data, an ``mpiexec``): it runs on the cluster's head node, which no policy
sees, as the last rank. A kind may instead name the node its one process runs on
(:meth:`ProgramKind.owner_node`: a local user's session, apps/localuser.py): the owner's work, started there
at once, which no global policy sees (docs/architecture.md, "Local users: the owner's jobs").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

from pydantic import Field
from testbed.apps.environ import APP
from testbed.apps.reports import DEADLINES_MET, DEADLINES_MISSED
from testbed.apps.wire import SEND_WAITS as SEND_WAITS  # the wait modes: defined there, used here
from testbed.apps.wire import WAIT_MODES as WAIT_MODES
from testbed.apps.work import WORK_UNIT_S as WORK_UNIT_S  # the work unit: defined there (the worker's side)
from testbed.schedulers.inputs import InputModel

if TYPE_CHECKING:
    from testbed.apps.worker import WorkerContext

#: A wait mode as a config field's type: one of :data:`WAIT_MODES` (apps/wire.py, the one list).
WaitMode = Literal[WAIT_MODES]  # type: ignore[valid-type]


class AppConfig(InputModel):
    """Base of every kind's config model: frozen, unknown fields, non-finite numbers and booleans for
    numbers refused (schedulers/inputs.py); errors name the field."""

    kind: str


class MessagingConfig(AppConfig):
    """Base of the config of a kind whose processes talk through tbcomm: the receive wait a scenario may
    ask for. The scheduler may impose its own (a coscheduling scheme is tied to its wait mode): see
    ``schedulers.base.job_wait``."""

    wait_mode: WaitMode = Field(
        "block", description="how a receive waits, unless the scheduler imposes its own"
    )
    spin_time_us: float = Field(300.0, ge=0, description="spin-block: emulated us spent spinning first")


@dataclass(frozen=True)
class WaitSpec:
    """How one job's processes wait, as the scheduler and the scenario settled it: for a message
    (``mode``, spinning ``spin_us`` first in spin-block) and for the acknowledgement of each send
    (``send_wait``, "none" but under CC)."""

    mode: str = "block"
    spin_us: float = 300.0
    send_wait: str = "none"

    def __post_init__(self) -> None:
        if self.mode not in WAIT_MODES:
            raise ValueError(f"wait_mode: unknown {self.mode!r}; use one of {', '.join(WAIT_MODES)}")
        if self.send_wait not in SEND_WAITS:
            raise ValueError(f"send_wait: unknown {self.send_wait!r}; use one of {', '.join(SEND_WAITS)}")
        if self.spin_us < 0:
            raise ValueError(f"spin_time_us must be >= 0, got {self.spin_us}")


@dataclass(frozen=True)
class Reports:
    """What a kind's workers report: cumulative counters by unit (``progress(unit, value)``, value the
    running total); deadlines are the units ``deadlines_met`` / ``deadlines_missed``."""

    units: tuple[str, ...] = ()

    @property
    def deadlines(self) -> bool:
        return DEADLINES_MET in self.units or DEADLINES_MISSED in self.units


class RealTimeFacts(NamedTuple):
    """What a real-time kind tells the policies about one job (``ProgramKind.realtime``); the workload
    turns it into the policies' ``JobSpec.realtime`` (schedulers/base.py, ``RealTime``: same fields)."""

    period_s: float  # d, emulated seconds
    buffer: int  # b frames per period
    work_s: tuple[float, ...]  # phi per rank, emulated CPU seconds per frame on a node of the cluster
    max_wait_s: float | None  # w


@dataclass(frozen=True)
class Launch:
    """How one process of a job starts: ``argv`` with ``env`` added to the node's environment (the node
    adds its own: clock, NIC, run id, the job's messaging settings)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]


# ----------------------------------------------------------------------------------------------------------
# What a kind's simulator model yields. The engine runs each operation to completion (taking emulated time,
# CPU and the node's policy into account) before it asks the model for the next one.


class Compute(NamedTuple):
    """Burn ``cpu_s`` seconds of CPU at rate 1.0 (work units x WORK_UNIT_S)."""

    cpu_s: float


class Sleep(NamedTuple):
    """Wait ``seconds`` (emulated) without using CPU: an I/O operation, a timer."""

    seconds: float


class Send(NamedTuple):
    """Send one ``nbytes``-byte message with ``tag`` to each rank in ``dests`` (asynchronous, as tbcomm:
    unless the job's sends wait for acknowledgements, the operation ends at once)."""

    dests: tuple[int, ...]
    nbytes: int = 0
    tag: int = 0


class Recv(NamedTuple):
    """Consume ``count`` messages with ``tag`` from any source; each is one receive, waiting in the job's
    wait mode for a message that has not arrived."""

    count: int
    tag: int = 0


class Collective(NamedTuple):
    """The process enters (``enter``) or leaves a collective operation ``op``: the node's local policy
    hears of it (HYBRID boosts collectives)."""

    op: str
    enter: bool


class Progress(NamedTuple):
    """A report: the running total of ``unit`` is now ``value``."""

    unit: str
    value: float


Op = Compute | Sleep | Send | Recv | Collective | Progress

#: Tags below 0 are the collectives' own (as in tbcomm): a barrier's messages never match a user tag.
TAG_BARRIER = -2


@dataclass(frozen=True)
class Lockstep:
    """A model the simulator may run as one piece (:meth:`ProgramKind.lockstep`): every rank computes
    ``work`` CPU-seconds (at rate 1.0) ``steps`` times; with ``barrier`` (and more than one rank) each
    compute is followed by a barrier through rank 0 (each other rank sends rank 0 an empty message and
    waits for its empty reply; rank 0 replies once it has heard from all); each rank reports Progress of
    ``unit`` (None: none), the steps done, after every ``every``-th step and after its last."""

    steps: int
    work: float
    barrier: bool
    unit: str | None
    every: int = 1


@dataclass(frozen=True)
class SimContext:
    """What a simulator model may know about its process: its place in the job, the emulated time
    (``now()``) when it is asked for its next operation, and the speed of the host the simulator stands
    for (apps/speed.py; None: not given, a measured model replays as recorded)."""

    rank: int
    size: int
    now: Callable[[], float]
    host_speed_s: float | None = None


# ----------------------------------------------------------------------------------------------------------
# One job's plan: what the workload asks a kind, once per job


@dataclass(frozen=True)
class Shape:
    """How the workload sizes one job's work, at most one of: a drawn duration (the config scaled to
    about ``duration_s`` alone), the program's own length times ``own_length_scale`` (a profile's), or
    ``work`` = (CPU seconds at rate 1.0, steps) recorded in a trace. None of them: the config as given."""

    duration_s: float | None = None
    own_length_scale: float | None = None
    work: tuple[float, int] | None = None
    #: The job's process count, where the workload knows it before the plan (a kind whose length
    #: depends on it: a NAS kernel's fixed problem is shared among its ranks).
    size: int | None = None


@dataclass(frozen=True)
class JobPlan:
    """Everything the workload needs of a job's program, from one call (:meth:`ProgramKind.plan`)."""

    app: AppConfig  # the config the job runs with, bound to its arrival
    estimate: float  # ideal run time alone (emulated s), computed before binding
    job_class: str  # the class when the scenario names none
    realtime: RealTimeFacts | None  # a real-time job's facts for the policies
    wait: tuple[str, float, bool] | None  # the receive wait the config asks for (ProgramKind.wait_request)
    size: int | None  # the process count the program fixes, or None
    spec_fields: Mapping[str, Any]  # the JobSpec fields the kind adds for the policies (ProgramKind.bind)


# ----------------------------------------------------------------------------------------------------------
# The registered unit


class ProgramKind:
    """A program kind. Subclasses set the class attributes and implement :meth:`run` and :meth:`model`;
    the registry (apps/registry.py) finds them by ``name``."""

    name: ClassVar[str]
    summary: ClassVar[str]  # one line for `testbed apps`
    Config: ClassVar[type[AppConfig]]
    reports: ClassVar[Reports] = Reports()
    #: True when the job has one process more than the nodes its policy allocates: rank ``size`` (the
    #: last), on the cluster's head node, outside the policy's view (a divisible-load head sending the
    #: data, an ``mpiexec``). Its model and its ``run`` see ``ctx.size`` = allocated nodes + 1.
    head: ClassVar[bool] = False
    #: True when the simulator replays a model measured on real processes (CPU seconds of the host
    #: that recorded it), whose replay the host's speed scales (apps/speed.py): a real run of such a job
    #: measures the host's speed, for the simulator to stand for that host.
    measured_model: ClassVar[bool] = False

    # -- scenario -> job -------------------------------------------------------------------------------

    @classmethod
    def plan(
        cls, cfg: AppConfig, submit_time: float, cpu_rate: float = 1.0, shape: Shape = Shape()
    ) -> JobPlan:
        """The job of config ``cfg`` (as the scenario gave it) arriving at ``submit_time`` on nodes of rate
        ``cpu_rate``, its work sized by ``shape``: the one question the workload asks a kind. A kind
        implements the small hooks below, which this calls in order."""
        if shape.own_length_scale is not None:
            app = cls.with_own_length(cfg, shape.own_length_scale)
        else:
            app = cls.resolve(cfg)
        if shape.work is not None:
            app = cls.with_work(app, *shape.work)
        elif shape.duration_s is not None:
            app = cls.with_duration(app, shape.duration_s, cpu_rate)
        estimate = cls.ideal_runtime(app, cpu_rate)
        realtime = cls.realtime(app, cpu_rate)
        bound, fields = cls.bind(app, submit_time, cpu_rate)
        # The class, the wait asked for and the fixed size are read from the config as given: what it
        # names (a profile) and whether a field was set explicitly are part of the answer.
        wait, size = cls.wait_request(cfg), cls.fixed_size(cfg)
        return JobPlan(bound, estimate, cls.default_class(cfg), realtime, wait, size, fields)

    @classmethod
    def resolve(cls, cfg: AppConfig) -> AppConfig:
        """The config a job runs with: defaults filled from anything the config names (a profile)."""
        return cfg

    @classmethod
    def ideal_runtime(cls, cfg: AppConfig, cpu_rate: float = 1.0) -> float:
        """Emulated seconds the job takes alone on dedicated nodes of rate ``cpu_rate`` (the estimate
        batch policies backfill with, and what generated durations are scaled to)."""
        raise NotImplementedError

    @classmethod
    def with_duration(cls, cfg: AppConfig, duration_s: float, cpu_rate: float = 1.0) -> AppConfig:
        """The config changed so that its ideal run time is about ``duration_s`` (workload generators)."""
        raise NotImplementedError(f"program kind {cls.name!r} cannot be scaled to a drawn duration")

    @classmethod
    def memory_mb(cls, cfg: AppConfig, size: int) -> float:
        """Memory per process (MB) the job needs when the scenario does not say (a profile's figure)."""
        return 0.0

    @classmethod
    def has_own_length(cls, cfg: AppConfig) -> bool:
        """Whether the config has a length of its own (a profile's, a NAS class's) that
        :meth:`with_own_length` scales."""
        return False

    @classmethod
    def with_own_length(cls, cfg: AppConfig, scale: float) -> AppConfig:
        """The config as given, resolved, at the program's own length (a profile's) times ``scale``."""
        raise NotImplementedError(f"program kind {cls.name!r} has no length of its own to scale")

    @classmethod
    def largest_message(cls, cfg: AppConfig, size: int) -> int | None:
        """Bytes of the largest message one of the job's ``size`` processes sends another through the
        NICs (0: only empty ones, barriers), or None when only running the program tells (a user's MPI
        program). The run's NICs refuse frames beyond the largest of its jobs' (testbed/emulator/nic.py
        frame_bound)."""
        return 0

    @classmethod
    def size_problem(cls, cfg: AppConfig, size: int) -> str | None:
        """What is wrong with running the config on ``size`` processes (and the fix), or None."""
        return None

    @classmethod
    def size_choices(cls, cfg: AppConfig, lo: int, hi: int) -> list[int]:
        """The process counts within [lo, hi] a generator may draw for this config (a profile's), or
        [] for any."""
        return []

    @classmethod
    def compute_only(cls, cfg: AppConfig, size: int) -> float | None:
        """The CPU work (seconds at rate 1.0) of each rank when the model is nothing but compute, the same
        on every rank (no message, sleep, collective or progress: nothing the simulator must see between
        the start and the end); None otherwise. The simulator then runs the job as one piece
        (docs/architecture.md, "The simulator's job-level fast path")."""
        return None

    @classmethod
    def lockstep(cls, cfg: AppConfig, size: int) -> Lockstep | None:
        """The model of ``size`` ranks as a :class:`Lockstep` when it is exactly one (the same operations,
        in the same order, as the generator yields), or None. The simulator then runs the job as one piece
        whose ranks' states follow from two (rank 0 and any other), advanced between its state changes
        (docs/architecture.md, "The simulator's job-level fast path")."""
        return None

    @classmethod
    def with_work(cls, cfg: AppConfig, cpu_s: float, steps: int) -> AppConfig:
        """The config changed to compute ``cpu_s`` seconds of CPU (at rate 1.0) in ``steps`` steps, the
        rest of its shape kept (trace replay: a job's recorded run time, in steps of bounded length)."""
        raise NotImplementedError(f"program kind {cls.name!r} cannot replay a trace's run times")

    @classmethod
    def owner_node(cls, cfg: AppConfig) -> int | None:
        """The node whose owner runs this job (a local user's session: one process there, started the
        moment it arrives, bypassing the global policy's admission and placement), or None for a job
        the global policy places."""
        return None

    @classmethod
    def fixed_size(cls, cfg: AppConfig) -> int | None:
        """The number of processes the program itself fixes (a pipeline's stages), or None when the
        scenario's ``size`` (or the generator's draw) decides."""
        return None

    @classmethod
    def realtime(cls, cfg: AppConfig, cpu_rate: float = 1.0) -> RealTimeFacts | None:
        """A real-time job's period, buffer, per-rank work and maximum queue wait, for the policies; None
        for a best-effort program."""
        return None

    @classmethod
    def problems(cls, cfg: AppConfig, nodes: int, cpu_rate: float) -> list[tuple[str, str]]:
        """What makes the config unusable on a cluster of ``nodes`` nodes of rate ``cpu_rate``, found before
        anything starts: (field path inside the ``app:`` section, what is wrong and the fix) each."""
        return []

    @classmethod
    def bind(
        cls, cfg: AppConfig, submit_time: float, cpu_rate: float = 1.0
    ) -> tuple[AppConfig, dict[str, Any]]:
        """The config one job runs with once its arrival and the nodes' CPU rate are known, and the optional
        :class:`~testbed.schedulers.base.JobSpec` fields the policies need of it (``moldable``, a divisible
        load's data, costs and deadline), as keyword arguments. Called once per job when the workload is
        built."""
        return cfg, {}

    @classmethod
    def default_class(cls, cfg: AppConfig) -> str:
        """The job class (results and metrics are broken down by it) when the scenario names none, from
        the config as the scenario gave it."""
        return cls.name

    @classmethod
    def wait_request(cls, cfg: AppConfig) -> tuple[str, float, bool] | None:
        """The receive wait the config asks for: (mode, spin us, explicitly set), or None when the kind
        has no say (the scheduler's, else block)."""
        if isinstance(cfg, MessagingConfig):
            return cfg.wait_mode, cfg.spin_time_us, "wait_mode" in cfg.model_fields_set
        return None

    # -- real processes --------------------------------------------------------------------------------

    @classmethod
    def launch(cls, cfg: AppConfig, rank: int, size: int) -> Launch:
        """The command of rank ``rank``: the generic harness, with the config as JSON."""
        import sys

        return Launch(
            (sys.executable, "-m", "testbed.apps.worker"),
            {APP: cfg.model_dump_json()},
        )

    @classmethod
    def run(cls, cfg: AppConfig, ctx: WorkerContext) -> None:
        """The worker's body, in the worker process (apps/worker.py calls it). Connect with
        ``ctx.connect()`` once set-up is done: what comes before it is start-up, not the job's work.
        Raise to fail the job; the exception's message becomes the reason."""
        raise NotImplementedError

    # -- simulator -------------------------------------------------------------------------------------

    @classmethod
    def model(cls, cfg: AppConfig, ctx: SimContext) -> Iterator[Op]:
        """The process's operations in order, for the simulator's engine."""
        raise NotImplementedError

    # -- description -----------------------------------------------------------------------------------

    @classmethod
    def fields(cls) -> dict[str, tuple[Any, str]]:
        """Config field -> (default, description), for `testbed apps`."""
        out = {}
        for name, f in cls.Config.model_fields.items():
            if name == "kind":
                continue
            default = None if f.is_required() else f.get_default(call_default_factory=True)
            out[name] = (default, f.description or "")
        return out
