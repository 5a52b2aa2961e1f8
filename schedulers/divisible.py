"""Real-time divisible-load scheduling (paper 001; docs/policies.md, "Divisible load").

A task T = (A, sigma, D) is a load of sigma units of data that can be split at will. A head node sends each
of the task's n nodes its chunk, one chunk after another; a node computes its chunk once it has arrived;
no output is sent back and a task is never preempted. Sending a unit costs Cms, computing it Cps; each
chunk's transmission costs ST more and each node's computation SC more (setup costs).

This module is the policies' model of such a task, pure and deterministic:

* the optimal partition rule (all nodes finish together) and the execution time E(n), with and without
  setup costs (:func:`shares`, :func:`exec_time`);
* the fastest number of nodes (:func:`fastest`): E(n) falls exactly while the last share alpha_n stays
  positive, so it is the largest n whose last share is positive (N without setup costs);
* the minimum number of nodes that meets a deadline from a given start (:func:`n_min`): in closed form
  without a link setup cost, by a scan with one;
* the cost n * E(n) and the cost derivative at n_min (:func:`cost_derivative`);
* the schedulability test over the list of times at which nodes become free (:func:`plan`), with MCDF's
  order (largest cost derivative first) or FIFO's or EDF's, and the number of nodes n_min or "all";

* a cluster manager's admission test for the FIFO and EDF baselines (:func:`queue_plan`): one queue in
  their order, each task on the nodes it asked for at arrival, none overtaking;

and the seven schedulers built on it: ``mcdf`` (the walk, largest cost derivative first), ``fifo-an``,
``fifo-mn``, ``edf-an``, ``edf-mn`` (the queue by default; ``admission_test: walk`` runs MCDF's walk in
their order), ``fifo-anna`` and ``edf-anna`` (all nodes, no admission test: every task runs, late or
not).

Choices the paper leaves open, made here (docs/policies.md says where):

* The cost derivative at n_min is W(n_min + 1) - W(n_min), W(n) = n * E(n). When n_min + 1 is not a valid
  number of nodes (beyond N, or its last share would not be positive), the paper leaves it undefined;
  here it is +infinity: such a task cannot be given a node more should its start slip, so it is the most
  urgent to place. Ties (two infinities) go by deadline, then arrival, then job id.
* "All nodes" (AN, ANNA) is by default the number of nodes of the shortest execution, :func:`fastest`: all
  N without setup costs, fewer with them (reading the paper's footnote 1 as a note on "all nodes": with
  setup costs, all N nodes are slower). ``all_nodes: every`` reads "all nodes" literally: the task holds
  every node it may use and computes on the fastest number of them (the others get an empty chunk). The
  two differ only with a link setup cost; docs/policies.md gives both readings' results.
* The baselines' admission test is not given in the paper, which calls them the "popular algorithms" of
  cluster managers. By default (``admission_test: queue``) it is a cluster manager's: a job asks for its
  nodes when it arrives (all, or n_min from its arrival) and keeps them; the queue starts in FIFO or EDF
  order without overtaking. ``admission_test: walk`` (the reading before issue 25) runs MCDF's walk with
  the order replaced: sized n_min at each time, and a later task may start where an earlier one does
  not fit yet.
* Tasks arriving at one instant are all tested before any is dispatched (``batch: joint``, the paper's
  MCDF() loop: a task admitted may be re-planned by the next test of its batch); the dispatch is a
  tick() at that instant. ``batch: each`` dispatches a task as soon as it is admitted.
* A task that cannot meet its deadline even alone on the whole idle cluster is rejected at arrival with
  that reason, by all seven schedulers (ANNA included: it is bad input, not a scheduling decision).
* Plans are made at arrivals (the paper's algorithm); a task that finishes earlier or later than planned
  (on real processes) frees its nodes when it really ends: a task due to start waits for its nodes.

Deadline comparisons allow ``TOL`` (relative): E(n) <= A + D - s holds when the two sides differ by
rounding only.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from .base import GlobalAction, GlobalPolicy, JobSpec, Reject, RunAll, Scheduler, Start
from .params import param
from .placement import MemoryAwareParams, NodeMemory, pack

#: Relative tolerance of a deadline comparison (floating-point rounding of E(n) and of the start time).
TOL = 1e-9

ORDERS = ("mcdf", "fifo", "edf")
SIZINGS = ("min", "all")


def _fits(duration: float, available: float) -> bool:
    return duration <= available + TOL * max(1.0, abs(available))


# --------------------------------------------------------------------------------------------------------
# The divisible-load model


@dataclass(frozen=True)
class Load:
    """A task's load and costs: ``sigma`` units of data; ``cms`` / ``cps`` emulated seconds to send /
    compute one unit; ``st`` per chunk sent, ``sc`` per node's computation."""

    sigma: float
    cms: float
    cps: float
    st: float = 0.0
    sc: float = 0.0

    def __post_init__(self) -> None:
        for name in ("sigma", "cms", "cps"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and v > 0 and math.isfinite(v)):
                raise ValueError(f"{name}: must be a finite number > 0, got {v!r}")
        for name in ("st", "sc"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and v >= 0 and math.isfinite(v)):
                raise ValueError(f"{name}: must be a finite number >= 0, got {v!r}")
        problem = cost_ratio_problem(self.cms, self.cps)
        if problem:
            raise ValueError(problem)

    @property
    def beta(self) -> float:
        return self.cps / (self.cms + self.cps)

    @property
    def delta(self) -> float:
        return self.st / (self.sigma * (self.cms + self.cps))


#: Cps / Cms, and Cms / Cps, at most this: beta = Cps / (Cms + Cps) must stay strictly between 0 and 1 in
#: floating point (1e300 / (1 + 1e300) is exactly 1.0, and E(n) divides by 1 - beta^n).
MAX_COST_RATIO = 1e12


def cost_ratio_problem(cms: float, cps: float) -> str | None:
    """What is wrong with the pair (Cms, Cps) for the model, or None."""
    if cps > cms * MAX_COST_RATIO or cms > cps * MAX_COST_RATIO:
        return (
            f"cms {cms:g} and cps {cps:g} differ by more than {MAX_COST_RATIO:g} times, beyond what the "
            "model computes (beta = cps / (cms + cps) rounds to 0 or 1); bring them closer"
        )
    return None


def first_share(load: Load, n: int) -> float:
    """alpha_1 = B(n), the first node's share on ``n`` nodes:
    (1 - beta) / (1 - beta^n) + delta * (n / (1 - beta^n) - 1 / (1 - beta))."""
    if n < 1:
        raise ValueError(f"n: needs at least 1 node, got {n}")
    b, d = load.beta, load.delta
    bn = 1.0 - b**n
    return (1.0 - b) / bn + d * (n / bn - 1.0 / (1.0 - b))


def shares(load: Load, n: int) -> list[float]:
    """alpha_1..alpha_n on ``n`` nodes by the optimal partition rule (all finish together):
    alpha_{j+1} = beta * alpha_j - delta; they sum to 1. Past :func:`fastest` the last ones are <= 0 and
    the partition is not a real one."""
    b, d = load.beta, load.delta
    out = [first_share(load, n)]
    for _ in range(n - 1):
        out.append(b * out[-1] - d)
    return out


def last_share(load: Load, n: int) -> float:
    """alpha_n on ``n`` nodes: beta^(n-1) * alpha_1 - delta * (1 - beta^(n-1)) / (1 - beta)."""
    b = load.beta
    bk = b ** (n - 1)
    return bk * first_share(load, n) - load.delta * (1.0 - bk) / (1.0 - b)


def exec_time(load: Load, n: int) -> float:
    """E(n) = ST + SC + sigma * (Cms + Cps) * B(n): when every node of the task has finished, from its
    start. Without setup costs this is sigma * Cms / (1 - beta^n)."""
    return load.st + load.sc + load.sigma * (load.cms + load.cps) * first_share(load, n)


def fastest(load: Load, nodes: int) -> int:
    """The number of nodes (at most ``nodes``) of the shortest execution: the largest n whose last share is
    positive (E(n) falls exactly while it is; where it reaches 0 the extra node would get nothing)."""
    if load.st == 0:
        return nodes
    n = 1
    while n < nodes and last_share(load, n + 1) > 0:
        n += 1
    return n


def n_min_closed(load: Load, available: float, nodes: int) -> int | None:
    """The fewest nodes (at most ``nodes``) whose E(n) <= ``available`` without a link setup cost (ST = 0;
    SC only shifts E): beta^n <= gamma, gamma = 1 - sigma * Cms / (available - SC), so
    n = ceil(ln gamma / ln beta). None when no number of nodes is enough."""
    if load.st != 0:
        raise ValueError("n_min_closed: the closed form holds without a link setup cost (ST = 0)")
    room = available - load.sc
    if room <= 0:
        return None
    gamma = 1.0 - load.sigma * load.cms / room
    if gamma <= 0:
        return None
    n = max(1, math.ceil(math.log(gamma) / math.log(load.beta)))
    # ln() rounding can put an exact boundary one off either way: settle it on E itself.
    while n > 1 and _fits(exec_time(load, n - 1), available):
        n -= 1
    while n <= nodes and not _fits(exec_time(load, n), available):
        n += 1
    return n if n <= nodes else None


def n_min_scan(load: Load, available: float, nodes: int) -> int | None:
    """The fewest nodes (at most ``nodes``) whose E(n) <= ``available``, found numerically (with setup
    costs): scan n = 1, 2, ... and stop where the last share is no longer positive (E rises from there).
    None when no number of nodes is enough."""
    for n in range(1, nodes + 1):
        if n > 1 and last_share(load, n) <= 0:
            return None
        if _fits(exec_time(load, n), available):
            return n
    return None


def n_min(load: Load, available: float, nodes: int) -> int | None:
    """The fewest nodes whose execution fits in ``available`` emulated seconds: closed form without a link
    setup cost, a scan with one."""
    if load.st == 0:
        return n_min_closed(load, available, nodes)
    return n_min_scan(load, available, nodes)


def cost(load: Load, n: int) -> float:
    """W(n) = n * E(n): the node time the task takes on ``n`` nodes (rises with n, theorem 5.3)."""
    return n * exec_time(load, n)


def cost_derivative(load: Load, n: int, nodes: int) -> float:
    """DC = W(n + 1) - W(n), or +infinity when n + 1 is not a valid number of nodes (beyond ``nodes`` or
    beyond :func:`fastest`): see the module docstring."""
    if n + 1 > nodes or last_share(load, n + 1) <= 0:
        return math.inf
    return cost(load, n + 1) - cost(load, n)


def load_of(spec: JobSpec) -> Load | None:
    """A job's divisible load from its spec, or None if it is not one."""
    d = spec.divisible
    if d is None:
        return None
    return Load(d.data_size, d.cms, d.cps, d.setup_link, d.setup_compute)


# --------------------------------------------------------------------------------------------------------
# The schedulability test


class Task:
    """A task as the test sees it: its load, absolute deadline and arrival, and its execution times on
    1..fastest nodes (E falls over that range, so the fewest nodes for a deadline is a search). ``nodes``
    is the most it may get (``cap``): the cluster's, or fewer when its job says so (its size)."""

    __slots__ = ("job_id", "arrival", "deadline", "load", "cap", "fast", "times", "_neg", "seq")

    def __init__(self, job_id: str, arrival: float, deadline: float, load: Load, nodes: int, seq: int):
        self.job_id = job_id
        self.arrival = arrival
        self.deadline = deadline  # absolute: A + D
        self.load = load
        self.cap = nodes
        self.fast = fastest(load, nodes)
        self.times = [exec_time(load, n) for n in range(1, self.fast + 1)]
        self._neg = [-x for x in self.times]  # rising: for bisect
        self.seq = seq  # arrival order

    def e(self, n: int) -> float:
        """E on ``n`` nodes; past the fastest number the extra nodes get empty shares (E stays)."""
        return self.times[min(n, self.fast) - 1]

    def n_min(self, start: float, nodes: int) -> int | None:
        """The fewest nodes (at most ``nodes``) that end by the deadline from ``start``."""
        available = self.deadline - start
        if self.load.st == 0:
            return n_min(self.load, available, min(nodes, self.fast))
        # The scan of n_min_scan over the precomputed E(1..fastest), which falls: a binary search.
        limit = min(nodes, self.fast)
        # The first n with E(n) <= available (+ the tolerance of _fits).
        i = bisect_left(self._neg, -(available + TOL * max(1.0, abs(available))), 0, limit)
        return i + 1 if i < limit else None

    def dc(self, n: int, nodes: int) -> float:
        """:func:`cost_derivative` from the table."""
        if n + 1 > min(nodes, self.fast):
            return math.inf
        return (n + 1) * self.times[n] - n * self.times[n - 1]

    def n_all(self, start: float, nodes: int, every: bool = False) -> int | None:
        """ "All nodes" (at most ``nodes``), if the task ends by the deadline from ``start``: the fastest
        number, or with ``every`` every node it may use (it computes on the fastest number of them; the
        others hold an empty share). The two differ only with a link setup cost."""
        n = min(nodes, self.cap if every else self.fast)
        if n < 1 or not _fits(self.e(n), self.deadline - start):
            return None
        return n


@dataclass(frozen=True)
class Placement:
    job_id: str
    start: float
    nodes: int
    end: float


class Infeasible(Exception):
    """The test failed: the message says which task cannot meet its deadline, and from when."""


def plan(
    tasks: Sequence[Task],
    free_at: Sequence[float],
    order: str,
    sizing: str,
    nodes: int,
    *,
    every: bool = False,
) -> list[Placement]:
    """The schedulability test (paper 001 §5; docs/policies.md, "MCDF and the schedulability test").

    ``free_at`` holds, for every node that is up, the time it becomes free (now for an idle node). The
    walk visits the times at which nodes become free, in order; at each it sizes every task not yet
    placed (``sizing`` "min": n_min from that time; "all": the fastest n), fails if one cannot meet its
    deadline from there, orders them (``order`` "mcdf": largest cost derivative first; "fifo": arrival;
    "edf": absolute deadline) and places each that fits in the nodes free then. ``every``: "all" holds
    every node a task may use, not the fastest number (:meth:`Task.n_all`). Returns the placements, or
    raises :class:`Infeasible`."""
    if order not in ORDERS or sizing not in SIZINGS:
        raise ValueError(f"plan: order {order!r} / sizing {sizing!r}; use {ORDERS} / {SIZINGS}")
    free = sorted(free_at)
    up = len(free)
    pending = list(tasks)
    out: list[Placement] = []
    t = -math.inf
    while pending:
        later = [x for x in free if x > t]
        if not later:  # cannot happen with up > 0: placed tasks end after they start
            raise Infeasible("no node is up")
        t = min(later)
        sized = []
        for task in pending:
            n = task.n_min(t, up) if sizing == "min" else task.n_all(t, up, every)
            if n is None:
                raise Infeasible(
                    f"task {task.job_id} could not meet its deadline {task.deadline:.6g} s starting at "
                    f"{t:.6g} s on up to {up} nodes"
                )
            if order == "mcdf":
                key = (-task.dc(n, up), task.deadline, task.seq)
            elif order == "edf":
                key = (task.deadline, task.seq)
            else:
                key = (task.seq,)
            sized.append((key, task, n))
        sized.sort(key=lambda s: s[0])
        idle = sum(1 for x in free if x <= t)
        for _key, task, n in sized:
            if n > idle:
                continue
            end = t + task.e(n)
            if not _fits(end - t, task.deadline - t):  # the paper's check; n_min already ensures it
                raise Infeasible(f"task {task.job_id} would end at {end:.6g} s, after its deadline")
            # Any n of the nodes free at t will do: they are alike from t on.
            taken = 0
            for i, x in enumerate(free):
                if taken == n:
                    break
                if x <= t:
                    free[i] = end
                    taken += 1
            free.sort()
            idle -= n
            pending.remove(task)
            out.append(Placement(task.job_id, t, n, end))
            if idle == 0:
                break
    return out


def queue_plan(
    tasks: Sequence[Task],
    free_at: Sequence[float],
    order: str,
    sizing: str,
    nodes: int,
    *,
    every: bool = False,
) -> list[Placement]:
    """A cluster manager's admission test (docs/policies.md, "The baselines' admission test"): the FIFO
    and EDF baselines' default, ``admission_test: queue``.

    The tasks form one queue in the scheme's order (``order`` "fifo": arrival; "edf": absolute deadline).
    Each asked for its nodes when it arrived, as a job asks a cluster manager, and keeps that number:
    ``sizing`` "all", the fastest number (or with ``every`` every node it may use); "min", n_min from its
    arrival, the fewest that meet its deadline had it started at once. The queue starts in order, none
    before the one ahead of it (no backfilling): each at the first time from then at which its nodes are
    free. Returns the placements if every task so ends by its deadline, else raises :class:`Infeasible`.
    Unlike :func:`plan`, a task is never resized for a later start, and never overtakes."""
    if order not in ("fifo", "edf") or sizing not in SIZINGS:
        raise ValueError(f"queue_plan: order {order!r} / sizing {sizing!r}; use fifo, edf / {SIZINGS}")
    free = sorted(free_at)
    queue = sorted(tasks, key=lambda t: (t.deadline, t.seq) if order == "edf" else (t.seq,))
    out: list[Placement] = []
    ahead = -math.inf  # the start of the task ahead in the queue
    for task in queue:
        if sizing == "all":
            n = min(nodes, task.cap if every else task.fast)
        else:
            n = task.n_min(task.arrival, nodes) or 0
        if n < 1 or n > len(free):
            raise Infeasible(
                f"task {task.job_id} cannot meet its deadline {task.deadline:.6g} s on up to {nodes} nodes"
            )
        start = max(ahead, free[n - 1])  # free is sorted: its n-th time is when n nodes are free
        end = start + task.e(n)
        if not _fits(end - start, task.deadline - start):
            raise Infeasible(
                f"task {task.job_id} would start at {start:.6g} s in the queue on {n} node(s) and end at "
                f"{end:.6g} s, after its deadline {task.deadline:.6g} s"
            )
        free[:n] = [end] * n  # any n of the nodes free at start will do: they are alike from then on
        free.sort()
        ahead = start
        out.append(Placement(task.job_id, start, n, end))
    return out


# --------------------------------------------------------------------------------------------------------
# The global policies


class DivisibleGlobal(GlobalPolicy):
    """One policy of the family: ``order`` (mcdf | fifo | edf), ``sizing`` (min | all) and ``admission``
    (the schedulability test at each arrival, or none: ANNA). One task per node (space sharing)."""

    order: ClassVar[str] = "mcdf"
    sizing: ClassVar[str] = "min"
    admission: ClassVar[bool] = True

    params: MemoryAwareParams  # AnnaParams for AN and ANNA

    def __init__(self, nodes: int, params: MemoryAwareParams, seed: int = 0) -> None:
        super().__init__(nodes, params, seed)
        # AN / ANNA's reading of "all nodes" (AnnaParams); MN and MCDF have no such parameter (read by name,
        # as a scheduler declared with a plain defaults dict may have it without being an AnnaParams).
        self.every = getattr(self.params, "all_nodes", "fastest") == "every"
        # The baselines' admission test (BaselineParams; MCDF runs its walk) and how a batch is planned
        # (AdmissionParams): read by name for the same reason.
        self.queue_test = getattr(self.params, "admission_test", "walk") == "queue"
        self.joint = getattr(self.params, "batch", "joint") == "joint"
        self.tasks: dict[str, Task] = {}
        self.plan: dict[str, Placement] = {}  # admitted, not started: their planned start and nodes
        self.queue: list[str] = []  # ANNA: accepted, not started, in arrival order
        self.held: dict[int, tuple[str, float]] = {}  # node -> (job, planned end)
        self.running: dict[str, tuple[int, ...]] = {}
        self.last_now = -math.inf
        # Admitted at this instant, not yet dispatched: the paper's MCDF() loop tests every task of the
        # arrivals list before it dispatches (a batch is planned together); tick() at the same instant,
        # after the instant's other arrivals, dispatches.
        self._hold = False
        self._seq = 0
        # Space sharing: a free node holds no other task, so memory refuses only a process bigger than a
        # whole node (as under batch).
        self.mem = NodeMemory(self)

    def max_jobs_per_node(self) -> int:
        return 1

    # -- events ---------------------------------------------------------------------------------------

    def submit(self, now: float, job: JobSpec) -> list[GlobalAction]:
        self.last_now = now
        load = load_of(job)
        if load is None:
            return [Reject(job.job_id, f"job {job.job_id} is not a divisible-load task (no data size)")]
        deadline = job.divisible.deadline
        if deadline is None:
            return [Reject(job.job_id, f"job {job.job_id} has no deadline; divisible-load tasks need one")]
        too_big = self.mem.never_fits(job)
        if too_big:
            return [Reject(job.job_id, too_big)]
        up = self.nodes - len(self.down)
        self._seq += 1
        cap = max(1, min(self.nodes, job.size))
        task = Task(job.job_id, job.submit_time, job.submit_time + deadline, load, cap, self._seq)
        best = min(up, task.fast)
        if best < 1 or not _fits(task.e(best), deadline):
            shortest = f"{task.e(best):.6g} s on {best} node(s)" if best >= 1 else "none: no node is up"
            return [
                Reject(
                    job.job_id,
                    f"task {job.job_id} can never meet its deadline: its shortest execution ({shortest}) "
                    f"is longer than its deadline D = {deadline:.6g} s",
                )
            ]
        if not self.admission:
            self.tasks[job.job_id] = task
            self.queue.append(job.job_id)
            return self._dispatch(now)
        waiting = [self.tasks[j] for j in self.plan]
        test = queue_plan if self.queue_test else plan
        try:
            trial = test(
                [*waiting, task],
                self._free_at(now),
                self.order,
                self.sizing,
                up,
                every=self.every,
            )
        except Infeasible as exc:
            return [Reject(job.job_id, f"admission test failed at {now:.6g} s: {exc}")]
        self.tasks[job.job_id] = task
        self.plan = {p.job_id: p for p in sorted(trial, key=lambda p: (p.start, self.tasks[p.job_id].seq))}
        if self.joint:
            self._hold = True
            return []
        return self._dispatch(now)

    def finished(self, now: float, job_id: str) -> list[GlobalAction]:
        self.last_now = now
        for n in self.running.pop(job_id, ()):
            self.held.pop(n, None)
        if job_id in self.plan:  # ended before it started (killed)
            del self.plan[job_id]
        if job_id in self.queue:
            self.queue.remove(job_id)
        self.tasks.pop(job_id, None)
        return self._dispatch(now)

    def tick(self, now: float) -> list[GlobalAction]:
        self.last_now = now
        self._hold = False
        return self._dispatch(now)

    def next_tick(self) -> float | None:
        if self._hold:
            return self.last_now
        starts = [p.start for p in self.plan.values() if p.start > self.last_now]
        return min(starts) if starts else None

    def node_down(self, now: float, node: int) -> list[GlobalAction]:
        super().node_down(now, node)
        self.held.pop(node, None)
        return []

    def node_up(self, now: float, node: int) -> list[GlobalAction]:
        super().node_up(now, node)
        return self._dispatch(now)

    # -- internals ------------------------------------------------------------------------------------

    def _free_at(self, now: float) -> list[float]:
        """When each node that is up becomes free, as planned (now for an idle node, and for one whose
        task has overrun its plan: it is free at any moment)."""
        return [
            max(now, self.held[n][1]) if n in self.held else now
            for n in range(self.nodes)
            if n not in self.down
        ]

    def _idle(self) -> list[int]:
        return [n for n in range(self.nodes) if n not in self.held and n not in self.down]

    def _start(self, now: float, job_id: str, n: int) -> Start:
        nodes = pack(self._idle(), n)
        end = now + self.tasks[job_id].e(n)
        for node in nodes:
            self.held[node] = (job_id, end)
        self.running[job_id] = nodes
        return Start(job_id, nodes)

    def _dispatch(self, now: float) -> list[GlobalAction]:
        """Starts what is due: planned tasks whose start has come, in planned order, as long as their
        nodes are free (a task that overran its plan holds them: the next waits); ANNA's queue head in
        its order whenever its nodes are free."""
        actions: list[GlobalAction] = []
        if self._hold:  # tick() at this instant dispatches, once the instant's arrivals are tested
            return actions
        if not self.admission:
            up = self.nodes - len(self.down)
            edf = self.order == "edf"
            while self.queue:
                tasks = (self.tasks[j] for j in self.queue)
                head = min(tasks, key=lambda t: (t.deadline, t.seq) if edf else (t.seq,)).job_id
                n = min(up, self.tasks[head].cap if self.every else self.tasks[head].fast)
                if n < 1 or n > len(self._idle()):
                    break
                self.queue.remove(head)
                actions.append(self._start(now, head, n))
            return actions
        for job_id, p in list(self.plan.items()):
            if p.start > now + TOL * max(1.0, abs(now)):
                break
            if p.nodes > len(self._idle()):
                break
            del self.plan[job_id]
            actions.append(self._start(now, job_id, p.nodes))
        return actions


_ALL_NODES = (
    "AN/ANNA with a link setup cost, where fewer than N nodes are fastest: fastest = a task gets that "
    "number; every = it holds every node it may use (the paper's 'all nodes'), computing on the fastest "
    "number of them (the others get an empty chunk)"
)


_BATCH = (
    "tasks arriving at one instant: joint = every one is tested before any is dispatched (the paper's "
    "MCDF() loop), so the next arrival of a batch may re-plan one admitted before it; each = a task "
    "admitted is dispatched at once, before the next arrival is tested"
)
_ADMISSION_TEST = (
    "FIFO/EDF's admission test: queue = a cluster manager's queue (the task keeps the nodes it asked for "
    "at arrival, all or n_min from then, and no task starts before the one ahead of it); walk = MCDF's "
    "planning walk in this scheme's order (n_min at each time; a task may start before one ahead of it)"
)


class AnnaParams(MemoryAwareParams):
    all_nodes: Literal["fastest", "every"] = param("fastest", _ALL_NODES)


class AdmissionParams(MemoryAwareParams):
    """Every admission-controlled scheme's: MCDF's."""

    batch: Literal["joint", "each"] = param("joint", _BATCH)


class BaselineParams(AdmissionParams):
    """FIFO-MN's and EDF-MN's."""

    admission_test: Literal["queue", "walk"] = param("queue", _ADMISSION_TEST)


class AnParams(BaselineParams, AnnaParams):
    """FIFO-AN's and EDF-AN's."""


class _Mcdf(DivisibleGlobal):
    order, sizing, admission = "mcdf", "min", True


class _FifoAnna(DivisibleGlobal):
    order, sizing, admission = "fifo", "all", False


class _FifoAn(DivisibleGlobal):
    order, sizing, admission = "fifo", "all", True


class _FifoMn(DivisibleGlobal):
    order, sizing, admission = "fifo", "min", True


class _EdfAnna(DivisibleGlobal):
    order, sizing, admission = "edf", "all", False


class _EdfAn(DivisibleGlobal):
    order, sizing, admission = "edf", "all", True


class _EdfMn(DivisibleGlobal):
    order, sizing, admission = "edf", "min", True


class Mcdf(Scheduler):
    name = "mcdf"
    summary = "divisible loads: maximum cost derivative first, n_min nodes, admission test (paper 001)"
    global_policy = _Mcdf
    local_policy = RunAll
    Params = AdmissionParams


class FifoAnna(Scheduler):
    name = "fifo-anna"
    summary = "divisible loads: FIFO on all (fastest) nodes, no admission control: tasks may miss"
    global_policy = _FifoAnna
    local_policy = RunAll
    Params = AnnaParams


class FifoAn(Scheduler):
    name = "fifo-an"
    summary = "divisible loads: FIFO on all (fastest) nodes, admission test"
    global_policy = _FifoAn
    local_policy = RunAll
    Params = AnParams


class FifoMn(Scheduler):
    name = "fifo-mn"
    summary = "divisible loads: FIFO on n_min nodes, admission test"
    global_policy = _FifoMn
    local_policy = RunAll
    Params = BaselineParams


class EdfAnna(Scheduler):
    name = "edf-anna"
    summary = "divisible loads: earliest deadline first on all (fastest) nodes, no admission control"
    global_policy = _EdfAnna
    local_policy = RunAll
    Params = AnnaParams


class EdfAn(Scheduler):
    name = "edf-an"
    summary = "divisible loads: earliest deadline first on all (fastest) nodes, admission test"
    global_policy = _EdfAn
    local_policy = RunAll
    Params = AnParams


class EdfMn(Scheduler):
    name = "edf-mn"
    summary = "divisible loads: earliest deadline first on n_min nodes, admission test"
    global_policy = _EdfMn
    local_policy = RunAll
    Params = BaselineParams
