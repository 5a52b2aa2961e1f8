"""Turns a scenario's workload section into jobs. Same seed, same jobs (docs/architecture.md, "Scenarios are
data")."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from testbed.apps import profiles
from testbed.apps import registry as kinds
from testbed.apps.base import AppConfig, WaitSpec
from testbed.core.jobs import Job
from testbed.scenario.model import Scenario
from testbed.schedulers import registry
from testbed.schedulers.base import JobSpec, RealTime, job_wait


def _realtime(kind, app: AppConfig, rate: float) -> RealTime | None:
    """What a real-time program tells the policies (its period, buffer, per-rank work, max wait)."""
    facts = kind.realtime(app, rate)
    return None if facts is None else RealTime(*facts)


def _wait(cfg: AppConfig, scn: Scenario) -> WaitSpec:
    """How the job's processes wait. A coscheduling scheme ties the receive wait mode to itself (paper 003,
    table 1); a job keeps its own only where the scheduler allows it and the scenario set it explicitly;
    the sender's wait for the NIC's acknowledgement is the scheduler's ("none" but under CC)."""
    sched = registry.get(scn.scheduler.name)
    asked = kinds.get(cfg.kind).wait_request(cfg)
    mode, spin, explicit = asked if asked is not None else ("block", 300.0, False)
    mode, spin = job_wait(sched, scn.scheduler.params, wait_mode=mode, spin_time_us=spin, explicit=explicit)
    return WaitSpec(mode, spin, sched.send_wait)


def _profile_sizes(cfg: AppConfig, lo: int, hi: int) -> list[int]:
    """A profile's process counts within [lo, hi]; empty without a profile (or if none fits)."""
    name = getattr(cfg, "profile", None)
    if name is None:
        return []
    return [s for s in profiles.get(name).sizes if lo <= s <= hi]


def build(scn: Scenario) -> list[Job]:
    rate = scn.cluster.cpu_rate
    jobs: list[Job] = []
    for i, entry in enumerate(scn.workload.jobs):
        kind = kinds.get(entry.app.kind)
        app = kind.resolve(entry.app)
        estimate = entry.estimate_s if entry.estimate_s is not None else kind.ideal_runtime(app, rate)
        job_class = entry.job_class or getattr(entry.app, "profile", None) or kind.default_class(app)
        jobs.append(
            Job(
                JobSpec(
                    job_id=entry.id or f"j{i}",
                    size=entry.size,
                    submit_time=entry.submit_s,
                    estimate=estimate,
                    memory_mb=entry.memory(),
                    exclusive=entry.exclusive,
                    job_class=job_class,
                    realtime=_realtime(kind, app, rate),
                ),
                app,
                _wait(entry.app, scn),
            )
        )
    gen = scn.workload.generator
    if gen is not None:
        rng = np.random.default_rng(scn.workload.seed)
        weights = np.array([c.weight for c in gen.classes], dtype=float)
        weights /= weights.sum()
        t = gen.start_s
        base = len(jobs)
        waits = {id(c): _wait(c.app, scn) for c in gen.classes}
        for k in range(gen.count):
            if k:
                t += rng.exponential(gen.mean_interarrival_s)
            cls = gen.classes[int(rng.choice(len(gen.classes), p=weights))]
            wait = waits[id(cls)]
            d = gen.duration
            if d.dist == "exponential":
                dur = rng.exponential(d.mean_s)
            elif d.dist == "erlang":
                dur = rng.gamma(d.shape, d.mean_s / d.shape)
            elif d.dist == "fixed":
                dur = d.mean_s
            else:  # "profile": the class's profile sets the length
                dur = None
            sizes = _profile_sizes(cls.app, gen.size.min, gen.size.max)
            if sizes:
                size = sizes[int(rng.integers(len(sizes)))]
            else:
                size = int(rng.integers(gen.size.min, gen.size.max + 1))
            kind = kinds.get(cls.app.kind)
            # A program that fixes its own process count (a pipeline's stages) keeps it; the draw above is
            # made all the same, so the other classes' draws do not depend on which class came up.
            size = kind.fixed_size(cls.app) or size
            app = kind.resolve(cls.app)
            if dur is None:
                app = kind.with_profile_length(app, cls.app.profile, d.scale)
            else:
                app = kind.with_duration(app, dur, rate)
            jobs.append(
                Job(
                    JobSpec(
                        job_id=f"j{base + k}",
                        size=size,
                        submit_time=round(float(t), 6),
                        estimate=kind.ideal_runtime(app, rate),
                        memory_mb=cls.memory(size),
                        job_class=cls.name,
                        realtime=_realtime(kind, app, rate),
                    ),
                    app,
                    wait,
                )
            )
    if scn.workload.trace is not None:
        jobs.extend(_replay(scn.workload.trace, scn.cluster.nodes, scn))
    if scn.workload.divisible is not None:
        from testbed.scenario.divisible import draw

        drawn = draw(scn.workload.divisible, scn.cluster.nodes, scn.workload.seed)
        jobs.extend(Job(j.spec, j.app, _wait(j.app, scn)) for j in drawn)
    jobs = [_bind(j, rate) for j in jobs]
    jobs.sort(key=lambda j: (j.spec.submit_time, j.job_id))
    return jobs


def _bind(job: Job, rate: float) -> Job:
    """The job as its kind runs it once its arrival is known, with the spec fields the kind adds for the
    policies (:meth:`ProgramKind.bind`: a deadline, a divisible load's costs)."""
    app, fields = job.kind.bind(job.app, job.spec.submit_time, rate)
    if app is job.app and not fields:
        return job
    return Job(dataclasses.replace(job.spec, **fields), app, job.wait)


def _replay(tr, nodes: int, scn: Scenario) -> list[Job]:
    """The trace's jobs (testbed/scenario/swf.py), arrivals from the first replayed job's, scaled; jobs
    that did not
    run (run time or processors unknown or 0) are left out."""
    from testbed.scenario import swf

    kind = kinds.get(tr.app.kind)
    template = kind.resolve(tr.app)
    wait = _wait(tr.app, scn)
    out: list[Job] = []
    t0 = None
    usable = (j for j in swf.read(tr.path) if j.run > 0 and j.procs > 0)
    for i, tj in enumerate(usable):
        if i < tr.skip:
            continue
        if tr.count is not None and len(out) >= tr.count:
            break
        t0 = tj.submit if t0 is None else t0
        run = tj.run * tr.time_scale
        steps = max(1, math.ceil(run / tr.step_s))
        app = kind.with_work(template, run, steps)
        if tr.estimate == "requested" and tj.req_time is not None:
            estimate = tj.req_time * tr.time_scale
        elif tr.estimate == "none":
            estimate = None
        else:
            estimate = kind.ideal_runtime(app, scn.cluster.cpu_rate)
        spec = JobSpec(
            job_id=f"t{tj.job}",
            size=min(nodes, max(1, round(tj.procs * tr.size_scale))),
            submit_time=round((tj.submit - t0) * tr.time_scale * tr.arrival_scale, 6),
            estimate=estimate,
            job_class=tr.job_class,
        )
        out.append(Job(spec, app, wait))
    return out
