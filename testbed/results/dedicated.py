"""Each parallel job's run time alone on a dedicated cluster: paper 004's reference for the parallel
slowdown (a job's execution time under the scheme over the same job's alone on the nodes it ran on, at
their rates, nobody else). docs/measurements.md, "Paper 004 in the simulator".

The reference is simulated, for both backends: the job (its program kind's config, its size) runs alone
under plain batch in the project's own simulator (testbed/sim/) on nodes with the rates of those it ran
on. A real dedicated run per job would double a run's time, and the simulator runs the very models the
real processes were measured for. Identical jobs (same config, same nodes' rates in rank order) are
simulated once per run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from testbed.core import events as ev
from testbed.core.jobs import Job
from testbed.scenario import Scenario
from testbed.scenario.workload import build
from testbed.schedulers import registry
from testbed.schedulers.base import NodeInfo
from testbed.sim.engine import network_options, simulate

#: The policy the reference runs under: one job per node, every process running (RunAll).
BASELINE_SCHEDULER = "batch"


class Dedicated:
    """The dedicated run times of one run's jobs, by job id and the nodes of its start. ``jobs``: the
    run's jobs as the workload built them (rebuilt from ``scn`` when not given, only once asked).
    ``host_speed_s``: the speed of the host the reference stands for (apps/speed.py), a real run's own
    as it measured it; by default the scenario's ``cluster.host_speed_s``."""

    def __init__(
        self, scn: Scenario, jobs: Sequence[Job] | None = None, host_speed_s: float | None = None
    ) -> None:
        self._scn = scn
        self._host_speed_s = host_speed_s if host_speed_s is not None else scn.cluster.host_speed_s
        self._jobs = None if jobs is None else {j.job_id: j for j in jobs}
        self._rates = tuple(i.rate for i in scn.cluster.node_info())
        self._times: dict[tuple[str, tuple[float, ...]], float | None] = {}
        #: Simulations run: one per distinct (config, rates), the cache's misses.
        self.simulated = 0

    def time(self, job_id: str, nodes: Sequence[int]) -> float | None:
        """``job_id``'s execution time alone on nodes at the rates of ``nodes`` (rank i on the i-th);
        None for a job the workload does not hold or that did not end alone."""
        job = self._job(job_id)
        if job is None or not nodes or not all(0 <= n < len(self._rates) for n in nodes):
            return None
        rates = tuple(self._rates[n] for n in nodes)
        key = (job.app.model_dump_json(), rates)  # the size is len(rates)
        if key not in self._times:
            self._times[key] = self._simulate(job, rates)
        return self._times[key]

    def _job(self, job_id: str) -> Job | None:
        if self._jobs is None:
            self._jobs = {j.job_id: j for j in build(self._scn)}
        return self._jobs.get(job_id)

    def _simulate(self, job: Job, rates: tuple[float, ...]) -> float | None:
        self.simulated += 1
        # The job as the workload built it, arriving at 0 on exactly these nodes; its processes wait as
        # under batch (a scheme's wait mode or send acknowledgement is the scheme's cost, not the job's).
        spec = dataclasses.replace(
            job.spec, size=len(rates), submit_time=0.0, moldable=False, owner_node=None, memory_mb=0.0
        )
        events = simulate(
            [Job(spec, job.app)],
            registry.get(BASELINE_SCHEDULER),
            {},
            nodes=len(rates),
            node_info=[NodeInfo(r) for r in rates],
            **network_options(self._scn),
            host_speed_s=self._host_speed_s,
        )
        times = {e["kind"]: e["t"] for e in events if e["kind"] in (ev.JOB_STARTED, ev.JOB_FINISHED)}
        if len(times) < 2:
            return None
        return times[ev.JOB_FINISHED] - times[ev.JOB_STARTED]
