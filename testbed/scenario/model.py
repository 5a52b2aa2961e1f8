"""Scenarios are data (docs/architecture.md, "Scenarios are data"): a YAML file validated here, with errors
that name the field and the fix. ``--set a.b.c=value`` overrides are applied to the raw document before
validation, so an override is checked exactly like the file."""

from __future__ import annotations

import copy
import difflib
import itertools
import json
import re
import stat
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from testbed.apps import registry as kinds
from testbed.core import paging
from testbed.core.clock import CONTROL_RESERVE_CORES, CONTROL_RESERVE_MESSAGES_CORES, auto_tdf
from testbed.core.kinds import ENVELOPE_KINDS, Fault, FaultKind, OnNodeDown
from testbed.scenario.divisible import DivisibleTasks
from testbed.scenario.localusers import LocalUsers
from testbed.scenario.localusers import ids as local_user_ids
from testbed.schedulers import registry
from testbed.schedulers.base import NodeInfo, PolicyConfigError
from testbed.schedulers.inputs import InputModel, cut, cut_path, excerpt


class ScenarioError(ValueError):
    """The scenario cannot be used; the message names the field(s) and the fix.

    ``problems`` holds one line per problem (each names its field); the message is that one line, or a
    header and one indented line per problem when there are several."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        if not problems:
            # One problem is one line, whatever the user's text in it holds (a newline, or a control
            # character that str.splitlines() breaks at).
            message = " ".join(message.split())
        super().__init__(message)
        self.problems = list(problems) if problems else [message]

    @classmethod
    def listing(cls, header: str, problems: list[str]) -> ScenarioError:
        # A problem is one line: a message with a newline in it (a library's) would read as two problems.
        problems = [" ".join(p.split()) for p in problems]
        if len(problems) == 1:
            return cls(f"{header}: {problems[0]}", problems)
        return cls(f"{header}: {len(problems)} problems:\n  " + "\n  ".join(problems), problems)


#: The slowest node: 1/1000 of a core. Below it every operation's emulated time explodes (a rate of 1e-9
#: kept the simulator busy for hours) and no CFS quota can express it.
MIN_CPU_RATE = 0.001
#: Seeds numpy's generators take (a negative one is refused, a huge one overflows a 64-bit draw).
MAX_SEED = 2**63 - 1
#: A node's power, idle or its busy slope, at most, watts: a megawatt is 25 full 40 kW racks, so anything
#: above is a unit mistake; it also keeps E = (B + X u) N T finite (a node of 1e307 W wrote "Infinity").
MAX_NODE_WATTS = 1e6
#: The largest time dilation: the most emulated CPUs (10,000 nodes x 64 cores) on one host core is 640,000;
#: 1e300 made every real sleep and timeout of a run overflow.
MAX_TDF = 1e6
#: The most nodes a cluster, or a group of its nodes, may have: 10,000, for the simulator's scale benchmark
#: (benchmarks/sim_scale.py: 100,000 jobs on 10,000 nodes; issue 23). Real processes stop far below.
MAX_NODES = 10_000
#: How many times its mean a generated job's length is planned for: an exponential draw is longer with
#: probability e^-10.
LONG_DRAW = 10.0
#: The most a trace's or the Lublin model's times may be stretched (time_scale, arrival_scale): a day
#: becomes 2,700 years; 1e300 made their arrival times infinite.
MAX_TIME_SCALE = 1e6
#: The most trace jobs ``workload.trace.skip`` and ``count`` may name.
MAX_TRACE_JOBS = 10**9
#: The longest name a scenario, job or variant may have: each names a folder or a file.
MAX_NAME = 100
_SAFE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")


def _safe_name(v: str) -> str:
    """A name that becomes part of a file's or a folder's name (a job's logs, a run's folder): no path
    separator, no '..', no control character, bounded."""
    if not _SAFE_NAME_RE.match(v) or len(v) > MAX_NAME:
        raise ValueError(
            f"{excerpt(v)} cannot name a file; use letters, digits and . _ + = - (up to {MAX_NAME} "
            "characters, starting with a letter or digit)"
        )
    return v


SafeName = Annotated[str, AfterValidator(_safe_name)]


def _bounded_name(v: str) -> str:
    """A scenario's name: shown in tables and turned into a results folder's name (runner.new_out keeps
    its safe characters), so any text will do but a long one or one with control characters."""
    if len(v) > MAX_NAME or any(ord(c) < 32 or ord(c) == 127 for c in v):
        raise ValueError(f"{excerpt(v)}: give a name of up to {MAX_NAME} printable characters")
    return v


BoundedName = Annotated[str, AfterValidator(_bounded_name)]


class _Model(InputModel):
    """The scenario's sections: schedulers/inputs.py says what every input model refuses."""


class PowerModel(_Model):
    """Per-node power P = B + X*u (paper 003, section 6): ``idle_watts`` is B, the node's power when idle;
    ``busy_watts`` is X, the slope: the watts a fully busy node draws *above* B (so a busy node draws
    B + X, 238.07 W with the paper's figures), not a busy node's total."""

    idle_watts: float = Field(
        219.10, ge=0, le=MAX_NODE_WATTS, description="B: a node's power when idle, watts"
    )
    busy_watts: float = Field(
        18.968,
        ge=0,
        le=MAX_NODE_WATTS,
        description="X: the slope of P = B + X*u, the watts above idle_watts at full utilisation u = 1 "
        "(not a busy node's total power)",
    )


class NetworkConfig(_Model):
    """Emulated links between NICs (tbcomm); emulated quantities, applied at the receiving NIC."""

    latency_us: float = Field(0.0, ge=0)
    bandwidth_mbps: float | None = Field(None, gt=0)


class WakeupConfig(_Model):
    """The simulator's wake-up turns (testbed/sim/wakeup.py; docs/measurements.md, "Wake-up latency"). Real
    runs ignore it: their kernel does this itself."""

    turn_us: float = Field(
        0.0,
        ge=0,
        le=1e6,
        description="simulator: CPU-us (at rate 1) a woken process waits for its turn when cluster.wakeup."
        "crowd other processes of its node want the CPU and its nice value does not preempt them; 0 = off "
        "(a woken process computes at once, at its share)",
    )
    crowd: int = Field(
        1,
        ge=1,
        le=1024,
        description="simulator: how many other processes of its node must want the CPU for a woken process "
        "to wait its turn (1: a uniprocessor's run queue; under a CFS quota one other costs no turn)",
    )


class NodeGroup(_Model):
    """``count`` alike nodes of a heterogeneous cluster (``cluster.groups``), numbered after the groups
    before them."""

    count: int = Field(..., ge=1, le=MAX_NODES)
    cpu_rate: float = Field(
        1.0, ge=MIN_CPU_RATE, le=1.0, description="these nodes' CPU speed as a fraction of one host core"
    )
    memory_mb: float | None = Field(
        None, gt=0, description="memory per node of this group (memory-aware allocation); null = unchecked"
    )


class ClusterConfig(_Model):
    nodes: int = Field(16, ge=1, le=MAX_NODES)
    cores_per_node: int = Field(1, ge=1, le=64)
    cpu_rate: float = Field(
        1.0, ge=MIN_CPU_RATE, le=1.0, description="node CPU speed as a fraction of one host core"
    )
    groups: tuple[NodeGroup, ...] | None = Field(
        None,
        description="heterogeneous nodes: groups of alike nodes, each {count, cpu_rate, memory_mb}, nodes "
        "numbered group by group; the counts add up to cluster.nodes (which may be left out); replaces "
        "cluster.cpu_rate and cluster.memory_mb (leave them out); null = every node alike",
    )
    envelope: Literal[ENVELOPE_KINDS] = "auto"  # type: ignore[valid-type]
    cfs_period_ms: float = Field(
        100.0,
        ge=1,
        le=1000,
        description="real ms: CFS period of the node cgroups; shorter periods show sleeps (I/O) more "
        "faithfully at a higher kernel cost (testbed/emulator/mechanism/envelope.py)",
    )
    quota_tick_us: int = Field(
        0,
        ge=0,
        le=4000,
        description="real us: where above 0, a real-time thread on each of this host's CPUs wakes this "
        "often, so that the kernel charges a node's CPU to its quota at that grain instead of at its "
        "scheduler tick (4 ms at HZ 250), where a node overruns its quota and then waits the overrun out "
        "(testbed/emulator/mechanism/quotatick.py); 0 = off. It costs about 1.6 % of each CPU at 500, "
        "and paper003's NAS ranks, sharing their nodes, spent 13-30 % more CPU "
        "(docs/measurements.md, 'The quota is charged at the kernel's tick'). Real processes on a local "
        "cluster only (not with cluster.ray_address)",
    )
    spin_reserve_us: float = Field(
        200.0,
        ge=0,
        le=100_000,
        description="real us of a node's CFS quota a period that a spinning wait leaves unspent: once the "
        "node has spent the rest, the spinner waits blocked for its message or the next period instead of "
        "polling its node into throttling, where a message would wait for the next period "
        "(apps/spinguard.py; at most half the quota); 0 = spins poll throughout. "
        "Real processes only: the simulator's node is never throttled",
    )
    memory_mb: float | None = Field(
        None, gt=0, description="memory per node for memory-aware allocation; null = not checked"
    )
    paging_cost: float = Field(
        paging.PAGE_FAULT_COST,
        ge=0,
        le=paging.MAX_PAGING_COST,
        description="the paging model's page-fault cost: a node whose running processes declare more "
        "memory (D) than it has (M) computes at 1 / (1 + paging_cost x (D - M) / D) of its rate; 0 = no "
        "slowing. Stated, not measured (testbed/core/paging.py; docs/policies.md, 'Paging, modelled'); "
        "the simulator applies it, real processes only log it",
    )
    host_speed_s: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="the simulator's host: the CPU s that apps/speed.py's fixed work takes on the host the "
        "simulator stands for (a real run records its own as summary.json's host_speed_s); each measured "
        "model (a NAS kernel's, an MPI program's) stamped with its recording's figure replays at its CPU "
        "x this / that. null: models replay as recorded. Real processes run at the host's own speed",
    )
    nodes_per_process: int = Field(
        8,
        ge=1,
        le=256,
        description="node agents hosted by one Ray actor process: each actor process costs CPU of its own "
        "(`python benchmarks/core.py --only per_process` measured the default: control CPU 11.2 % of "
        "the host at 1, 6.7 % at 4, 5.2 % at 8, 6.1 % at 16 per process)",
    )
    ray_address: str | None = Field(
        None,
        description="null: the run starts a Ray of its own on this host. 'auto' (the Ray cluster this "
        "process runs in, as a RayJob's entrypoint does) or 'HOST:PORT' (a cluster's GCS): the node agents "
        "run on that cluster's Ray nodes that offer the resource 'testbed_node', one per agent process "
        "(docs/architecture.md, 'Across hosts')",
    )
    power: PowerModel = Field(default_factory=PowerModel)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    wakeup: WakeupConfig = Field(default_factory=WakeupConfig)

    @model_validator(mode="before")
    @classmethod
    def _nodes_from_groups(cls, v):
        # Groups without cluster.nodes: the node count is their sum (when the counts are whole numbers in
        # range; otherwise the groups' own check names the bad count, alone: a count of 2^64 was a second
        # line about cluster.nodes, which the user never wrote).
        if isinstance(v, dict) and "nodes" not in v and isinstance(v.get("groups"), list | tuple):
            counts = [g.get("count") if isinstance(g, dict) else None for g in v["groups"]]
            if counts and all(type(c) is int and 1 <= c <= MAX_NODES for c in counts):
                v = {**v, "nodes": sum(counts)}
        return v

    @model_validator(mode="after")
    def _groups(self):
        if self.groups is None:
            return self
        if not self.groups:
            raise ValueError("cluster.groups: empty; give at least one {count, cpu_rate, memory_mb}, or null")
        total = sum(g.count for g in self.groups)
        if total != self.nodes:
            raise ValueError(
                f"cluster.groups: the counts add up to {total} nodes but cluster.nodes is {self.nodes}; "
                "make them agree, or leave cluster.nodes out"
            )
        if self.cpu_rate != 1.0 or self.memory_mb is not None:
            which = "cpu_rate" if self.cpu_rate != 1.0 else "memory_mb"
            raise ValueError(
                f"cluster.{which}: cannot be set with cluster.groups, which give each node's cpu_rate and "
                f"memory_mb; set it in each group and remove cluster.{which}"
            )
        mems = [g.memory_mb is None for g in self.groups]
        if any(mems) and not all(mems):
            raise ValueError(
                f"cluster.groups.{mems.index(True)}.memory_mb: give every group a memory_mb or none "
                "(memory-aware allocation needs every node's)"
            )
        return self

    def node_info(self) -> tuple[NodeInfo, ...]:
        """Each node's rate and memory, node i at index i (what the policies are told)."""
        if self.groups is None:
            return (NodeInfo(self.cpu_rate, self.memory_mb),) * self.nodes
        return tuple(NodeInfo(g.cpu_rate, g.memory_mb) for g in self.groups for _ in range(g.count))

    def total_rate(self) -> float:
        """Emulated CPUs of the whole cluster: every node's cores at its rate."""
        if self.groups is None:
            return self.nodes * self.cores_per_node * self.cpu_rate
        return self.cores_per_node * sum(g.count * g.cpu_rate for g in self.groups)

    def min_rate(self) -> float:
        """The slowest node's rate: a job's generated duration, its estimate and its kind's checks are
        for a node of this rate (an upper bound wherever it runs), as on a uniform cluster of it."""
        return self.cpu_rate if self.groups is None else min(g.cpu_rate for g in self.groups)

    @field_validator("ray_address")
    @classmethod
    def _ray_address(cls, v):
        if v is None or v == "auto":
            return v
        host, _, port = v.rpartition(":")
        if not host or not port.isdigit() or "/" in v:
            raise ValueError(
                f"{excerpt(v)} is not a Ray cluster address: give 'auto' or the GCS as HOST:PORT (e.g. "
                "127.0.0.1:6379); Ray Client addresses (ray://) are not supported"
            )
        return v


class ClockConfig(_Model):
    tdf: float | Literal["auto"] = "auto"
    rate_probe_s: float = Field(
        1.0, ge=0, description="real seconds of the full-load CPU-rate probe; 0 = skip"
    )
    control_reserve_cores: float | None = Field(
        None,
        ge=0,
        description="host cores left to agents, coordinator and Ray when tdf is auto; null: 0.3, or 0.9 "
        "under a scheduler whose node policy hears every message (dcs, sb, pb, cc, hybrid, ...)",
    )

    @model_validator(mode="before")
    @classmethod
    def _iters_per_unit_gone(cls, v):
        # Old results folders' scenario.yaml carry "iters_per_unit: null": that still loads.
        if isinstance(v, dict) and "iters_per_unit" in v:
            if v["iters_per_unit"] is not None:
                raise ValueError(
                    "iters_per_unit: removed: a work unit is now 1 ms of the worker's own thread CPU time, "
                    "measured, not a calibrated loop count, so there is nothing to pin; delete the field"
                )
            v = {k: x for k, x in v.items() if k != "iters_per_unit"}
        return v

    @field_validator("tdf")
    @classmethod
    def _tdf_positive(cls, v):
        if v != "auto" and v < 1.0:
            raise ValueError("must be 'auto' or a number >= 1 (real seconds per emulated second)")
        if v != "auto" and v > MAX_TDF:
            raise ValueError(
                f"must be at most {MAX_TDF:g} (real seconds per emulated second), or 'auto'; a larger one "
                "makes every real sleep and timeout overflow"
            )
        return v


class MonitoringConfig(_Model):
    """Live Prometheus metrics (monitoring/): one exporter per node agent and one for the coordinator."""

    enabled: bool = True
    host: str = Field("127.0.0.1", description="address the exporters bind; loopback unless told otherwise")
    port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="null = any free port (many exporters on one host); a number = every exporter binds it "
        "(one node per container or pod, where the port is named 'metrics')",
    )
    scrape_interval_s: float = Field(
        1.0, gt=0, le=60, description="real seconds: Prometheus scrape interval and metric update period"
    )


class ResultsConfig(_Model):
    """What a run writes into its results folder beyond what every run writes."""

    events: Literal["jsonl", "zstd"] = Field(
        "jsonl",
        description="the merged event log: jsonl = events.jsonl, JSON lines; zstd = events.jsonl.zst, the "
        "same lines in zstd frames of 1 MiB each (20x smaller on the NASA replay); `testbed results`, "
        "`report` and `compare` read either",
    )
    parallel_slowdown: Literal["local_users", "always"] = Field(
        "local_users",
        description="the parallel jobs' slowdown against their dedicated run (jobs.csv parallel_slowdown, "
        "summary.json parallel_slowdown_mean / _max): local_users = only in runs with local users' "
        "sessions; always = in every run, so a sweep's variant with no local users has its figure too "
        "(paper 004's 0-user point)",
    )

    def parallel_slowdown_in(self, local_users: bool) -> bool:
        """Whether a run has the parallel slowdown: the one rule for the results and the live gauge."""
        return local_users or self.parallel_slowdown == "always"


class SchedulerConfig(_Model):
    name: str = "gang"
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known(self):
        try:
            registry.get(self.name).check_params(self.params)
        except registry.UnknownScheduler as exc:
            raise ValueError(str(exc)) from None
        except PolicyConfigError as exc:
            raise ValueError(str(exc)) from None
        return self


def _app_union():
    """The type of an ``app:`` section: every registered program kind's config model (apps/registry.py),
    told apart by ``kind`` (absent: the default kind)."""

    def kind_of(v):
        return (v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)) or kinds.DEFAULT

    members = tuple(Annotated[k.Config, Tag(k.name)] for k in kinds.all_kinds())
    return Annotated[Union[members], Discriminator(kind_of)]  # noqa: UP007 - built at run time


AppSection = _app_union()


def _default_app():
    return kinds.get(kinds.DEFAULT).Config()


class JobEntry(_Model):
    id: SafeName | None = Field(None, description="names the job's log files: letters, digits, . _ + = -")
    submit_s: float = Field(0.0, ge=0, description="arrival, emulated seconds after start")
    size: int = Field(..., ge=1)
    job_class: str | None = None
    app: AppSection = Field(default_factory=_default_app)
    estimate_s: float | None = Field(None, gt=0)
    memory_mb: float = Field(
        0.0, ge=0, description="per process, allocated for real by each worker; unset: the profile's, else 0"
    )
    exclusive: bool = False

    def memory(self) -> float:
        """The job's memory per process: explicit, else the program's own for this size (a profile's)."""
        if "memory_mb" not in self.model_fields_set:
            return kinds.get(self.app.kind).memory_mb(self.app, self.size)
        return self.memory_mb


class JobClass(_Model):
    """A kind of job the generator draws: its per-iteration shape; the iteration count follows from the
    drawn duration. With an app profile, sizes are drawn from the profile's process counts within the
    generator's size bounds (uniform over size.min..max if none fits), and memory_mb defaults to the
    profile's for the drawn size."""

    name: str
    weight: float = Field(1.0, gt=0)
    app: AppSection = Field(default_factory=_default_app)
    memory_mb: float | None = Field(None, ge=0, description="per process; null: the profile's, else 0")
    job_memory_mb: float | None = Field(
        None,
        ge=0,
        description="the whole job's memory, split evenly among its processes (a fixed problem's data, as a "
        "NAS class's: per process job_memory_mb / size); instead of memory_mb",
    )

    @model_validator(mode="after")
    def _one_memory(self):
        if self.memory_mb is not None and self.job_memory_mb is not None:
            raise ValueError(
                "job_memory_mb: give memory_mb (per process) or job_memory_mb (the job's, split among its "
                "processes), not both"
            )
        return self

    def memory(self, size: int) -> float:
        if self.memory_mb is not None:
            return self.memory_mb
        if self.job_memory_mb is not None:
            return self.job_memory_mb / size
        return kinds.get(self.app.kind).memory_mb(self.app, size)


class DurationDist(_Model):
    """A generated job's length (ideal run time alone, emulated s). ``profile``: each job keeps its app
    profile's own length (paper 003 table 2's class-A time x profiles.TIME_SCALE) times ``scale``, so
    the lengths differ by class as the NAS kernels' do; ``mean_s`` is then unused."""

    dist: Literal["exponential", "erlang", "fixed", "profile"] = "exponential"
    mean_s: float = Field(2.0, gt=0)
    shape: int = Field(2, ge=1, description="Erlang shape k")
    scale: float = Field(1.0, gt=0, description="with dist profile: multiplies every profile's length")


class SizeDist(_Model):
    min: int = Field(1, ge=1)
    max: int = Field(4, ge=1)

    @model_validator(mode="after")
    def _order(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max}); swap them")
        return self


class PoissonGenerator(_Model):
    kind: Literal["poisson"] = "poisson"
    count: int = Field(..., ge=1, le=100_000)
    mean_interarrival_s: float = Field(..., gt=0)
    duration: DurationDist = Field(default_factory=DurationDist)
    size: SizeDist = Field(default_factory=SizeDist)
    classes: list[JobClass] = Field(default_factory=lambda: [JobClass(name="compute")], min_length=1)
    start_s: float = Field(0.0, ge=0)

    @model_validator(mode="after")
    def _profiles_for_profile_lengths(self):
        if self.duration.dist == "profile":
            bare = [c.name for c in self.classes if not kinds.get(c.app.kind).has_own_length(c.app)]
            if bare:
                raise ValueError(
                    f"duration.dist profile takes each job's length from its program (an app profile, a "
                    f"NAS kernel's class), but class(es) {', '.join(bare)} have none: give them app: "
                    f"{{profile: ...}} or use another dist"
                )
            return self
        # A class's program stretched to the lengths the generator draws must stay a config its kind takes
        # (with_duration bypasses the model): gcomp 1e-9 made a 1 s job 10^12 iterations of a step the
        # simulator counts as no time, and it ran past its wall limit for ever.
        length = self.duration.mean_s * (1 if self.duration.dist == "fixed" else LONG_DRAW)
        for i, c in enumerate(self.classes):
            try:
                stretched = kinds.get(c.app.kind).with_duration(c.app, length)
            except NotImplementedError:
                # Its programs have a length of their own or none the testbed can set (a NAS kernel's
                # class, a user's MPI program): building the workload would fail on the first draw.
                fix = (
                    "use duration: {dist: profile}, their own length"
                    if kinds.get(c.app.kind).has_own_length(c.app)
                    else "list them as workload.jobs, or give the class a kind that can"
                )
                raise ValueError(
                    f"workload.generator.classes.{i}.app.kind: {c.app.kind} programs cannot be stretched to "
                    f"a drawn length (duration.dist {self.duration.dist}); {fix}"
                ) from None
            try:
                type(c.app).model_validate(stretched.model_dump())
            except ValidationError as exc:
                err = exc.errors()[0]
                field = ".".join(str(p) for p in err["loc"]) or "app"
                raise ValueError(
                    f"workload.generator.classes.{i}.app.{field}: a job of {length:g} s (duration.mean_s x "
                    f"{LONG_DRAW:g}, a draw to plan for) makes it {excerpt(err.get('input'))}: {err['msg']}; "
                    "give the program more work per step (gcomp, period_ms), or shorten duration.mean_s"
                ) from None
        return self


class LublinGenerator(_Model):
    """Lublin and Feitelson's model of rigid parallel jobs (J. Parallel Distrib. Comput. 63(11), 2003),
    with the paper's parameters (testbed/scenario/lublin.py): sizes from a two-stage uniform of log2(size)
    with serial jobs and a stress on powers of two, run times from a hyper-gamma of log(run time) whose
    mix follows the size, arrivals with the daily cycle. Its times are a production machine's (hours):
    ``time_scale`` brings them to an emulation's."""

    kind: Literal["lublin"]
    count: int = Field(..., ge=1, le=100_000)
    job_types: Literal["all", "split"] = Field(
        "all",
        description="all: the model fitted to all jobs; split: batch and interactive jobs, each with its "
        "own parameters (job_class batch or interactive)",
    )
    time_scale: float = Field(
        1.0,
        gt=0,
        le=MAX_TIME_SCALE,
        description="multiplies arrival times and run times (0.001: hours become seconds)",
    )
    arrival_scale: float = Field(
        1.0,
        gt=0,
        le=MAX_TIME_SCALE,
        description="multiplies arrival times only: below 1 packs the same jobs closer (more load)",
    )
    start_hour: int = Field(8, ge=0, le=23, description="the time of day the arrivals start at")
    step_s: float = Field(
        60.0, ge=0.001, description="emulated seconds of compute per iteration, at most (1 ms: a work unit)"
    )
    estimate: Literal["runtime", "none"] = Field(
        "runtime", description="what backfilling is told: the drawn run time, or nothing"
    )
    app: AppSection = Field(default_factory=_default_app)


def _generator_kind(v):
    return (v.get("kind") if isinstance(v, dict) else getattr(v, "kind", None)) or "poisson"


#: ``workload.generator``: Poisson arrivals over job classes (the default), or the Lublin-Feitelson model.
Generator = Annotated[
    Union[Annotated[PoissonGenerator, Tag("poisson")], Annotated[LublinGenerator, Tag("lublin")]],  # noqa: UP007
    Discriminator(_generator_kind),
]

_GENERATORS = {"poisson": PoissonGenerator, "lublin": LublinGenerator}

#: What a trace does with a job wider than the cluster (``workload.trace.oversize``).
TraceOversize = Literal["refuse", "clamp", "drop", "reject"]


class TraceReplay(_Model):
    """Jobs replayed from an SWF trace (testbed/scenario/swf.py): each trace job's arrival, size and run time,
    scaled, running ``app`` (its length set from the trace: ``ceil(run / step_s)`` iterations computing
    the run time in all, at rate 1.0; the app's other fields, such as a barrier per iteration, kept)."""

    path: str = Field(..., description="the .swf or .swf.gz file; relative to the scenario file's folder")
    # Bounded: the trace is read through itertools.islice, which takes at most sys.maxsize (a skip of 2^64
    # was a ValueError traceback); no trace of the Parallel Workloads Archive has a billion jobs.
    skip: int = Field(0, ge=0, le=MAX_TRACE_JOBS, description="trace jobs skipped first")
    count: int | None = Field(
        None, ge=1, le=MAX_TRACE_JOBS, description="jobs replayed after the skipped ones (null: all)"
    )
    time_scale: float = Field(
        1.0, gt=0, le=MAX_TIME_SCALE, description="multiplies arrival times and run times"
    )
    arrival_scale: float = Field(
        1.0,
        gt=0,
        le=MAX_TIME_SCALE,
        description="multiplies arrival times only: below 1 packs the same jobs closer (more load)",
    )
    size_scale: float = Field(
        1.0, gt=0, description="multiplies each job's processors (at least 1, at most the cluster)"
    )
    step_s: float = Field(
        60.0, ge=0.001, description="emulated seconds of compute per iteration, at most (1 ms: a work unit)"
    )
    estimate: Literal["requested", "runtime", "none"] = Field(
        "requested",
        description="what backfilling is told: the user's requested time, the real run time, or nothing",
    )
    status: list[int] | None = Field(
        None,
        description="keep only jobs whose SWF status (field 11) is one of these: 1 completed, 0 failed, "
        "5 cancelled, -1 unknown (null: every job)",
    )
    oversize: TraceOversize = Field(
        "refuse",
        description="a job wider than the cluster (after size_scale): refuse the trace (the default), clamp "
        "it to the cluster, drop it, or reject: submit it as it is for the scheduler to reject",
    )
    app: AppSection = Field(default_factory=_default_app)
    job_class: str = "trace"


class WorkloadConfig(_Model):
    seed: int = Field(0, ge=0, le=MAX_SEED, description="the random draws' seed (numpy takes 0..2^63-1 here)")
    jobs: list[JobEntry] = Field(default_factory=list)
    generator: Generator | None = Field(
        None, description="generated jobs: kind poisson (the default) or lublin (the Lublin-Feitelson model)"
    )
    oversize: Literal["refuse", "reject"] = Field(
        "refuse",
        description="a job in workload.jobs wider than the cluster: refuse the scenario (the default), or "
        "reject: run it for the scheduler to reject, as a real cluster would",
    )
    trace: TraceReplay | None = None
    divisible: DivisibleTasks | None = Field(
        None, description="paper 001's divisible-load tasks (testbed/scenario/divisible.py)"
    )
    local_users: list[LocalUsers] = Field(
        default_factory=list,
        description="paper 004's local users: sessions on the nodes named, started there at once, "
        "bypassing the scheduler (testbed/scenario/localusers.py)",
    )

    @model_validator(mode="after")
    def _not_empty(self):
        if (
            not self.jobs
            and self.generator is None
            and self.trace is None
            and self.divisible is None
            and not self.local_users
        ):
            raise ValueError(
                "no jobs: give workload.jobs (a list), workload.generator, workload.trace, "
                "workload.divisible or workload.local_users"
            )
        # The ids as the workload names them (testbed/scenario/workload.py): an unnamed job is j<i>, a
        # generated one j<jobs + k>; a given id may not take a name the workload gives another job.
        ids = [j.id or f"j{i}" for i, j in enumerate(self.jobs)]
        if self.generator is not None:
            ids += [f"j{len(self.jobs) + k}" for k in range(self.generator.count)]
        ids += local_user_ids(self.local_users)
        seen: set[str] = set()
        dup = sorted({i for i in ids if i in seen or seen.add(i)})
        if dup:
            raise ValueError(
                f"duplicate job id(s) {', '.join(map(cut, dup[:5]))}; give every job its own id "
                "(unnamed jobs are j<position>, generated ones follow them)"
            )
        return self


class FaultEvent(_Model):
    at_s: float = Field(..., ge=0, description="emulated seconds after start")
    node: int = Field(..., ge=0)
    kind: FaultKind = Field(..., description="down: the node fails (its processes die); up: back")


class FaultsConfig(_Model):
    """Node failures: scripted ones (``script``), and what becomes of the jobs running on a node that
    goes down, scripted or not (an agent that dies): ``fail`` them, or ``requeue`` them to start again
    from the beginning."""

    on_node_down: OnNodeDown = OnNodeDown.FAIL
    script: list[FaultEvent] = Field(default_factory=list)

    def faults(self) -> list[Fault]:
        return [Fault(f.at_s, f.node, f.kind) for f in self.script]


# --------------------------------------------------------------------------------------------------------
# The sweep section's shape (the model's validators); its expansion into variants is testbed/scenario/sweep.py

#: Names a variant cannot take: they are the sweep's own outputs in the results folder.
RESERVED = {"plots", "comparison.csv", "scenario.yaml"}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")
_KEY_RE = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")


def check_name(name: str) -> str:
    if not _NAME_RE.match(name) or len(name) > 80:
        raise ValueError(
            f"variant name {excerpt(name)} is not usable as a folder name; use letters, digits and . _ + = - "
            "(up to 80 characters, starting with a letter or digit)"
        )
    if name in RESERVED:
        raise ValueError(f"variant name {excerpt(name)} is taken by the sweep's own output; pick another")
    return name


def check_keys(sets: dict[str, Any]) -> dict[str, Any]:
    if not sets:
        raise ValueError("empty: give the keys this variant changes, e.g. {scheduler.name: batch}")
    for key in sets:
        if not _KEY_RE.match(key):
            raise ValueError(
                f"key {excerpt(key)} is not a dotted field path such as scheduler.params.quantum_ms"
            )
        if key.split(".")[0] == "sweep":
            raise ValueError(f"key {excerpt(key)}: a variant cannot change the sweep itself")
    return sets


def check_variants(vs: list[SweepVariant] | None) -> list[SweepVariant] | None:
    if vs is None:
        return None
    if not vs:
        raise ValueError("no variants; list some or remove 'sweep'")
    names = [v.name for v in vs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(
            f"duplicate variant name(s) {', '.join(map(cut, dup[:5]))}; give every variant its own name"
        )
    return vs


def _slug(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return re.sub(r"[^A-Za-z0-9._+=-]+", "_", text).strip("_") or "x"


def grid(spec: dict[str, Any]) -> list[dict]:
    """``{key: [values], ...}`` -> named variants, the cartesian product in key order. A string value names
    itself (``batch``); any other value is named with its key's last part (``quantum_ms100``); the parts
    of one variant's name are joined with ``-``."""
    if not spec:
        raise ValueError("empty grid; give {dotted.key: [values]} or a list of named variants")
    keys, lists = [], []
    for key, values in spec.items():
        if not isinstance(values, list):
            raise ValueError(
                f"grid key {excerpt(key)}: give a list of values, e.g. {{{cut(str(key))}: [a, b]}} "
                f"(got {type(values).__name__})"
            )
        if not values:
            raise ValueError(f"grid key {excerpt(key)}: the list of values is empty")
        keys.append(str(key))
        lists.append(values)
    check_keys(dict.fromkeys(keys))
    out = []
    for combo in itertools.product(*lists):
        parts = []
        for key, value in zip(keys, combo, strict=True):
            last = key.rsplit(".", 1)[-1]
            if isinstance(value, str):
                parts.append(_slug(value))
            elif isinstance(value, dict | list):
                parts.append(f"{last}{lists[keys.index(key)].index(value) + 1}")
            else:
                parts.append(f"{last}{_slug(value)}")
        out.append({"name": "-".join(parts), "set": dict(zip(keys, combo, strict=True))})
    names = [v["name"] for v in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(
            f"the grid gives two variants the name(s) {', '.join(map(cut, dup[:5]))}; "
            "list named variants instead"
        )
    return out


def normalize(raw: Any) -> Any:
    """The ``sweep`` section as given -> a list of ``{name, set}`` (a grid is expanded); other shapes pass
    through for the model to reject."""
    if isinstance(raw, dict):
        return grid(raw)
    return raw


class SweepVariant(_Model):
    """One variant of a sweep: the base scenario with ``set`` (dotted key -> value) applied exactly like
    ``--set`` overrides. The expansion, checks and comparison live in :mod:`testbed.scenario.sweep`."""

    name: Annotated[str, AfterValidator(check_name)] = Field(
        ..., description="the variant's results folder and its row in comparison.csv"
    )
    set: Annotated[dict[str, Any], AfterValidator(check_keys)] = Field(
        ..., description="dotted key -> value, e.g. scheduler.name"
    )


#: A scenario's sweep: a grid is expanded into named variants first, then the names are checked.
Sweep = Annotated[list[SweepVariant] | None, BeforeValidator(normalize), AfterValidator(check_variants)]


class Scenario(_Model):
    name: BoundedName = "scenario"
    description: str = ""
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    clock: ClockConfig = Field(default_factory=ClockConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    workload: WorkloadConfig
    duration_s: float | None = Field(
        None, gt=0, description="emulated seconds; jobs unfinished then are killed; null = until all end"
    )
    wall_limit_s: float = Field(1800.0, gt=0, description="real-time guard for the whole run")
    repetitions: int = Field(1, ge=1, le=1000)
    repetition_seeds: Literal["auto", "vary", "same"] = Field(
        "auto",
        description="the workload seed of repetition k (0, 1, ...): vary = workload.seed + k; same = "
        "workload.seed for all (real processes then measure the host's noise); auto = vary in the "
        "simulator (deterministic: one seed would repeat one run), same on real processes",
    )
    monitoring: MonitoringConfig = Field(default_factory=MonitoringConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    results: ResultsConfig = Field(default_factory=ResultsConfig)
    sweep: Annotated[
        list[SweepVariant] | None, BeforeValidator(normalize), AfterValidator(check_variants)
    ] = Field(
        None,
        description="variants run on the same workload and compared (testbed.scenario.sweep): a list of "
        "{name, set: {dotted.key: value}} or a grid {dotted.key: [values]} (cartesian product)",
    )

    @model_validator(mode="after")
    def _sizes(self):
        # What a program kind finds wrong names the kind's own field and fix (a vision job's stages), so
        # it comes before the generic check that a job is wider than the cluster.
        self._check_apps()
        self._check_oversize()
        if self.workload.seed + self.repetitions - 1 > MAX_SEED:
            raise ValueError(
                f"workload.seed: {self.workload.seed} + {self.repetitions - 1} repetitions is above "
                f"{MAX_SEED}, the largest seed; lower it"
            )
        g = self.workload.generator
        if isinstance(g, PoissonGenerator) and g.size.max > self.cluster.nodes:
            raise ValueError(
                f"workload.generator.size.max ({g.size.max}) is above cluster.nodes ({self.cluster.nodes}); "
                "lower it or add nodes"
            )
        if self.cluster.ray_address is not None and self.cluster.quota_tick_us:
            # The ticks must run on the hosts of the nodes, which this driver does not start.
            raise ValueError(
                "cluster.quota_tick_us: only for a cluster this run starts (no cluster.ray_address); "
                "set it to 0, or leave cluster.ray_address out"
            )
        if self.cluster.ray_address is not None and self.clock.tdf == "auto":
            # "auto" divides the emulated CPUs by this host's cores, which do not run the nodes then.
            raise ValueError(
                "clock.tdf: 'auto' cannot be used with cluster.ray_address (the nodes run on other hosts); "
                "give the dilation as a number: 1 when every emulated CPU has a real core of its own"
            )
        for i, u in enumerate(self.workload.local_users):
            bad = [n for n in u.nodes if n >= self.cluster.nodes]
            if bad:
                raise ValueError(
                    f"workload.local_users.{i}.nodes: node(s) {bad} do not exist (nodes 0.."
                    f"{self.cluster.nodes - 1}); name nodes of the cluster"
                )
        if self.scheduler.params.get("memory_pool") is not None:
            # M_D is a fraction of the smallest node's memory: without every node's, or with the check
            # off, the pool would silently hold nothing back.
            if any(i.memory_mb is None for i in self.cluster.node_info()):
                raise ValueError(
                    "scheduler.params.memory_pool: needs every node's memory; give cluster.memory_mb (or "
                    "each group's memory_mb), or remove memory_pool"
                )
            if self.scheduler.params.get("memory_aware") is False:
                raise ValueError(
                    "scheduler.params.memory_pool: acts only with memory_aware true; remove one of the two"
                )
        d = self.workload.divisible
        if d is not None and d.nodes is not None and d.nodes > self.cluster.nodes:
            raise ValueError(
                f"workload.divisible.nodes ({d.nodes}) is above cluster.nodes ({self.cluster.nodes}); "
                "lower it or add nodes"
            )
        state: dict[int, str] = {}
        for i, f in sorted(enumerate(self.faults.script), key=lambda e: (e[1].at_s, e[0])):
            where = f"faults.script.{i}"
            if f.node >= self.cluster.nodes:
                raise ValueError(
                    f"{where}.node: node {f.node} does not exist (nodes 0..{self.cluster.nodes - 1})"
                )
            if state.get(f.node, "up") == f.kind:
                raise ValueError(
                    f"{where}: node {f.node} is already {f.kind} at {f.at_s:g} s; "
                    "each node alternates down and up"
                )
            state[f.node] = f.kind
        return self

    def _check_oversize(self) -> None:
        """A job wider than the cluster can never run: a mistake in the file unless the scenario asks for
        the scheduler's rejection (``workload.oversize: reject``)."""
        if self.workload.oversize == "reject":
            return
        nodes = self.cluster.nodes
        for i, e in enumerate(self.workload.jobs):
            if e.size > nodes:
                raise ValueError(
                    f"workload.jobs.{i}.size: {e.size} is above cluster.nodes ({nodes}), so the job can "
                    "never run; lower it, add nodes, or set workload.oversize: reject to have the scheduler "
                    "reject it"
                )

    def _check_apps(self) -> None:
        """What each program kind finds wrong with its config on this cluster (``ProgramKind.problems``),
        and a job size that contradicts the one its program fixes; each names its field."""
        nodes, rate = self.cluster.nodes, self.cluster.min_rate()
        apps: list[tuple[str, Any, int | None]] = [
            (f"workload.jobs.{i}", e.app, e.size) for i, e in enumerate(self.workload.jobs)
        ]
        g = self.workload.generator
        if isinstance(g, PoissonGenerator):
            apps += [(f"workload.generator.classes.{i}", c.app, None) for i, c in enumerate(g.classes)]
        elif g is not None:
            apps.append(("workload.generator", g.app, None))
        for where, app, size in apps:
            kind = kinds.get(app.kind)
            for field, what in kind.problems(app, nodes, rate):
                raise ValueError(f"{where}.app.{field}: {what}")
            wrong = None if size is None else kind.size_problem(app, size)
            if wrong is not None:
                raise ValueError(f"{where}.size: {size}: {wrong}")
            fixed = kind.fixed_size(app)
            if fixed is not None and size is not None and size != fixed:
                raise ValueError(
                    f"{where}.size: {size}, but its {app.kind} program has {fixed} processes; "
                    f"set size: {fixed}"
                )


# --------------------------------------------------------------------------------------------------------
# Loading, overrides, error messages


def _fields_of(model: type[BaseModel], loc: tuple) -> list[str]:
    """Known field names at ``loc`` for an 'extra field' message."""
    cur: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if part in kinds.names() and part not in getattr(cur, "model_fields", {}):
            cur = kinds.get(part).Config  # the tag of an app section: that kind's fields
            continue
        if part in _GENERATORS and part not in getattr(cur, "model_fields", {}):
            cur = _GENERATORS[part]  # the tag of a generator: that generator's fields
            continue
        fld = getattr(cur, "model_fields", {}).get(part)
        if fld is None:
            return []
        ann = fld.annotation
        for cand in (ann, *getattr(ann, "__args__", ())):
            for sub in (cand, *getattr(cand, "__args__", ())):
                if isinstance(sub, type) and issubclass(sub, BaseModel):
                    cur = sub
                    break
    return sorted(getattr(cur, "model_fields", {}))


#: The location part pydantic gives each member of a union (not a field the user wrote).
_UNION_MEMBER = re.compile(
    r"^(float|int|str|bool|none|(literal|list|dict|tuple|set)\[.*\]|function-\w+\[.*\]|constrained-\w+)$"
)


#: Errors about a field's name, whose location's last part is the name the user wrote.
_FIELD_ERRORS = ("extra_forbidden", "missing")


def _format_errors(exc: ValidationError) -> list[str]:
    lines = []
    kind_names = set(kinds.names())
    for err in exc.errors():
        raw = err["loc"]
        # A generator's kind tag ("poisson") and an app section's ("synthetic") sit in the location of their
        # errors: not fields the user wrote.
        loc = tuple(
            p
            for i, p in enumerate(raw)
            if not (
                i
                and (
                    (p in ("poisson", "lublin") and raw[i - 1] == "generator")
                    or (p in kind_names and raw[i - 1] == "app")
                )
            )
        )
        # A union's member told apart by the value's shape (a vision job's work_units: a number or a list)
        # sits inside the location of an error in that member: not a field the user wrote.
        loc = tuple(
            p for i, p in enumerate(loc) if not (0 < i < len(loc) - 1 and _UNION_MEMBER.match(str(p)))
        )
        # A value that fits no member of a union (a number or 'auto') gets an error per member, each with
        # the member's type in its location: one field, so one line.
        while len(loc) > 1 and err["type"] not in _FIELD_ERRORS and _UNION_MEMBER.match(str(loc[-1])):
            loc = loc[:-1]
        where = ".".join(cut(str(p)) for p in loc) or "(top level)"  # a key is the user's text
        if lines and lines[-1].startswith(f"{where}: ") and len(loc) < len(raw):
            lines[-1] += f"; or {err['msg'].removeprefix('Value error, ')}"
            continue
        if err["type"] == "union_tag_invalid" and loc[-1:] == ("generator",):
            known = ", ".join(_GENERATORS)
            tag = excerpt(err["ctx"]["tag"])
            lines.append(f"{where}.kind: unknown generator kind {tag}; known kinds: {known}")
        elif err["type"] == "union_tag_invalid":
            known = ", ".join(kinds.names())
            tag = excerpt(err["ctx"]["tag"])
            lines.append(f"{where}.kind: unknown program kind {tag}; known kinds: {known} (`testbed apps`)")
        elif err["type"] == "extra_forbidden":
            known = _fields_of(Scenario, err["loc"])
            near = difflib.get_close_matches(str(loc[-1]), known, n=1)
            hint = f"did you mean '{near[0]}'? " if near else ""
            lines.append(f"{where}: unknown field; {hint}known fields here: {', '.join(known)}")
        elif err["type"] == "missing":
            lines.append(f"{where}: required field is missing; add it")
        else:
            msg = err["msg"].removeprefix("Value error, ")
            got = err.get("input")
            shown = "" if isinstance(got, dict | list) or got is None else f" (got {excerpt(got)})"
            # A model-level check may name a deeper field itself ("scheduler.name: ..."), one line each
            # ("scheduler.params.mpl: ...", a line per bad parameter).
            named = re.match(r"^[\w.]+: ", msg) and (not loc or msg.startswith(where))
            lines.extend(f"{msg}{shown}".splitlines() if named else [f"{where}: {msg}{shown}"])
    return lines


def parse_override(text: str) -> tuple[list[str], Any]:
    if "=" not in text:
        raise ScenarioError(f"--set {excerpt(text)}: expected KEY=VALUE, e.g. --set scheduler.name=batch")
    key, _, raw = text.partition("=")
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ScenarioError(f"--set {excerpt(text)}: empty key; e.g. --set workload.seed=7")
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ScenarioError(
            f"--set {cut(key)}: value {excerpt(raw)} is not valid YAML ({_yaml_problem(exc)})"
        ) from None
    return path, value


def apply_override(doc: dict, path: list[str], value: Any) -> None:
    cur: Any = doc
    for i, part in enumerate(path[:-1]):
        where = ".".join(path[: i + 1])
        if isinstance(cur, list):
            if not part.isdigit() or int(part) >= len(cur):
                raise ScenarioError(
                    f"--set {cut('.'.join(path))}: {cut(where)} is not an index into a list of {len(cur)}"
                )
            cur = cur[int(part)]
            continue
        if part not in cur or cur[part] is None:
            cur[part] = {}
        cur = cur[part]
        if not isinstance(cur, dict | list):
            raise ScenarioError(f"--set {cut('.'.join(path))}: {cut(where)} is a value, not a section")
    last = path[-1]
    if isinstance(cur, list):
        if not last.isdigit() or int(last) >= len(cur):
            raise ScenarioError(
                f"--set {cut('.'.join(path))}: {excerpt(last)} is not an index into a list of {len(cur)}"
            )
        cur[int(last)] = value
    else:
        cur[last] = value


def _yaml_problem(exc: Exception) -> str:
    """One line for a YAML error: what is wrong and where (PyYAML's own text spans several lines)."""
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or getattr(exc, "context", None)
    mark = getattr(exc, "problem_mark", None)
    if problem is None:
        problem = str(exc) if type(exc) is yaml.YAMLError else f"{type(exc).__name__}: {exc}"
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    if mark is None and getattr(exc, "position", None) is not None:
        at = f" at character {exc.position}"
    return " ".join(f"{problem}{at}".split())


#: The largest scenario file read (a 10,000-job explicit workload is about 0.7 MB): anything bigger is a
#: mistake, and parsing it would take minutes.
MAX_SCENARIO_BYTES = 4 * 2**20
#: YAML aliases (``*name``) allowed in one document: enough to reuse a few sections, too few for an alias
#: bomb (nested aliases that expand to billions of nodes once anything walks the document).
MAX_ALIASES = 16


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing duplicate keys (the last would silently win) and more than
    :data:`MAX_ALIASES` aliases."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(
                    f"more than {MAX_ALIASES} aliases (*name) at line {mark.line + 1}; write the sections out"
                )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
                seen[key] = line
            except TypeError:
                continue  # an unhashable key: construct_mapping says so below
            if first is not None:
                where = f"line {line}" if first == line else f"lines {first} and {line}"
                raise yaml.YAMLError(f"duplicate key {excerpt(key)} at {where}; keep one")
        return super().construct_mapping(node, deep)


def load_yaml(text: str):
    """One YAML document, read strictly (:class:`_StrictLoader`)."""
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def read_doc(p: Path) -> dict:
    """The YAML document of scenario file ``p``; every way it can be unusable is one ScenarioError line."""
    if not p.exists():
        raise ScenarioError(f"scenario file {p} does not exist")
    if p.is_dir():
        inside = sorted(q.name for q in p.glob("*.yaml"))[:5]
        hint = f" (it holds {', '.join(inside)})" if inside else ""
        raise ScenarioError(f"scenario file {p} is a directory; give a YAML file{hint}")
    st = p.stat()
    if not stat.S_ISREG(st.st_mode):
        raise ScenarioError(f"scenario file {p} is not a regular file (a device or a pipe); give a YAML file")
    if st.st_size > MAX_SCENARIO_BYTES:
        raise ScenarioError(
            f"scenario file {p} is {st.st_size / 2**20:.1f} MiB, over the {MAX_SCENARIO_BYTES // 2**20} MiB "
            "a scenario may have; generate large workloads (workload.generator, workload.trace)"
        )
    try:
        text = p.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(
            f"{p}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "save the scenario as UTF-8"
        ) from None
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read it: {exc.strerror or exc}") from None
    try:
        doc = load_yaml(text)
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as exc:
        # ValueError: a scalar YAML resolves but Python refuses (a date such as 2024-13-01).
        raise ScenarioError(f"{p}: not valid YAML: {_yaml_problem(exc)}") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ScenarioError(f"{p}: the top level must be a mapping (cluster:, scheduler:, workload: ...)")
    doc.setdefault("name", p.stem)
    return doc


def from_file_or_doc(
    path: str | Path | None = None, overrides: list[str] = (), doc: dict | None = None
) -> Scenario:
    """The validated scenario from a file (or ``doc``) with ``--set`` overrides applied; anything wrong
    with it raises :class:`ScenarioError` naming the field and the fix. Its sweep's variants are checked
    by :func:`testbed.scenario.load`, which also expands them."""
    if doc is None:
        doc = read_doc(Path(path))
    elif not isinstance(doc, dict):
        raise ScenarioError("the top level must be a mapping (cluster:, scheduler:, workload: ...)")
    doc = copy.deepcopy(doc)  # overrides must not leak into the caller's document
    for text in overrides:
        apply_override(doc, *parse_override(text))
    _resolve_trace(doc, Path(path).parent if path is not None else Path.cwd())
    _resolve_programs(doc, Path(path).parent if path is not None else Path.cwd())
    try:
        scn = Scenario.model_validate(doc)
    except ValidationError as exc:
        raise ScenarioError.listing("invalid scenario", _format_errors(exc)) from None
    return scn


def _resolve_trace(doc: dict, base: Path) -> None:
    """A trace path is relative to the scenario file's folder (the working directory without a file);
    it must name a file."""
    trace = (doc.get("workload") or {}).get("trace") if isinstance(doc.get("workload"), dict) else None
    if not isinstance(trace, dict) or not isinstance(trace.get("path"), str):
        return
    try:
        full = (base / trace["path"]).resolve()
        found = full.is_file()
    except (OSError, ValueError) as exc:
        # A path the OS cannot even look up: longer than it allows (ENAMETOOLONG), or a NUL byte in it.
        raise ScenarioError(
            f"workload.trace.path: {_unusable_path(exc)} ({len(trace['path'])} characters); give the path of "
            "an SWF trace (.swf or .swf.gz)"
        ) from None
    if not found:
        raise ScenarioError(
            f"workload.trace.path: no file {cut_path(str(full))}; give an SWF trace (.swf or .swf.gz)"
        )
    trace["path"] = str(full)


def _unusable_path(exc: OSError | ValueError) -> str:
    """Why the OS refused to look up a path, in a few words (the error's own text repeats the path)."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"the system refuses it: {exc.strerror.lower()}"
    return f"the system refuses it: {exc}"


def _mappings(seq: object) -> list[dict]:
    """The mappings in a list; anything that is not a list is the validator's to name (``jobs: true``)."""
    return [e for e in seq if isinstance(e, dict)] if isinstance(seq, list) else []


def _resolve_programs(doc: dict, base: Path) -> None:
    """An ``app.program`` (the mpi kind's user program) is relative to the scenario file's folder, as a
    trace path is: made absolute here, because ranks run in their node's folder. Whether the file exists
    is the kind's check (``ProgramKind.problems``), which names the field."""
    wl = doc.get("workload")
    if not isinstance(wl, dict):
        return
    apps = [e.get("app") for e in _mappings(wl.get("jobs"))]
    gen = wl.get("generator")
    if isinstance(gen, dict):
        apps += [c.get("app") for c in _mappings(gen.get("classes"))]
        apps.append(gen.get("app"))
    for app in apps:
        if isinstance(app, dict) and isinstance(app.get("program"), str):
            try:
                app["program"] = str((base / app["program"]).resolve())
            except ValueError:
                pass  # a NUL byte in it: the kind finds no such file and says so, naming the field


def control_reserve(scn: Scenario) -> float:
    """Host cores the automatic TDF leaves to the control plane: the scenario's, else by whether the
    scheduler's node policy hears every message (testbed/core/clock.py says what each was measured on)."""
    if scn.clock.control_reserve_cores is not None:
        return scn.clock.control_reserve_cores
    if registry.get(scn.scheduler.name).local_policy.wants_message_events:
        return CONTROL_RESERVE_MESSAGES_CORES
    return CONTROL_RESERVE_CORES


def effective_tdf(scn: Scenario, cores: int | None = None) -> float:
    """The run's TDF: the scenario's, or with ``tdf: auto`` the emulated CPUs over the host's cores less
    the control plane's reserve."""
    if scn.clock.tdf == "auto":
        return auto_tdf(scn.cluster.total_rate(), cores, control_reserve(scn))
    return float(scn.clock.tdf)
