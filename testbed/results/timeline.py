"""What happened in a run, over time, from its event log only (docs/architecture.md, "The event log is the
truth"): each process's running and stopped spans per node, the gang matrix's rows, the queue, and the
cluster's utilisation and power. The report (testbed/results/report.py) draws them.

A process runs while its node lets it: under a gang policy, from the slot switch whose ``jobs`` hold its
job to the next switch that does not (each node logs its own switches, so the skew between nodes shows; the
simulator's switch of every node is read as its nodes' records, testbed/core/events.py ``PerNode``);
under any other local policy it is drawn running from its start to its exit (their decisions are not
logged).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from testbed.core import events as ev


@dataclass(frozen=True)
class Segment:
    """One process (``job``, ``rank``) on ``node`` from ``t0`` to ``t1``, running or stopped."""

    node: int
    job: str
    rank: int
    t0: float
    t1: float
    running: bool


@dataclass(frozen=True)
class Cell:
    """The gang matrix's ``rows`` (one row, or two sharing a quantum under paired gang) on ``node`` held
    ``jobs`` from ``t0`` to ``t1``."""

    rows: tuple[int, ...]
    node: int
    jobs: tuple[str, ...]
    t0: float
    t1: float


@dataclass
class Timeline:
    nodes: int
    end: float = 0.0  # the last event's time
    segments: list[Segment] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)  # in submission order
    job_class: dict[str, str] = field(default_factory=dict)
    cpu_s: dict[tuple[str, int, int], float] = field(default_factory=dict)  # (job, rank, node) -> CPU
    sliced: bool = False  # the run had gang slots: running/stopped is known per slot
    cells: list[Cell] = field(default_factory=list)
    active: list[tuple[float, float, tuple[int, ...]]] = field(default_factory=list)  # quanta: t0, t1, rows
    queued: list[tuple[float, int]] = field(default_factory=list)  # (t, jobs waiting) at each change
    running: list[tuple[float, int]] = field(default_factory=list)  # (t, jobs running) at each change

    def utilisation(self, t0: float, t1: float, bins: int, capacity: float) -> list[tuple[float, float]]:
        """The cluster's CPU utilisation in ``bins`` equal steps of [t0, t1], as (start, share): each
        process's CPU (from its exit) spread evenly over the time it ran. Its mean over [t0, t1] is the
        summary's utilisation (the same CPU over the same capacity and makespan)."""
        width = (t1 - t0) / bins if t1 > t0 else 0.0
        acc = [0.0] * bins
        ran: dict[tuple[str, int, int], float] = defaultdict(float)
        for s in self.segments:
            if s.running:
                ran[(s.job, s.rank, s.node)] += s.t1 - s.t0
        for s in self.segments:
            key = (s.job, s.rank, s.node)
            if not s.running or ran[key] <= 0 or width <= 0:
                continue
            rate = self.cpu_s.get(key, 0.0) / ran[key]  # CPU seconds per second while it ran
            lo, hi = max(s.t0, t0), min(s.t1, t1)
            b = max(0, int((lo - t0) / width))
            while b < bins and lo < hi:
                edge = min(hi, t0 + (b + 1) * width)
                acc[b] += rate * (edge - lo)
                lo, b = edge, b + 1
        denom = capacity * width
        return [(t0 + i * width, a / denom if denom > 0 else 0.0) for i, a in enumerate(acc)]


class _Builder:
    """One pass over the events, in their order (the log is sorted by emulated time)."""

    def __init__(self, nodes: int) -> None:
        self.tl = Timeline(nodes=nodes)
        self.read = ev.PerNode(nodes)
        self.open: dict[int, dict[tuple[str, int], list]] = defaultdict(dict)  # node -> proc -> [t0, run]
        self.allowed: dict[int, frozenset[str]] = {}  # node -> jobs its latest slot allows
        self.node_slot: dict[int, int] = {}
        self.slot_rows: dict[int, tuple[int, ...]] = {}
        self.slot_union: dict[int, set[str]] = defaultdict(set)
        self.last_slot: int | None = None
        self.cell_open: dict[tuple[tuple[int, ...], int], tuple[float, tuple[str, ...]]] = {}
        self.planned: list[tuple[float, tuple[int, ...]]] = []
        self.state: dict[str, str] = {}  # job -> queued | running | done
        self.counts = [0, 0]

    def add(self, e: dict) -> None:
        kind, t = e["kind"], e["t"]
        self.tl.end = max(self.tl.end, t)
        records = self.read(e)  # one record for several ranks or nodes: each of them
        handler = self._HANDLERS.get(kind)
        if handler is not None:
            for one in records:
                handler(self, one, t)

    # ---- processes
    def _runs(self, node: int, job: str) -> bool:
        if not self.tl.sliced:
            return True
        if self.node_slot.get(node) != self.last_slot and self.last_slot is not None:
            # A node with nothing to run does not log the slots it skips (the simulator hands it only the
            # latest when a process comes): its jobs are the slot's, as on the nodes that logged it.
            self.allowed[node] = frozenset(self.slot_union[self.last_slot])
            self.node_slot[node] = self.last_slot
        return job in self.allowed.get(node, frozenset())

    def _proc_started(self, e: dict, t: float) -> None:
        node = e.get("node")
        if node is None or node >= self.tl.nodes:  # a job's head process: outside the cluster
            return
        self.open[node][(e["job"], e.get("rank", 0))] = [t, self._runs(node, e["job"])]

    def _close(self, node: int, proc: tuple[str, int], t: float) -> None:
        t0, run = self.open[node].pop(proc)
        if t > t0:
            self.tl.segments.append(Segment(node, proc[0], proc[1], t0, t, run))

    def _proc_exited(self, e: dict, t: float) -> None:
        node, proc = e.get("node"), (e["job"], e.get("rank", 0))
        if node is None or node >= self.tl.nodes:
            return
        if e.get("cpu_s") is not None:
            key = (proc[0], proc[1], node)
            self.tl.cpu_s[key] = self.tl.cpu_s.get(key, 0.0) + float(e["cpu_s"])
        if proc in self.open[node]:
            self._close(node, proc, t)

    def _slot_switch(self, e: dict, t: float) -> None:
        node, slot = e["node"], e["slot"]
        if "jobs" not in e:  # a log from before switches named their jobs: no stops to draw
            return
        t = e.get("effect", t)
        if not self.tl.sliced:
            self.tl.sliced = True
            for n, procs in self.open.items():  # those started before the first slot waited for it
                for proc in list(procs):
                    t0, _ = procs[proc]
                    self._close(n, proc, t0)
                    procs[proc] = [t0, False]
        jobs = frozenset(e["jobs"])
        self.allowed[node], self.node_slot[node] = jobs, slot
        self.slot_union[slot] |= jobs
        self.last_slot = slot
        for proc, (_t0, run) in list(self.open[node].items()):
            now_runs = proc[0] in jobs
            if now_runs != run:
                self._close(node, proc, t)
                self.open[node][proc] = [t, now_runs]
        rows = self.slot_rows.get(slot)
        if rows:
            key = (rows, node)
            old = self.cell_open.get(key)
            held = tuple(sorted(jobs))
            if old is None or old[1] != held:
                if old is not None and t > old[0] and old[1]:
                    self.tl.cells.append(Cell(rows, node, old[1], old[0], t))
                self.cell_open[key] = (t, held)

    def _slot_planned(self, e: dict, t: float) -> None:
        rows = tuple(e.get("rows") or ())
        self.slot_rows[e["slot"]] = rows
        if rows:
            self.planned.append((e.get("at", t), rows))

    # ---- jobs
    def _count(self, t: float) -> None:
        for series, n in ((self.tl.queued, self.counts[0]), (self.tl.running, self.counts[1])):
            if series and series[-1][0] == t:
                series[-1] = (t, n)
            else:
                series.append((t, n))

    def _move(self, job: str, to: str, t: float) -> None:
        old = self.state.get(job)
        if old == "queued":
            self.counts[0] -= 1
        elif old == "running":
            self.counts[1] -= 1
        if to == "queued":
            self.counts[0] += 1
        elif to == "running":
            self.counts[1] += 1
        self.state[job] = to
        self._count(t)

    def _job_submitted(self, e: dict, t: float) -> None:
        self.tl.jobs.append(e["job"])
        self.tl.job_class[e["job"]] = e.get("job_class") or "default"
        self._move(e["job"], "queued", t)

    def _job_started(self, e: dict, t: float) -> None:
        self._move(e["job"], "running", t)

    def _job_requeued(self, e: dict, t: float) -> None:
        self._move(e["job"], "queued", t)
        self._leave_matrix(e["job"], t)

    def _job_ended(self, e: dict, t: float) -> None:
        self._move(e["job"], "done", t)
        self._leave_matrix(e["job"], t)

    def _leave_matrix(self, job: str, t: float) -> None:
        """A job that ended (or went back to the queue) leaves its matrix cells now, not at the row's next
        switch on the node (a node with nothing left to run logs none)."""
        for key, (t0, jobs) in list(self.cell_open.items()):
            if job in jobs:
                if t > t0:
                    self.tl.cells.append(Cell(key[0], key[1], jobs, t0, t))
                self.cell_open[key] = (t, tuple(j for j in jobs if j != job))

    _HANDLERS = {
        ev.PROC_STARTED: _proc_started,
        ev.PROC_EXITED: _proc_exited,
        ev.SLOT_SWITCH: _slot_switch,
        ev.SLOT_PLANNED: _slot_planned,
        ev.JOB_SUBMITTED: _job_submitted,
        ev.JOB_STARTED: _job_started,
        ev.JOB_REQUEUED: _job_requeued,
        ev.JOB_REJECTED: _job_ended,
        ev.JOB_FINISHED: _job_ended,
        ev.JOB_FAILED: _job_ended,
        ev.JOB_KILLED: _job_ended,
    }

    def finish(self) -> Timeline:
        end = self.tl.end
        for node, procs in self.open.items():  # no exit recorded: the run ended under them
            for proc in list(procs):
                self._close(node, proc, end)
        for (rows, node), (t0, jobs) in self.cell_open.items():
            if jobs and end > t0:
                self.tl.cells.append(Cell(rows, node, jobs, t0, end))
        for i, (at, rows) in enumerate(self.planned):
            nxt = self.planned[i + 1][0] if i + 1 < len(self.planned) else end
            if nxt > at:
                self.tl.active.append((at, nxt, rows))
        self.tl.segments.sort(key=lambda s: (s.node, s.t0))
        return self.tl


def build(events: Iterable[dict], nodes: int) -> Timeline:
    """The timeline of a run of ``nodes`` nodes from its events (any iterable, read once)."""
    b = _Builder(nodes)
    for e in events:
        b.add(e)
    return b.finish()
