"""Results computed from the event log only (docs/architecture.md, "The event log is the truth"): jobs.csv,
summary.json, a table.

jobs.csv uses Batsim's column names where they apply. Times are emulated seconds.
"""

from __future__ import annotations

import csv
import json
import math
from array import array
from bisect import bisect_right
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import reduce
from itertools import repeat
from operator import add
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from testbed.apps.reports import (
    CPU_TIME_UNITS,
    DEADLINES_MISSED,
    FINISH_UNIT,
    SAMPLE_UNITS,
    SESSION_ELAPSED,
    SESSION_IDEAL,
    SESSION_TIMES,
)
from testbed.apps.reports import DEADLINE_UNITS as _DEADLINE_UNITS
from testbed.core import events as ev
from testbed.core.jobs import StrEnum
from testbed.results.dedicated import Dedicated
from testbed.scenario import ScenarioError, load

if TYPE_CHECKING:
    import numpy as np

#: Progress units whose every rank's record counts (a per-rank counter, or one observation each): a grouped
#: record of them (ev.GROUPED) is read as the records it stands for. Other units keep a job's highest value,
#: which one record of the same value gives.
_PER_RANK = frozenset({*_DEADLINE_UNITS, FINISH_UNIT, *SAMPLE_UNITS})
#: A record of this many nodes or more has its per-node CPU added by numpy (imported then): a loop is
#: as fast below about a hundred nodes, and a run of narrow jobs (the NASA replay's are at most 128
#: wide) is spared numpy's import, 0.14 s of CPU (issue 23's comparison with AccaSim). 677 a job in
#: benchmarks/sim_scale.py's 100,000: 13 us a record with numpy, 35 us looped.
WIDE_RECORD = 256

JOB_COLUMNS = [
    "job_id",
    "job_class",
    "submission_time",
    "requested_number_of_resources",
    "starting_time",
    "execution_time",
    "finish_time",
    "waiting_time",
    "turnaround_time",
    "stretch",
    "allocated_resources",
    "cpu_time",
    "final_state",
    "reason",
]


#: jobs.csv's column, after allocated_resources, on a heterogeneous cluster: the allocated nodes' rates,
#: each with its nodes (``0.43:0-7 1:8-15``).
ALLOCATED_RATES = "allocated_rates"


class FinalState(StrEnum):
    """A job's ``final_state`` in jobs.csv: Batsim's, plus REJECTED (admission control) and NOT_STARTED."""

    COMPLETED = "COMPLETED_SUCCESSFULLY"
    FAILED = "COMPLETED_FAILED"
    KILLED = "COMPLETED_KILLED"
    REJECTED = "REJECTED"
    NOT_STARTED = "NOT_STARTED"  # still queued when the run ended


#: jobs.csv's column, last, when the run had local users' sessions (apps/localuser.py): each session's
#: slowdown, the emulated time its cycles took over the same work's alone (empty for other jobs).
LOCAL_SLOWDOWN = "local_slowdown"
#: jobs.csv's column, after local_slowdown, in the same runs (those with local users' sessions: a
#: non-dedicated cluster, paper 004): each completed parallel job's execution_time over its run time
#: alone on a dedicated cluster, simulated (testbed/results/dedicated.py); empty for other jobs.
#: A node that fell more than this below its rate in a window of the rate watch
#: (testbed/emulator/mechanism/ratewatch.py) is warned about: in the summary, the run's table and the report.
RATE_WINDOW_WARN = 0.05
PARALLEL_SLOWDOWN = "parallel_slowdown"
#: summary.json's figures of that column: its mean and max over the completed parallel jobs.
PARALLEL_SLOWDOWN_MEAN = f"{PARALLEL_SLOWDOWN}_mean"
PARALLEL_SLOWDOWN_MAX = f"{PARALLEL_SLOWDOWN}_max"

#: ``write``'s extra key: how many jobs the workload holds; the summary then counts those never submitted.
JOBS_PLANNED = "jobs_planned"
#: summary.json: the workload seed the run's jobs were drawn with (a repetition's own: seed + k in the
#: simulator, testbed/scenario/sweep.py ``repetition``).
WORKLOAD_SEED = "workload_seed"
JOBS_NEVER_SUBMITTED = "jobs_never_submitted"


def interval_set(nodes: Iterable[int]) -> str:
    """Batsim's interval-set notation: [0,1,2,5] -> '0-2 5'. Along a run of consecutive numbers ``ns[k] -
    k`` is the same, and it grows from one run to the next, so each run's end is found by bisection: a few
    steps a run, not one a node (a job of 677 nodes, 100,000 jobs: benchmarks/sim_scale.py)."""
    out, ns = [], sorted(set(nodes))
    i, n = 0, len(ns)
    if n and ns[-1] - ns[0] == n - 1:  # one run (a packed job's nodes, mostly): no search
        return str(ns[0]) if n == 1 else f"{ns[0]}-{ns[-1]}"
    while i < n:
        j = bisect_right(range(n), ns[i] - i, lo=i, key=lambda k: ns[k] - k) - 1  # the run's last
        out.append(str(ns[i]) if i == j else f"{ns[i]}-{ns[j]}")
        i = j + 1
    return " ".join(out)


@dataclass
class RunFacts:
    nodes: int
    cpu_rate: float
    cores_per_node: int
    idle_watts: float
    busy_watts: float
    tdf: float
    envelope: str
    backend: str
    scheduler: str
    #: Each node's rate, node i at index i, on a heterogeneous cluster (``cluster.groups``); empty when
    #: every node has ``cpu_rate`` (the results then have no per-node rates).
    node_rates: tuple[float, ...] = ()
    #: The parallel slowdown in every run, not only in those with local users' sessions (the scenario's
    #: ``results.parallel_slowdown: always``).
    parallel_slowdown_always: bool = False


def facts_of(scn, backend: str, tdf: float, envelope: str) -> RunFacts:
    """A run's facts from its scenario (a :class:`testbed.scenario.model.Scenario`)."""
    c = scn.cluster
    return RunFacts(
        nodes=c.nodes,
        cpu_rate=c.cpu_rate,
        cores_per_node=c.cores_per_node,
        idle_watts=c.power.idle_watts,
        busy_watts=c.power.busy_watts,
        tdf=tdf,
        envelope=envelope,
        backend=backend,
        scheduler=scn.scheduler.name,
        node_rates=() if c.groups is None else tuple(i.rate for i in c.node_info()),
        parallel_slowdown_always=scn.results.parallel_slowdown_in(local_users=False),
    )


def rates_by_node(rates: Sequence[float], nodes: Iterable[int] | None = None) -> str:
    """Each rate with its nodes (of ``nodes``; all by default) in interval-set notation, slowest first:
    ``0.43:0-7 1:8-15``."""
    by_rate: dict[float, list[int]] = defaultdict(list)
    for n in range(len(rates)) if nodes is None else nodes:
        if 0 <= n < len(rates):
            by_rate[rates[n]].append(n)
    return " ".join(f"{r:g}:{interval_set(ns)}" for r, ns in sorted(by_rate.items()))


#: The reason given to a job that started and has no end in the event log: the run stopped under it
#: (its driver was killed, say) before the coordinator could record one.
NO_END_RECORDED = "no end recorded: the run stopped before this job ended"


class Tally:
    """What the results need from a run's events, gathered in one pass over them: a run may log millions
    of events, which need not all be held (``write`` takes them streamed from the file)."""

    _FINAL = {
        ev.JOB_FINISHED: FinalState.COMPLETED,
        ev.JOB_FAILED: FinalState.FAILED,
        ev.JOB_KILLED: FinalState.KILLED,
        ev.JOB_REJECTED: FinalState.REJECTED,
    }

    def __init__(self) -> None:
        self.jobs: dict[str, dict] = {}
        self.cpu: dict[str, float] = defaultdict(float)
        # Node n's CPU at index n (0.0 for a node that ran nothing), grown as higher nodes appear: a grouped
        # record's nodes are added at once (:meth:`_node_cpu`), not one dict entry at a time. A list until
        # a record of WIDE_RECORD nodes comes, then a numpy array.
        self.cpu_by_node: list[float] | np.ndarray = []
        self.last_t = 0.0
        self.rate_err: float | None = None
        #: node -> [worst error, its window's end t, windows counted, windows over RATE_WINDOW_WARN]
        self.rate_windows: dict[int, list] = {}
        self.switches: dict[int, list[float]] = {}  # slot -> [earliest effect, latest effect, nodes]
        self.planned = [0, 0]  # slots planned with rows, those with two rows or more
        self.cls: dict[str, str] = {}
        self.start: dict[str, float] = {}
        self.progress: dict[tuple[str, str], tuple[float, float]] = {}  # (job, unit) -> (value, t)
        self.deadlines: dict[tuple[str, int, str], float] = {}  # (job, rank, met|missed unit) -> count
        self.samples: dict[tuple[str, str], list[float]] = {}  # (unit, class) -> [sum, count, max]
        self.rt: set[str] = set()  # real-time jobs (job_submitted's realtime)
        self.finishes: dict[str, dict[int, float]] = defaultdict(dict)  # job -> rank -> reported finish
        # job -> the nodes of its (last) start, 4 bytes a node: as the log's ints (28 bytes each, and 8 for
        # the tuple's pointer) 100,000 jobs of 677 nodes held 2.4 GB (docs/measurements.md)
        self.nodes_of: dict[str, array] = {}
        self.local: set[str] = set()  # local users' sessions (job_submitted's owner_node)
        self.session: dict[str, dict[str, float]] = defaultdict(dict)  # session -> its running totals
        #: node -> [its latest paging factor, since when]; and the node-seconds spent under 1 so far
        self.paging: dict[int, list[float]] = {}
        self.paging_s = 0.0

    def add(self, e: dict) -> None:
        kind = e["kind"]
        t = e["t"]
        if t > self.last_t:
            self.last_t = t
        if kind == ev.JOB_SUBMITTED:
            self.jobs[e["job"]] = {
                "job_id": e["job"],
                "job_class": e.get("job_class", ""),
                "submission_time": t,
                "requested_number_of_resources": e.get("size"),
                "starting_time": None,
                "finish_time": None,
                "allocated_resources": "",
                "final_state": FinalState.NOT_STARTED,
                "reason": "",
            }
            self.cls[e["job"]] = e.get("job_class") or "default"
            if e.get("realtime"):
                self.rt.add(e["job"])
            if e.get("owner_node") is not None:
                self.local.add(e["job"])
        elif kind == ev.SLOT_SWITCH:
            if e.get("effect") is not None:
                # A grouped record: its nodes' switches at once; a switch of every node: those that logged it.
                n = len(e["nodes"]) if "nodes" in e else e.get(ev.SWITCHED_FIELD, 1)
                s = self.switches.get(e["slot"])
                if s is None:
                    self.switches[e["slot"]] = [e["effect"], e["effect"], n]
                else:
                    s[0], s[1], s[2] = min(s[0], e["effect"]), max(s[1], e["effect"]), s[2] + n
        elif kind == ev.SLOT_PLANNED:
            if e.get("rows"):
                self.planned[0] += 1
                self.planned[1] += len(e["rows"]) > 1
        elif kind == ev.RATE_PROBE:
            err = abs(e["error"])
            self.rate_err = err if self.rate_err is None else max(self.rate_err, err)
        elif kind == ev.RATE_WINDOW:
            self._rate_window(e, t)
        elif kind == ev.NODE_PAGING:
            was = self.paging.get(e["node"])
            if was is not None and was[0] < 1:
                self.paging_s += t - was[1]
            self.paging[e["node"]] = [e["factor"], t]
        elif kind == ev.PROGRESS:
            if "nodes" in e and e.get("unit") in _PER_RANK:  # each rank counts its own
                for one in ev.per_node(e):
                    self._progress(one, t)
            else:
                self._progress(e, t)
        elif e.get("job") not in self.jobs:
            return
        elif kind == ev.JOB_STARTED:
            row = self.jobs[e["job"]]
            row["starting_time"] = t
            row["allocated_resources"] = interval_set(e.get("nodes", []))
            self.nodes_of[e["job"]] = array("i", e.get("nodes", ()))
            self.start[e["job"]] = t
        elif kind in self._FINAL:
            row = self.jobs[e["job"]]
            row["finish_time"] = t if kind != ev.JOB_REJECTED else None
            row["final_state"] = self._FINAL[kind]
            row["reason"] = e.get("reason", "") or ""
        elif kind == ev.PROC_EXITED and e.get("cpu_s") is not None:
            cpu_s = float(e["cpu_s"])
            nodes = e.get("nodes")
            if nodes is not None:  # a grouped record (ev.GROUPED): each rank's, added as its own would be
                job = e["job"]
                # The job's sum one rank after another, in C: the same additions in the same order, so
                # the same last bits as one record a rank (67.7 million ranks in the 100,000-job run).
                self.cpu[job] = reduce(add, repeat(cpu_s, len(nodes)), self.cpu[job])
                self._node_cpu(nodes, cpu_s)
                return
            self.cpu[e["job"]] += cpu_s
            if e.get("node") is not None:
                self._node_cpu((e["node"],), cpu_s)

    def _node_cpu(self, nodes: Sequence[int], cpu_s: float) -> None:
        """Adds ``cpu_s`` to each node of ``nodes`` (a node twice, twice): one float64 addition each, the
        same as a Python float's."""
        if not nodes:
            return
        top = max(nodes)
        cpu = self.cpu_by_node
        if type(cpu) is list and len(nodes) < WIDE_RECORD:
            if top >= len(cpu):
                cpu.extend([0.0] * (top + 1 - len(cpu)))
            for n in nodes:
                cpu[n] += cpu_s
            return
        import numpy as np

        if type(cpu) is list:
            cpu = self.cpu_by_node = np.array(cpu, dtype=np.float64)  # the same doubles
        if top >= len(cpu):
            grown = np.zeros(max(top + 1, 2 * len(cpu)))
            grown[: len(cpu)] = cpu
            cpu = self.cpu_by_node = grown
        np.add.at(cpu, np.array(nodes, dtype=np.intp), cpu_s)

    def node_cpu(self, node: int) -> float:
        """The CPU seconds (at rate 1.0) that ``node``'s processes used, 0.0 if it ran none."""
        return float(self.cpu_by_node[node]) if node < len(self.cpu_by_node) else 0.0

    def cpu_from(self, first: int) -> list[float]:
        """Each node's CPU seconds from node ``first`` on, as Python floats (0.0 for some past the last)."""
        cpu = self.cpu_by_node[first:]
        return cpu if type(cpu) is list else cpu.tolist()

    def _rate_window(self, e: dict, t: float) -> None:
        w = self.rate_windows.setdefault(e["node"], [None, None, 0, 0])
        if e.get("error") is not None:
            w[2] += 1
            w[3] += e["error"] > RATE_WINDOW_WARN
            if w[0] is None or e["error"] > w[0]:
                w[0], w[1] = e["error"], t

    def _progress(self, e: dict, t: float) -> None:
        unit = e.get("unit")
        if unit in SAMPLE_UNITS:  # one observation each, not a running total
            key = (unit, self.cls.get(e.get("job"), "default"))
            v = float(e["value"])
            acc = self.samples.setdefault(key, [0.0, 0, v])
            acc[0] += v
            acc[1] += 1
            acc[2] = max(acc[2], v)
            return
        if unit in _DEADLINE_UNITS:  # each rank counts its own; a counter only grows
            key = (e["job"], e.get("rank", 0), unit)
            self.deadlines[key] = max(self.deadlines.get(key, 0.0), float(e["value"]))
        elif unit == FINISH_UNIT:
            self.finishes[e["job"]][e.get("rank", 0)] = float(e["value"])
        elif unit in SESSION_TIMES:  # a session's running totals: times, not counts, so no rate
            totals = self.session[e["job"]]
            totals[unit] = max(totals.get(unit, 0.0), float(e["value"]))
            return
        times = unit == FINISH_UNIT or unit in CPU_TIME_UNITS  # no rate is made of a time
        if e.get("job") in self.start and not times:
            key = (e["job"], e.get("unit", "barriers"))
            old = self.progress.get(key)
            if old is None or e["value"] > old[0]:
                self.progress[key] = (float(e["value"]), t)

    def rows(self) -> list[dict]:
        """jobs.csv's rows, a dict each, its keys JOB_COLUMNS in order."""
        rows = []
        cpu = self.cpu
        for row in self.jobs.values():
            state, reason = row["final_state"], row["reason"]
            start, finish, sub = row["starting_time"], row["finish_time"], row["submission_time"]
            if state == FinalState.NOT_STARTED and start is not None:
                state, reason = FinalState.KILLED, NO_END_RECORDED
            wait = run = turnaround = stretch = None
            if start is not None:
                wait = start - sub
                if finish is not None:
                    run, turnaround = finish - start, finish - sub
                    stretch = turnaround / run if run > 0 else None
            # Built in JOB_COLUMNS' order, not copied and reordered (10,000 jobs: 0.03 s, twice a run).
            rows.append({
                "job_id": row["job_id"],
                "job_class": row["job_class"],
                "submission_time": sub,
                "requested_number_of_resources": row["requested_number_of_resources"],
                "starting_time": start,
                "execution_time": run,
                "finish_time": finish,
                "waiting_time": wait,
                "turnaround_time": turnaround,
                "stretch": stretch,
                "allocated_resources": row["allocated_resources"],
                "cpu_time": cpu.get(row["job_id"], 0.0),
                "final_state": state,
                "reason": reason,
            })  # fmt: skip
        return rows

    def skews_ms(self) -> list[float]:
        return [(hi - lo) * 1000.0 for lo, hi, n in self.switches.values() if n > 1]

    def paired_fraction(self) -> float | None:
        total, paired = self.planned
        return paired / total if total else None

    def finish_spread(self) -> float | None:
        """``finish_spread_s``: the mean over jobs whose workers reported their finish times (the unit
        ``finish_s``: a divisible load's) of the latest minus the earliest; None when none did."""
        spreads = [max(f.values()) - min(f.values()) for f in self.finishes.values() if f]
        return sum(spreads) / len(spreads) if spreads else None

    def ratios(self, rows: list[dict]) -> dict[str, float]:
        """``reject_ratio`` (jobs rejected / jobs submitted) and, where any job reported deadlines,
        ``deadline_miss_ratio`` (deadlines missed / deadlines due), overall and ``.<class>`` per job class."""
        cls = {r["job_id"]: r["job_class"] or "default" for r in rows}
        out: dict[str, float] = {}
        if rows:
            by_class: dict[str, list[int]] = defaultdict(lambda: [0, 0])
            for r in rows:
                c = by_class[cls[r["job_id"]]]
                c[0] += r["final_state"] == FinalState.REJECTED
                c[1] += 1
            out["reject_ratio"] = sum(c[0] for c in by_class.values()) / len(rows)
            if len(by_class) > 1:
                out.update({f"reject_ratio.{k}": v[0] / v[1] for k, v in sorted(by_class.items())})
        if self.deadlines:
            due: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # class -> [missed, all]
            for (job, _rank, unit), n in self.deadlines.items():
                d = due[cls.get(job, "default")]
                d[0] += n if unit == DEADLINES_MISSED else 0.0
                d[1] += n
            missed, total = sum(d[0] for d in due.values()), sum(d[1] for d in due.values())
            out["deadline_miss_ratio"] = missed / total if total else 0.0
            out.update({f"deadline_miss_ratio.{k}": d[0] / d[1] for k, d in sorted(due.items()) if d[1]})
        if self.rt:  # paper 000's figures: RT jobs turned away, BE jobs' mean response time
            rt_rows = [r for r in rows if r["job_id"] in self.rt]
            out["rt_rejected_ratio"] = sum(r["final_state"] == FinalState.REJECTED for r in rt_rows) / len(
                rt_rows
            )
            be = [
                r["turnaround_time"]
                for r in rows
                if r["job_id"] not in self.rt
                and r["final_state"] == FinalState.COMPLETED
                and r["turnaround_time"] is not None
            ]
            out["be_mean_response_time_s"] = sum(be) / len(be) if be else None
        for (unit, c), (total, n, top) in sorted(self.samples.items()):
            out[f"{unit}_mean.{c}"] = total / n
            out[f"{unit}_max.{c}"] = top
        return out

    def local_slowdowns(self) -> dict[str, float]:
        """Each local user's session's slowdown (its cycles' elapsed time over the same work's alone, as
        it last reported them), by job id."""
        out = {}
        for job, totals in self.session.items():
            ideal = totals.get(SESSION_IDEAL)
            if ideal:
                out[job] = totals.get(SESSION_ELAPSED, 0.0) / ideal
        return out

    def local_figures(self) -> dict[str, float | int]:
        """summary.json's local users' figures: sessions, and their slowdown's mean and max overall and
        ``.<class>`` per job class (a session's class is its profile's, cpu-user or xwin-user)."""
        slow = self.local_slowdowns()
        if not self.local:
            return {}
        out: dict[str, float | int] = {"local_sessions": len(self.local)}
        if not slow:
            return out
        by_class: dict[str, list[float]] = defaultdict(list)
        for job, v in slow.items():
            by_class[self.cls.get(job, "default")].append(v)
        vals = list(slow.values())
        out["local_slowdown_mean"] = sum(vals) / len(vals)
        out["local_slowdown_max"] = max(vals)
        for c, v in sorted(by_class.items()):
            out[f"local_slowdown_mean.{c}"] = sum(v) / len(v)
            out[f"local_slowdown_max.{c}"] = max(v)
        return out

    def has_parallel_slowdown(self, dedicated: Dedicated | None, always: bool) -> bool:
        """Whether the run's results have the parallel slowdown (the column and its figures)."""
        return dedicated is not None and (bool(self.local) or always)

    def parallel_slowdowns(
        self, rows: list[dict], dedicated: Dedicated | None, always: bool = False
    ) -> dict[str, float]:
        """Each completed parallel job's slowdown against its dedicated run time, by job id; none unless
        the run had local users (the column's switch: only a non-dedicated cluster's runs have it) or
        ``always`` (the scenario asks for it in every run: a sweep's 0-user point)."""
        if not self.has_parallel_slowdown(dedicated, always):
            return {}
        out = {}
        for r in rows:
            if r["final_state"] != FinalState.COMPLETED or r["job_id"] in self.local:
                continue
            alone = dedicated.time(r["job_id"], self.nodes_of.get(r["job_id"], ()))
            if alone:
                out[r["job_id"]] = r["execution_time"] / alone
        return out

    def progress_rates(self) -> dict[str, float]:
        rates: dict[str, list[float]] = defaultdict(list)
        for (job, unit), (value, t) in self.progress.items():
            if t > self.start[job]:
                key = f"{unit}{RATE_MARK}{self.cls.get(job, 'default')}"
                rates[key].append(value / (t - self.start[job]))
        return {k: sum(v) / len(v) for k, v in sorted(rates.items())}


def tally(events: Iterable[dict]) -> Tally:
    out = Tally()
    for e in events:
        out.add(e)
    return out


def job_rows(events: Iterable[dict]) -> list[dict]:
    return tally(events).rows()


def unplanned(rows: list[dict]) -> list[dict]:
    """Jobs that did not end as the scenario planned: the planned ends are completed, rejected or killed
    by the policy, killed because ``duration_s`` ended the run, or failed by a node fault the scenario
    scripted. Each as {job, state, reason}."""
    bad = []
    for r in rows:
        state, reason = r["final_state"], r.get("reason") or ""
        if state in (FinalState.COMPLETED, FinalState.REJECTED):
            continue
        if state == FinalState.KILLED and reason.startswith((ev.DURATION_REACHED, ev.POLICY_KILL)):
            continue
        if state == FinalState.FAILED and reason.endswith(f"({ev.SCRIPTED_FAULT})"):
            continue
        bad.append({"job": r["job_id"], "state": state, "reason": reason})
    return bad


def unplanned_line(bad: dict) -> str:
    """One line for a job that did not end as planned: ``job io-a failed: <reason>``."""
    state = {
        FinalState.FAILED: "failed",
        FinalState.KILLED: "was killed",
        FinalState.NOT_STARTED: "never started",
    }.get(bad["state"], bad["state"])
    return f"job {bad['job']} {state}" + (f": {bad['reason']}" if bad["reason"] else "")


def summarize(
    events: Iterable[dict] | Tally,
    facts: RunFacts,
    dedicated: Dedicated | None = None,
    rows: list[dict] | None = None,
) -> dict:
    """``dedicated``: the run's jobs' dedicated run times, for the parallel slowdown (runs with local
    users only). ``rows``: the Tally's rows, when the caller has them already (read only)."""
    t = events if isinstance(events, Tally) else tally(events)
    if rows is None:
        rows = t.rows()
    # Response, waiting and slowdown are the parallel jobs': a local user's session never waits (its own
    # slowdown is local_slowdown_*).
    done = [r for r in rows if r["final_state"] == FinalState.COMPLETED and r["job_id"] not in t.local]
    first = min((r["submission_time"] for r in rows), default=0.0)
    ends = [r["finish_time"] for r in rows if r["finish_time"] is not None]
    makespan = (max(ends) if ends else t.last_t) - first
    # The cluster's utilisation: a job's head process (on the head node, numbered from facts.nodes) is the
    # job's CPU but not the cluster's.
    head_cpu = sum(t.cpu_from(facts.nodes))
    total_cpu = sum(r["cpu_time"] or 0.0 for r in rows) - head_cpu
    if facts.node_rates:
        util, energy = _hetero_util_energy(t, facts, total_cpu, makespan)
    else:
        capacity = facts.nodes * facts.cores_per_node * facts.cpu_rate * makespan
        util = total_cpu / capacity if capacity > 0 else 0.0
        # Paper 003: E = (B + X*U) * N * T.
        energy = (facts.idle_watts + facts.busy_watts * util) * facts.nodes * makespan
    counts: dict[str, int] = defaultdict(int)
    for r in rows:
        counts[r["final_state"]] += 1

    def mean(vals):
        vals = [v for v in vals if v is not None]
        return sum(vals) / len(vals) if vals else None

    skews = t.skews_ms()
    out = {
        "scheduler": facts.scheduler,
        "backend": facts.backend,
        "nodes": facts.nodes,
        "jobs": len(rows),
        "jobs_by_state": {str(state): n for state, n in counts.items()},  # plain names, as summary.json has
        "mean_response_time_s": mean(r["turnaround_time"] for r in done),
        "mean_waiting_time_s": mean(r["waiting_time"] for r in done),
        "mean_slowdown": mean(r["stretch"] for r in done),
        "utilization": util,
        "makespan_s": makespan,
        "energy_j": energy,
        "power_model": {"idle_watts": facts.idle_watts, "busy_watts": facts.busy_watts},
        "tdf": facts.tdf,
        "envelope": facts.envelope,
        "cpu_rate_fixed": facts.envelope.startswith("cgroup") or facts.envelope in ("docker", "pod")
        if facts.backend != "sim"
        else True,
        "cpu_rate_error_max": t.rate_err,
        "gang_skew_ms_p50": _pct(skews, 50),
        "gang_skew_ms_p99": _pct(skews, 99),
        "slot_switches": len(skews),
        "quanta_paired_fraction": t.paired_fraction(),
        "jobs_not_as_planned": unplanned(rows),
    }
    if facts.node_rates:
        out["node_rates"] = rates_by_node(facts.node_rates)
    out.update(t.ratios(rows))
    out.update(t.local_figures())
    slow = list(t.parallel_slowdowns(rows, dedicated, facts.parallel_slowdown_always).values())
    if slow:
        out[PARALLEL_SLOWDOWN_MEAN] = sum(slow) / len(slow)
        out[PARALLEL_SLOWDOWN_MAX] = max(slow)
    spread = t.finish_spread()
    if spread is not None:
        out["finish_spread_s"] = spread
    out.update(rate_watch(t))
    if t.paging:
        # Node-seconds over memory: closed at the run's last event where a node still pages.
        open_s = sum(t.last_t - since for f, since in t.paging.values() if f < 1)
        out[PAGING_NODE_S] = t.paging_s + open_s
    out.update(t.progress_rates())
    return out


#: summary.json: node-seconds during which some node's running processes needed more memory than it has
#: (node_paging events; testbed/core/paging.py), in either backend; only where some node did.
PAGING_NODE_S = "paging_node_s"


def paging_warning(s: dict) -> str | None:
    """One line for a real run whose nodes needed more memory than they have: the simulator slows such a
    node (the paging model), real processes cannot page on this host and ran at full speed."""
    if s.get("backend") == "sim" or not s.get(PAGING_NODE_S):
        return None
    return (
        f"nodes needed more memory than they have for {s[PAGING_NODE_S]:.1f} node-s; paging is not emulated "
        "on real processes (the host has no swap, and a cgroup memory limit would kill rather than page), so "
        "they ran at full speed where the simulator's paging model slows them: compare with --backend sim"
    )


#: summary.json: the worst window of the rate watch over all nodes, and each node's worst window.
RATE_WINDOW_ERROR_MAX = "rate_window_error_max"
RATE_WINDOW_WORST = "rate_window_worst"


def rate_watch(t: Tally) -> dict:
    """The rate watch's figures (docs/architecture.md, "The node's rate, watched"): each node's worst
    window ({node: {t, error, windows, over}}: t the window's end, error None where no window counted,
    windows those counted, over those more than RATE_WINDOW_WARN below the rate) and the run's worst.
    Nothing in a run without the watch (the simulator, whose rate is exact; no quota)."""
    if not t.rate_windows:
        return {}
    worst = {
        str(n): {"t": w[1], "error": w[0], "windows": w[2], "over": w[3]}
        for n, w in sorted(t.rate_windows.items())
    }
    errs = [w[0] for w in t.rate_windows.values() if w[0] is not None]
    return {RATE_WINDOW_ERROR_MAX: max(errs) if errs else None, RATE_WINDOW_WORST: worst}


def rate_warning(s: dict) -> str | None:
    """One line when some node fell more than RATE_WINDOW_WARN below its rate in a window of the watch
    (its figure a floor: mechanism/ratewatch.py reads a shortfall low rather than high)."""
    err = s.get(RATE_WINDOW_ERROR_MAX)
    if err is None or err <= RATE_WINDOW_WARN:
        return None
    worst = s.get(RATE_WINDOW_WORST) or {}
    bad = sorted(
        ((w["error"], n, w["t"]) for n, w in worst.items() if (w.get("error") or 0.0) > RATE_WINDOW_WARN),
        reverse=True,
    )
    e, n, at = bad[0] if bad else (err, "?", None)
    where = f" at t={at:.1f} s" if at is not None else ""
    counted = sum(w.get("windows", 0) for w in worst.values())
    over = sum(w.get("over", 0) for w in worst.values())
    share = f" in {over} of the run's {counted} windows" if counted else ""
    return (
        f"node {n} fell {e:.1%} below its CPU rate in its worst window{where}; {len(bad)} nodes fell more "
        f"than {RATE_WINDOW_WARN:.0%} below{share}: the host took CPU the nodes were due, and times there "
        "are stretched by at least as much"
    )


def _hetero_util_energy(t: Tally, facts: RunFacts, total_cpu: float, makespan: float) -> tuple[float, float]:
    """Utilisation and energy of a cluster whose nodes differ in rate: U is the CPU used over the
    cluster's capacity (each node's cores at its own rate), and each node i draws P = B + X*u_i, u_i its
    own CPU over its own capacity (the same B and X for every node), so E = sum_i (B + X*u_i) * T; on
    alike nodes both are paper 003's."""
    per_core = [facts.cores_per_node * r * makespan for r in facts.node_rates]
    capacity = sum(per_core)
    if capacity <= 0:
        return 0.0, facts.idle_watts * facts.nodes * makespan
    busy = sum(t.node_cpu(n) / cap for n, cap in enumerate(per_core))
    energy = (facts.idle_watts * facts.nodes + facts.busy_watts * busy) * makespan
    return total_cpu / capacity, energy


#: Marks the per-class progress rates in a summary: ``<unit>_per_s.<class>``.
RATE_MARK = "_per_s."


def is_rate(key: str) -> bool:
    return RATE_MARK in key


def rate_label(key: str) -> str:
    """``barriers_per_s.io`` -> ``barriers/s, io``."""
    unit, cls = key.split(RATE_MARK, 1)
    return f"{unit}/s, {cls}"


def progress_rates(events: Iterable[dict]) -> dict[str, float]:
    """Paper 002's metric, per job class: ``<unit>_per_s.<class>`` (unit "barriers", or "iterations" for
    point-to-point patterns), the mean over the class's jobs of progress / time from the job's start to
    its last progress report (so a job that finishes early is not diluted by the time after it)."""
    return tally(events).progress_rates()


def paired_fraction(events: Iterable[dict]) -> float | None:
    """Fraction of gang quanta in which two matrix rows shared the CPU (paired gang); None without slots."""
    return tally(events).paired_fraction()


def slot_skews_ms(events: Iterable[dict]) -> list[float]:
    """Per slot: latest minus earliest node's switch effect, emulated ms (slots seen by 2+ nodes)."""
    return tally(events).skews_ms()


def _pct(vals: list[float], q: float) -> float | None:
    if not vals:
        return None
    s = sorted(vals)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def write(
    run_dir: Path,
    events: Iterable[dict] | Tally,
    facts: RunFacts,
    extra: dict | None = None,
    dedicated: Dedicated | None = None,
) -> dict:
    """jobs.csv and summary.json from the events (any iterable: a list, or a file read line by line; or
    their :class:`Tally`). ``dedicated``: the run's jobs' dedicated run times (:func:`summarize`)."""
    t = events if isinstance(events, Tally) else tally(events)
    rows = t.rows()
    columns = JOB_COLUMNS
    if facts.node_rates:  # each job's nodes' rates beside its nodes
        at = JOB_COLUMNS.index("allocated_resources") + 1
        columns = [*JOB_COLUMNS[:at], ALLOCATED_RATES, *JOB_COLUMNS[at:]]
        for r in rows:
            r[ALLOCATED_RATES] = rates_by_node(facts.node_rates, t.nodes_of.get(r["job_id"], ()))
    if t.local:
        columns = [*columns, LOCAL_SLOWDOWN]
        slow = t.local_slowdowns()
        for r in rows:
            r[LOCAL_SLOWDOWN] = slow.get(r["job_id"])
    if t.has_parallel_slowdown(dedicated, facts.parallel_slowdown_always):
        columns = [*columns, PARALLEL_SLOWDOWN]
        par = t.parallel_slowdowns(rows, dedicated, facts.parallel_slowdown_always)
        for r in rows:
            r[PARALLEL_SLOWDOWN] = par.get(r["job_id"])
    with open(run_dir / "jobs.csv", "w", newline="") as fh:
        w = csv.writer(fh)  # a row as its list of columns: what csv.DictWriter writes, without its checks
        w.writerow(columns)
        for r in rows:
            w.writerow(
                [
                    "" if v is None else (round(v, 6) if isinstance(v, float) else v)
                    for v in map(r.get, columns)
                ]
            )
    summary = summarize(t, facts, dedicated, rows)
    extra = dict(extra or {})
    planned = extra.pop(JOBS_PLANNED, None)
    if planned is not None and planned > summary["jobs"]:
        # A run interrupted before every arrival: the jobs it never reached are part of what it was asked,
        # and the summary says how many (jobs.csv has rows only for the jobs that arrived).
        summary[JOBS_NEVER_SUBMITTED] = planned - summary["jobs"]
    summary.update(extra)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


class ResultsError(ValueError):
    """A folder whose results cannot be rebuilt; the message says why, in one line."""


def run_folders(path: Path) -> list[Path]:
    """The run folders at or below ``path`` (a run, or a folder of repetitions or sweep variants): those
    holding an event log (``events.jsonl`` or ``events.jsonl.zst``, or the per-component ``events/*.jsonl``
    of a real run)."""

    def is_run(p: Path) -> bool:
        return ev.find_log(p) is not None or any((p / "events").glob("*.jsonl"))

    if is_run(path):
        return [path]
    return sorted(p for p in path.rglob("*") if p.is_dir() and p.name != "events" and is_run(p))


def rebuild(run_dir: Path, ended: str | None = None, allow_empty: bool = False) -> dict:
    """Rewrites ``run_dir``'s jobs.csv and summary.json from its events, for a run of either backend,
    including one whose driver was killed (then only ``events/*.jsonl`` exist: they are merged into
    ``events.jsonl`` first, or into ``events.jsonl.zst`` where the run left that or its scenario says
    ``results.events: zstd``). The run's facts come from its ``scenario.yaml`` and its events; what the
    driver recorded in an earlier summary.json (how the run ended, the error, start-up figures) is kept,
    and ``ended`` fills it in when the driver recorded nothing. ``allow_empty``: a run that stopped
    before any event (Ray never started) still gets its summary."""

    run_dir = Path(run_dir)
    parts = sorted((run_dir / "events").glob("*.jsonl"))
    merged = ev.find_log(run_dir)
    if not parts and merged is None and not allow_empty:
        raise ResultsError(f"{run_dir}: no events.jsonl and no events/*.jsonl; not a run's results folder")
    try:
        scn = load(run_dir / "scenario.yaml")
    except ScenarioError as exc:
        raise ResultsError(f"{run_dir}: its scenario.yaml cannot be read back ({exc})") from None
    real = bool(parts) or (run_dir / "events").is_dir()
    events: Iterable[dict]
    if parts:  # the per-component logs are the truth of a real run
        events = ev.merge(parts, merged or ev.log_file(run_dir, scn.results.events))
    elif merged is not None:
        # A simulated run's log is read once, as it streams (held whole, the 100,000-job run's 1 GB log
        # took 8.9 GB); a real run's is read for its facts first, so it is held.
        events = ev.read_jsonl(merged) if not real else list(ev.read_jsonl(merged))
    else:
        events = []
    old: dict = {}
    try:
        old = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        pass
    if real:
        tdf = next((e["tdf"] for e in events if e["kind"] == ev.RUN_INFO and "tdf" in e), None)
        envelope = next((e["envelope"] for e in events if e["kind"] == ev.RUN_INFO and "envelope" in e), None)
        facts = facts_of(scn, "ray", tdf or old.get("tdf") or 1.0, envelope or old.get("envelope", "unknown"))
    else:
        facts = facts_of(scn, "sim", 1.0, "modelled")
    dedicated = Dedicated(scn, None, old.get("host_speed_s"))  # the workload: rebuilt only if needed
    errors: list[str] = []

    def noting_errors(stream: Iterable[dict]) -> Iterator[dict]:
        for e in stream:
            if e["kind"] == ev.RUN_ERROR:
                errors.append(e["error"])
            yield e

    t = tally(noting_errors(events))  # one pass: the summary and jobs.csv both read this Tally
    computed = summarize(t, facts, dedicated)
    extra = {k: v for k, v in old.items() if k not in computed}
    if not extra.get("ended"):
        extra["ended"] = ended or "not recorded: the driver stopped before it could say (killed?)"
    if not extra.get("error") and errors:
        extra["error"] = errors[0]
    extra.setdefault("error", None)
    return write(run_dir, t, facts, extra, dedicated)


def table(summaries: list[dict], title: str = "results"):
    """A rich table of one or more summaries (one column per run)."""

    t = Table(title=title)
    t.add_column("metric")
    for s in summaries:
        t.add_column(f"{s['scheduler']} ({s['backend']})", justify="right")

    def fmt(v, unit=""):
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3f}{unit}" if abs(v) < 1000 else f"{v:,.0f}{unit}"
        return f"{v}{unit}"

    rows = [
        ("jobs (finished/total)", lambda s: f"{s['jobs_by_state'].get(FinalState.COMPLETED, 0)}/{s['jobs']}"),
        (
            "failed / killed / rejected",
            lambda s: "/".join(
                str(s["jobs_by_state"].get(k, 0))
                for k in (FinalState.FAILED, FinalState.KILLED, FinalState.REJECTED)
            ),
        ),
        ("mean response time", lambda s: fmt(s["mean_response_time_s"], " s")),
        ("mean waiting time", lambda s: fmt(s["mean_waiting_time_s"], " s")),
        ("mean slowdown", lambda s: fmt(s["mean_slowdown"])),
        ("utilisation", lambda s: fmt(s["utilization"])),
        ("makespan", lambda s: fmt(s["makespan_s"], " s")),
        ("energy", lambda s: fmt(s["energy_j"], " J")),
        ("TDF", lambda s: fmt(s["tdf"])),
        ("envelope", lambda s: s["envelope"] + ("" if s["cpu_rate_fixed"] else " (rate NOT fixed)")),
        ("CPU-rate error (max)", lambda s: fmt(s["cpu_rate_error_max"])),
        ("CPU-rate error, worst window", lambda s: fmt(s.get(RATE_WINDOW_ERROR_MAX))),
        ("gang switch skew p99", lambda s: fmt(s["gang_skew_ms_p99"], " ms")),
        ("quanta paired", lambda s: fmt(s.get("quanta_paired_fraction"))),
    ]
    for key in sorted({k for s in summaries for k in s if is_rate(k)}):
        rows.append((rate_label(key), lambda s, key=key: fmt(s.get(key))))
    for name, f in rows:
        t.add_row(name, *[f(s) for s in summaries])
    return t
