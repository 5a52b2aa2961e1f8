"""Turns a scenario's workload section into jobs. Same seed, same jobs (docs/architecture.md, "Scenarios are
data").

Five sources, each a function of the scenario: the explicit ``jobs``, the ``generator`` (Poisson, or the
Lublin-Feitelson model: testbed/scenario/lublin.py), a
``trace`` replayed, paper 001's ``divisible`` tasks (testbed/scenario/divisible.py), paper 004's
``local_users`` (testbed/scenario/localusers.py: sessions on their owners' nodes, no scheduler). Each
says when a job arrives, how many processes it has and how its work is sized; the job's program kind
answers the rest in one call (:meth:`ProgramKind.plan`), and the scheduler settles how its processes wait.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os

from testbed.apps import registry as kinds
from testbed.apps.base import AppConfig, JobPlan, Shape, WaitSpec
from testbed.apps.localuser import LocalUserConfig, session_class
from testbed.core.jobs import Job
from testbed.scenario.divisible import draw as draw_divisible
from testbed.scenario.localusers import draw as draw_local_users
from testbed.scenario.localusers import previous as previous_session
from testbed.scenario.model import LublinGenerator, Scenario
from testbed.scenario.swf import TraceError
from testbed.scenario.swf import read as read_trace
from testbed.schedulers import registry
from testbed.schedulers.base import JobSpec, RealTime, job_wait


def build(scn: Scenario) -> list[Job]:
    waits = _Waits(scn)
    jobs = [
        *_explicit(scn, waits),
        *_generated(scn, waits),
        *_replayed(scn, waits),
        *_divisible(scn, waits),
        *_local_users(scn, waits),
    ]
    jobs.sort(key=lambda j: (j.spec.submit_time, j.job_id))
    return jobs


class _Waits:
    """How a job's processes wait (paper 003, table 1): a coscheduling scheme ties the receive wait mode
    to itself; a job keeps its own only where the scheduler allows it and the scenario set it explicitly;
    the sender's wait for the NIC's acknowledgement is the scheduler's ("none" but under CC)."""

    def __init__(self, scn: Scenario) -> None:
        self.scn = scn
        self.sched = registry.get(scn.scheduler.name)

    def of(self, plan: JobPlan) -> WaitSpec:
        mode, spin, explicit = plan.wait if plan.wait is not None else ("block", 300.0, False)
        params = self.scn.scheduler.params
        mode, spin = job_wait(self.sched, params, wait_mode=mode, spin_time_us=spin, explicit=explicit)
        return WaitSpec(mode, spin, self.sched.send_wait)


def _job(spec: JobSpec, plan: JobPlan, waits: _Waits) -> Job:
    """The job from what its source fixed (``spec``) and what its kind answered (``plan``)."""
    realtime = None if plan.realtime is None else RealTime(*plan.realtime)
    owner = kinds.get(plan.app.kind).owner_node(plan.app)  # a local user's session: its owner's node
    # Copied only when something changes: a trace's 10,000 jobs spent a tenth of their build copying it as
    # it was.
    if plan.spec_fields or (realtime, owner) != (spec.realtime, spec.owner_node):
        spec = dataclasses.replace(spec, realtime=realtime, owner_node=owner, **plan.spec_fields)
    return Job(spec, plan.app, waits.of(plan))


def _plan(cfg: AppConfig, submit: float, scn: Scenario, shape: Shape = Shape()) -> JobPlan:
    # On a heterogeneous cluster a job is sized for its slowest node (ClusterConfig.min_rate); a job
    # that runs on its owner's node (a local user's session) for that node.
    kind = kinds.get(cfg.kind)
    owner = kind.owner_node(cfg)
    rate = scn.cluster.min_rate() if owner is None else scn.cluster.node_info()[owner].rate
    return kind.plan(cfg, submit, rate, shape)


def _explicit(scn: Scenario, waits: _Waits) -> list[Job]:
    out = []
    for i, entry in enumerate(scn.workload.jobs):
        plan = _plan(entry.app, entry.submit_s, scn, Shape(size=entry.size))
        spec = JobSpec(
            job_id=entry.id or f"j{i}",
            size=entry.size,
            submit_time=entry.submit_s,
            estimate=entry.estimate_s if entry.estimate_s is not None else plan.estimate,
            memory_mb=entry.memory(),
            exclusive=entry.exclusive,
            job_class=entry.job_class or plan.job_class,
        )
        out.append(_job(spec, plan, waits))
    return out


def _generated(scn: Scenario, waits: _Waits) -> list[Job]:
    """Poisson arrivals over the generator's classes; each job's length is drawn (or its program's own),
    its size uniform (or among the sizes its program runs at). Or the Lublin-Feitelson model's jobs."""
    gen = scn.workload.generator
    if gen is None:
        return []
    if isinstance(gen, LublinGenerator):
        return _lublin(scn, gen, waits)
    import numpy as np  # here: a trace's or a list's jobs need no numpy (its import: 0.14 s of CPU)

    rng = np.random.default_rng(scn.workload.seed)
    weights = np.array([c.weight for c in gen.classes], dtype=float)
    weights /= weights.sum()
    choices = {
        id(c): kinds.get(c.app.kind).size_choices(c.app, gen.size.min, gen.size.max) for c in gen.classes
    }
    out = []
    t = gen.start_s
    base = len(scn.workload.jobs)
    for k in range(gen.count):
        if k:
            t += rng.exponential(gen.mean_interarrival_s)
        cls = gen.classes[int(rng.choice(len(gen.classes), p=weights))]
        shape = _draw_length(gen.duration, rng)
        sizes = choices[id(cls)]
        size = (
            sizes[int(rng.integers(len(sizes)))]
            if sizes
            else int(rng.integers(gen.size.min, gen.size.max + 1))
        )
        submit = round(float(t), 6)
        plan = _plan(cls.app, submit, scn, dataclasses.replace(shape, size=size))
        # A program that fixes its own process count (a pipeline's stages) keeps it; the draw above is
        # made all the same, so the other classes' draws do not depend on which class came up.
        size = plan.size or size
        spec = JobSpec(
            job_id=f"j{base + k}",
            size=size,
            submit_time=submit,
            estimate=plan.estimate,
            memory_mb=cls.memory(size),
            job_class=cls.name,
        )
        out.append(_job(spec, plan, waits))
    return out


def _lublin(scn: Scenario, gen: LublinGenerator, waits: _Waits) -> list[Job]:
    """The Lublin-Feitelson model's jobs (testbed/scenario/lublin.py), times scaled, the first arriving at
    ``0``; each runs ``gen.app`` for its drawn run time, as a trace's job does."""
    from testbed.scenario import lublin  # numpy's, imported only for the model's draws

    drawn = lublin.draw(
        gen.count, scn.cluster.nodes, scn.workload.seed, gen.job_types == "split", gen.start_hour
    )
    t0 = drawn[0].submit_s if drawn else 0.0
    base = len(scn.workload.jobs)
    out = []
    for k, d in enumerate(drawn):
        # Python floats of the drawn numpy values (the same doubles): numpy scalars made every time of the
        # simulation one (its arithmetic and rounding several times a float's, and each log record's
        # times converted by the writer); 100,000 jobs, benchmarks/sim_scale.py.
        run = float(d.run_s * gen.time_scale)
        submit = float(round((d.submit_s - t0) * gen.time_scale * gen.arrival_scale, 6))
        plan = _plan(
            gen.app, submit, scn, Shape(size=d.size, work=(run, max(1, math.ceil(run / gen.step_s))))
        )
        spec = JobSpec(
            job_id=f"j{base + k}",
            size=d.size,
            submit_time=submit,
            estimate=plan.estimate if gen.estimate == "runtime" else None,
            job_class=d.job_type if gen.job_types == "split" else "lublin",
        )
        out.append(_job(spec, plan, waits))
    return out


def _draw_length(d, rng) -> Shape:
    if d.dist == "exponential":
        return Shape(duration_s=rng.exponential(d.mean_s))
    if d.dist == "erlang":
        return Shape(duration_s=rng.gamma(d.shape, d.mean_s / d.shape))
    if d.dist == "fixed":
        return Shape(duration_s=d.mean_s)
    return Shape(own_length_scale=d.scale)  # "profile": the class's program sets the length


def _replayed(scn: Scenario, waits: _Waits) -> list[Job]:
    """The trace's jobs (testbed/scenario/swf.py), arrivals from the earliest replayed job's, scaled; jobs
    that did not run (run time or processors unknown or 0) are left out."""
    tr = scn.workload.trace
    if tr is None:
        return []
    replayed = _trace_selection(scn)
    # Arrivals from the earliest replayed job's: a trace not in submission order never gives a negative
    # time (the jobs are sorted by arrival at the end).
    t0 = min((tj.submit for tj in replayed), default=0.0)
    out: list[Job] = []
    for tj in replayed:
        run = tj.run * tr.time_scale
        submit = round((tj.submit - t0) * tr.time_scale * tr.arrival_scale, 6)
        plan = _plan(tr.app, submit, scn, Shape(work=(run, max(1, math.ceil(run / tr.step_s)))))
        if tr.estimate == "requested" and tj.req_time is not None:
            estimate = tj.req_time * tr.time_scale
        elif tr.estimate == "none":
            estimate = None
        else:
            estimate = plan.estimate
        spec = JobSpec(
            job_id=f"t{tj.job}",
            size=_trace_size(tj, tr, scn.cluster.nodes),
            submit_time=submit,
            estimate=estimate,
            job_class=tr.job_class,
        )
        out.append(_job(spec, plan, waits))
    return out


def _trace_size(tj, tr, nodes: int) -> int:
    """A trace job's size: its processors scaled; one wider than the cluster clamped only when asked
    (``oversize: clamp``; ``refuse`` and ``drop`` never get here)."""
    size = max(1, round(tj.procs * tr.size_scale))
    return min(nodes, size) if tr.oversize == "clamp" else size


_TRACES: dict[tuple, tuple] = {}  # the last trace read: (path, its size and change time) -> its jobs


def _trace_jobs(path: str) -> tuple:
    """The trace's jobs in file order, read once for as long as the file stays as it was: a run reads it
    for its checks, its notes and its workload (three times before; docs/measurements.md)."""
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
    jobs = _TRACES.get(key)
    if jobs is None:
        jobs = tuple(read_trace(path))
        _TRACES.clear()  # one trace kept: a sweep of traces holds none but its current one
        _TRACES[key] = jobs
    return jobs


def _trace_picked(scn: Scenario) -> list:
    """The trace jobs replayed, in file order: those that ran (run time and processors known and above
    0) and whose status is kept, after ``skip``, at most ``count``; one wider than the cluster dropped
    if ``oversize: drop`` says so."""
    tr = scn.workload.trace
    nodes = scn.cluster.nodes
    keep = None if tr.status is None else set(tr.status)

    def usable(tj) -> bool:
        if tj.run <= 0 or tj.procs <= 0 or (keep is not None and tj.status not in keep):
            return False
        return not (tr.oversize == "drop" and round(tj.procs * tr.size_scale) > nodes)

    return list(
        itertools.islice(
            filter(usable, _trace_jobs(tr.path)), tr.skip, None if tr.count is None else tr.skip + tr.count
        )
    )


def _trace_selection(scn: Scenario):
    """:func:`_trace_picked`, where one wider than the cluster refuses the trace (a :class:`TraceError`
    naming it and the fix) unless ``oversize`` says otherwise."""
    tr = scn.workload.trace
    nodes = scn.cluster.nodes
    picked = _trace_picked(scn)
    if tr.oversize == "refuse":
        wide = [tj for tj in picked if round(tj.procs * tr.size_scale) > nodes]
        if wide:
            tj = wide[0]
            raise TraceError(
                f"{len(wide)} job(s) wider than the cluster's {nodes} nodes, the first job {tj.job} with "
                f"{tj.procs} processors; set workload.trace.oversize: clamp, drop or reject, or "
                "workload.trace.size_scale, or add nodes"
            )
    return picked


def trace_notes(scn: Scenario) -> list[str]:
    """What the user should know about the trace's jobs before they run: how many were left out by their
    status, clamped to the cluster or dropped for their width, and how many arrive before a job above
    them in the file (replayed sorted by arrival, so the file's order is not the replay's)."""
    tr = scn.workload.trace
    if tr is None:
        return []
    nodes = scn.cluster.nodes
    ran = [tj for tj in _trace_jobs(tr.path) if tj.run > 0 and tj.procs > 0]
    notes = []
    if tr.status is not None:
        left = sum(1 for tj in ran if tj.status not in set(tr.status))
        notes.append(
            f"workload.trace.status {tr.status}: {left} of the trace's {len(ran)} jobs left out by status"
        )
    wide = sum(1 for tj in ran if round(tj.procs * tr.size_scale) > nodes)
    if wide and tr.oversize in ("clamp", "drop", "reject"):
        what = {
            "clamp": f"clamped to {nodes} nodes",
            "drop": "dropped",
            "reject": "submitted for the scheduler to reject",
        }
        notes.append(
            f"workload.trace.oversize {tr.oversize}: {wide} trace job(s) wider than {nodes} nodes "
            f"{what[tr.oversize]}"
        )
    late, latest = 0, -math.inf
    for tj in _trace_picked(scn):
        late += tj.submit < latest
        latest = max(latest, tj.submit)
    if late:
        notes.append(
            f"workload.trace: {late} trace job(s) out of submission order: replayed sorted by arrival"
        )
    return notes


def _divisible(scn: Scenario, waits: _Waits) -> list[Job]:
    """Paper 001's tasks: the policies size them themselves, so no estimate."""
    gen = scn.workload.divisible
    if gen is None:
        return []
    tasks = draw_divisible(gen, scn.cluster.nodes, scn.workload.seed)
    return [_job(t.spec, _plan(t.app, t.spec.submit_time, scn), waits) for t in tasks]


def _local_users(scn: Scenario, waits: _Waits) -> list[Job]:
    """Paper 004's local users' sessions: each a ``localuser`` job of one process on its owner's node, its
    length drawn (testbed/scenario/localusers.py); the decision core starts it there as it arrives, or,
    under ``overlap: wait``, once the same user's previous session has ended (``Job.after``)."""
    out = []
    for job_id, node, submit, length, u in draw_local_users(scn.workload.local_users, scn.workload.seed):
        cfg = LocalUserConfig(profile=u.profile, session_s=max(length, 1e-3), node=node)
        plan = _plan(cfg, submit, scn)
        spec = JobSpec(
            job_id=job_id,
            size=1,
            submit_time=submit,
            estimate=plan.estimate,
            memory_mb=kinds.get(cfg.kind).memory_mb(cfg, 1),
            job_class=u.job_class or session_class(u.profile),
        )
        after = previous_session(job_id) if u.overlap == "wait" else None
        out.append(dataclasses.replace(_job(spec, plan, waits), after=after))
    return out
