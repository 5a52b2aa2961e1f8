"""Every coscheduling scheme and paired gang on real processes: in-process node agents (no Ray), real
workers talking through real NICs that report arrivals, waits and collectives to the local policies."""

from __future__ import annotations

import pytest
from testbed.apps.synthetic import Synthetic, SyntheticConfig
from testbed.schedulers import registry
from testbed.schedulers.base import JobSpec, job_wait

from testbed.core.jobs import Job, WaitSpec
from testbed.results import summary as results

from .test_gang_nodes import _run, side_by_side

COSCHED = ["spin", "dcs", "sb", "sy", "pb", "pbsb", "cc", "hybrid"]


def _jobs(scheduler: str, specs) -> list[Job]:
    sched = registry.get(scheduler)
    out = []
    for jid, size, app in specs:
        mode, spin = job_wait(
            sched, {}, wait_mode=app.wait_mode, spin_time_us=app.spin_time_us, explicit=False
        )
        wait = WaitSpec(mode, spin, sched.send_wait)
        out.append(Job(JobSpec(jid, size, 0.0, estimate=Synthetic.ideal_runtime(app)), app, wait))
    return out


@pytest.mark.parametrize("name", COSCHED)
def test_coscheduling_scheme_runs_communicating_jobs_to_completion(tmp_path, name):
    chatty = SyntheticConfig(iterations=15, gcomp=5.0)  # a barrier every 5 ms of CPU
    jobs = _jobs(name, [("a", 2, chatty), ("b", 2, chatty)])
    events = _run(tmp_path, name, {"mpl": 2}, jobs, nodes=2)
    rows = {r["job_id"]: r for r in results.job_rows(events)}
    assert all(r["final_state"] == results.FinalState.COMPLETED for r in rows.values()), rows
    # Both jobs shared the two nodes (MPL 2), as the scheme is meant to handle.
    assert side_by_side(rows), rows
    barriers = [e for e in events if e["kind"] == "progress" and e["value"] == 15]
    assert len(barriers) == 4


def test_paired_gang_gets_per_quantum_utilisation_from_real_processes(tmp_path):
    io = SyntheticConfig(iterations=40, gcomp=0.5, gio=2, io_time_ms=4.0)
    # Compute with I/O (a 100 % job pairs with nothing: u_x + u_y + 1 % < 100 %). An I/O wait goes on while
    # its process is stopped for the other slot's quantum, so a wait shorter than the gap between the job's
    # own quanta hides there and the job measures ~100 % (0.91-1.0 seen with 15 ms waits, and no pairing in
    # 4 of 5 runs, CI's among them). A 40 ms wait outlasts a 50 ms quantum's compute: about 20 ms of it
    # shows in each (measured 0.59-0.66 over 5 runs, io 0.08-0.18; 5 quanta paired in each).
    cpu = SyntheticConfig(iterations=8, gcomp=30.0, gio=1, io_time_ms=40.0)
    jobs = _jobs("paired", [("io", 2, io), ("cpu", 2, cpu)])
    keep: dict = {}
    events = _run(tmp_path, "paired", {"mpl": 2, "quantum_ms": 50.0}, jobs, nodes=2, keep=keep)
    rows = {r["job_id"]: r for r in results.job_rows(events)}
    assert all(r["final_state"] == results.FinalState.COMPLETED for r in rows.values()), rows
    policy = keep["coordinator"].policy
    assert policy.quanta > 0
    util: dict[str, list[float]] = {"io": [], "cpu": []}
    for e in events:
        if e["kind"] == "quantum_cpu":
            for job, _rank, u, _dt in e["samples"]:
                util[job].append(u)
    mean = {j: sum(v) / len(v) for j, v in util.items()}
    assert mean["io"] < 0.5 and mean["cpu"] > 2 * mean["io"], mean
    # The kernel's figures reached the policy: the I/O-bound job was measured well below 100 %, and
    # the policy paired it with the compute-bound one at least once.
    assert policy.paired_quanta > 0, (policy.quanta, policy.paired_quanta)
