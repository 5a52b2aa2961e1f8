"""Turns a scenario's workload section into jobs. Same seed, same jobs (DESIGN.md, decision 7)."""

from __future__ import annotations

import numpy as np

from testbed import profiles
from testbed.jobs import Job, SyntheticApp
from testbed.scenario import AppConfig, Scenario
from testbed.schedulers import registry
from testbed.schedulers.base import JobSpec, job_wait


def _app(
    cfg: AppConfig, scn: Scenario, iterations: int | None = None, memory_mb: float = 0.0
) -> SyntheticApp:
    fields = cfg.resolved()  # the profile's fields, overridden by those given explicitly
    # One source of truth for memory: the job's (JobEntry / JobClass), which also becomes JobSpec.memory_mb.
    fields["memory_mb"] = memory_mb
    if iterations is not None:
        fields["iterations"] = iterations
    # A coscheduling scheme ties the receive wait mode to itself (paper 003, table 1); a job keeps its own
    # only where the scheduler allows it and the scenario set it explicitly.
    fields["wait_mode"], fields["spin_time_us"] = job_wait(
        registry.get(scn.scheduler.name),
        scn.scheduler.params,
        wait_mode=cfg.wait_mode,
        spin_time_us=cfg.spin_time_us,
        explicit="wait_mode" in cfg.model_fields_set,
    )
    # ... and so does the sender's wait for the NIC's acknowledgement (CC); "none" under every other one.
    fields["send_wait"] = registry.get(scn.scheduler.name).send_wait
    return SyntheticApp(**fields)


def _profile_sizes(cfg: AppConfig, lo: int, hi: int) -> list[int]:
    """A profile's process counts within [lo, hi]; empty without a profile (or if none fits)."""
    if cfg.profile is None:
        return []
    return [s for s in profiles.get(cfg.profile).sizes if lo <= s <= hi]


def _class_of(app: SyntheticApp) -> str:
    if app.gio and app.gcomp == 0:
        return "io"
    if app.gio:
        return "mixed"
    return "compute"


def build(scn: Scenario) -> list[Job]:
    rate = scn.cluster.cpu_rate
    jobs: list[Job] = []
    for i, entry in enumerate(scn.workload.jobs):
        app = _app(entry.app, scn, memory_mb=entry.memory())
        jobs.append(
            Job(
                JobSpec(
                    job_id=entry.id or f"j{i}",
                    size=entry.size,
                    submit_time=entry.submit_s,
                    estimate=entry.estimate_s if entry.estimate_s is not None else app.ideal_runtime(rate),
                    memory_mb=app.memory_mb,
                    exclusive=entry.exclusive,
                    job_class=entry.job_class or entry.app.profile or _class_of(app),
                ),
                app,
            )
        )
    gen = scn.workload.generator
    if gen is not None:
        rng = np.random.default_rng(scn.workload.seed)
        weights = np.array([c.weight for c in gen.classes], dtype=float)
        weights /= weights.sum()
        t = gen.start_s
        base = len(jobs)
        for k in range(gen.count):
            if k:
                t += rng.exponential(gen.mean_interarrival_s)
            cls = gen.classes[int(rng.choice(len(gen.classes), p=weights))]
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
            if dur is None:
                iterations = max(1, round(profiles.get(cls.app.profile).iterations() * d.scale))
            else:
                per_iter = _app(cls.app, scn, iterations=1).ideal_runtime(rate)
                iterations = max(1, round(dur / per_iter)) if per_iter > 0 else 1
            app = _app(cls.app, scn, iterations=iterations, memory_mb=cls.memory(size))
            jobs.append(
                Job(
                    JobSpec(
                        job_id=f"j{base + k}",
                        size=size,
                        submit_time=round(float(t), 6),
                        estimate=app.ideal_runtime(rate),
                        memory_mb=app.memory_mb,
                        job_class=cls.name,
                    ),
                    app,
                )
            )
    jobs.sort(key=lambda j: (j.spec.submit_time, j.job_id))
    return jobs
