"""Paper 001's workload of divisible-load tasks (§6.1; docs/policies.md, "Evaluation in the paper"): the
``workload.divisible`` section of a scenario and the tasks it draws.

* Poisson arrivals, each bringing ``tasks_per_arrival`` tasks (uniform, 1..10 in the paper).
* sigma ~ Normal(mean, std) (100, 100 in the paper), kept positive by drawing again (truncated at 0).
* D uniform between the task's shortest execution time (alone on the fastest number of its nodes) and
  its longest (on one node).
* Load: the sum of the tasks' shortest execution times over the time they arrive in. The paper sets the
  mean inter-arrival time to the mean shortest execution time over the load, which counts *arrivals*: with
  5.5 tasks an arrival the offered load is 5.5 times the nominal one. ``load_counts: tasks`` (the default)
  scales the gaps by the mean tasks per arrival, so the offered load is the nominal one; ``arrivals`` is
  the paper's rule as written. The means are those of the drawn tasks, so a seed's offered load is exact.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from testbed.apps.divisible import DivisibleConfig
from testbed.core.jobs import Job
from testbed.schedulers.base import JobSpec
from testbed.schedulers.divisible import Load, cost_ratio_problem, exec_time, fastest
from testbed.schedulers.inputs import InputModel

#: The most tasks a draw may give (arrivals x tasks_per_arrival.max): the arrivals' own bound times the
#: paper's 10 tasks an arrival. Each task is a job drawn one by one: 10^12 tasks an arrival drew for ever.
MAX_TASKS = 1_000_000


class _Model(InputModel):
    """schedulers/inputs.py says what every input model refuses."""


class TaskCount(_Model):
    min: int = Field(1, ge=1)
    max: int = Field(10, ge=1)

    @model_validator(mode="after")
    def _order(self):
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max}); swap them")
        return self


class SigmaDist(_Model):
    mean: float = Field(100.0, gt=0, description="units of data")
    std: float = Field(100.0, ge=0)


class DivisibleTasks(_Model):
    arrivals: int = Field(..., ge=1, le=100_000, description="Poisson arrivals")
    tasks_per_arrival: TaskCount = Field(default_factory=TaskCount)
    load: float = Field(..., gt=0, description="offered load: shortest execution times per unit of time")
    load_counts: Literal["tasks", "arrivals"] = Field(
        "tasks", description="tasks: the offered load is `load`; arrivals: the paper's rule as written"
    )
    sigma: SigmaDist = Field(default_factory=SigmaDist)
    cms: float = Field(1.0, gt=0, description="emulated s to send one unit of data (Cms)")
    cps: float = Field(1.0, gt=0, description="emulated s to compute one unit of data (Cps)")
    setup_link: float = Field(0.0, ge=0, description="ST: emulated s per chunk sent")
    setup_compute: float = Field(0.0, ge=0, description="SC: emulated s per node's computation")
    unit_bytes: int = Field(1000, ge=1, le=1_000_000, description="real bytes per unit of data")
    nodes: int | None = Field(None, ge=1, description="the most nodes a task may get; null: the cluster's")
    start_s: float = Field(0.0, ge=0)
    job_class: str = "divisible"

    @model_validator(mode="after")
    def _costs(self):
        problem = cost_ratio_problem(self.cms, self.cps)
        if problem:
            raise ValueError(problem)
        most = self.arrivals * self.tasks_per_arrival.max
        if most > MAX_TASKS:
            raise ValueError(
                f"tasks_per_arrival.max: {self.arrivals} arrivals of up to {self.tasks_per_arrival.max} "
                f"tasks each are up to {most} tasks, above the {MAX_TASKS} a workload may draw; lower "
                "tasks_per_arrival.max or arrivals"
            )
        return self


def draw(gen: DivisibleTasks, cluster_nodes: int, seed: int) -> list:
    """The tasks, as jobs of the ``divisible`` kind (their policy fields are added by the kind's bind)."""
    import numpy as np  # here: every scenario loads this model, few draw tasks

    rng = np.random.default_rng([seed, 1])  # a stream of its own: adding it changes no other generator's
    nodes = min(gen.nodes or cluster_nodes, cluster_nodes)
    counts = rng.integers(gen.tasks_per_arrival.min, gen.tasks_per_arrival.max + 1, size=gen.arrivals)
    tasks = []
    for _ in range(int(counts.sum())):
        sigma = 0.0
        while sigma <= 0:
            sigma = float(rng.normal(gen.sigma.mean, gen.sigma.std))
        ld = Load(sigma, gen.cms, gen.cps, gen.setup_link, gen.setup_compute)
        shortest = exec_time(ld, fastest(ld, nodes))
        longest = exec_time(ld, 1)
        tasks.append((sigma, shortest, float(rng.uniform(shortest, longest))))
    mean_short = sum(t[1] for t in tasks) / len(tasks)
    per_arrival = len(tasks) / gen.arrivals if gen.load_counts == "tasks" else 1.0
    gap = mean_short * per_arrival / gen.load
    width = len(str(len(tasks) - 1))
    jobs = []
    t = gen.start_s
    i = 0
    for k, m in enumerate(counts):
        if k:
            t += float(rng.exponential(gap))
        for _ in range(int(m)):
            sigma, _short, deadline = tasks[i]
            app = DivisibleConfig(
                sigma=sigma,
                deadline_s=deadline,
                cms=gen.cms,
                cps=gen.cps,
                setup_link=gen.setup_link,
                setup_compute=gen.setup_compute,
                unit_bytes=gen.unit_bytes,
            )
            spec = JobSpec(f"d{i:0{width}d}", nodes, round(t, 6), job_class=gen.job_class)
            jobs.append(Job(spec, app))
            i += 1
    return jobs
