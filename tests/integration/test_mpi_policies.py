"""What the policies see of an MPI job (apps/mpi_wrap.py): on real processes (in-process node agents, no
Ray; real MPI ranks of the unmodified tests/programs/ring_allreduce.py beside a synthetic job), one test
per scheme family shows the scheme acting on the MPI ranks as on the synthetic job's:

* gang: the ranks are stopped and continued by the slot switches;
* DCS: a message's arrival boosts its receiver;
* SB (blocking family): a receiver blocks in the kernel, and the message that wakes it boosts it;
* HYBRID: a rank inside a collective (the program's allreduce) is boosted;
* PB (periodic family): the periodic pick favours (boosts) MPI ranks as it does synthetic ones.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from testbed.apps.mpi import Mpi, MpiConfig
from testbed.apps.synthetic import Synthetic, SyntheticConfig
from testbed.schedulers import registry
from testbed.schedulers.base import (
    CollectiveEnter,
    JobSpec,
    MessageArrived,
    ReceiverBlocked,
    Timer,
    job_wait,
)

from testbed.core.jobs import Job, WaitSpec
from testbed.emulator.agent import NodeAgent, NodeConfig
from testbed.results import summary as results

from .conftest import run_on_agents

pytestmark = [pytest.mark.slow, pytest.mark.cgroup]

RING = str(Path(__file__).resolve().parents[1] / "programs" / "ring_allreduce.py")


def _jobs(scheduler: str) -> list[Job]:
    sched = registry.get(scheduler)
    out = []
    mpi = MpiConfig(program=RING, args=("8", "5"), estimate_s=1.0)
    syn = SyntheticConfig(iterations=15, gcomp=5.0)
    for jid, app, kind in (("mpi", mpi, Mpi), ("syn", syn, Synthetic)):
        mode, spin = job_wait(
            sched, {}, wait_mode=app.wait_mode, spin_time_us=app.spin_time_us, explicit=False
        )
        out.append(
            Job(
                JobSpec(jid, 2, 0.0, estimate=kind.ideal_runtime(app)),
                app,
                WaitSpec(mode, spin, sched.send_wait),
            )
        )
    return out


def _run(tmp_path: Path, scheduler: str, params: dict, nodes: int = 2, tdf: float = 2.0):
    """Both jobs on ``nodes`` in-process agents plus the head node (the MPI job's process manager);
    returns the merged events and every (node, event, decision) of the nodes' local policies."""
    run_id = "test-" + uuid.uuid4().hex[:8]
    jobs = _jobs(scheduler)
    seen: list = []
    agents = [NodeAgent(NodeConfig(run_id=run_id, node=n, run_dir=str(tmp_path), tdf=tdf,
                                   scheduler=scheduler, params=params)) for n in range(nodes)]  # fmt: skip
    # The head node, as testbed/cluster.py makes it: no envelope, every process always runs.
    agents.append(NodeAgent(NodeConfig(run_id=run_id, node=nodes, run_dir=str(tmp_path), tdf=tdf,
                                       envelope="none", scheduler="batch", params={})))  # fmt: skip
    for a in agents[:nodes]:
        on_event = a.policy.on_event

        def spy(now, event, a=a, on_event=on_event):
            d = on_event(now, event)
            seen.append((a.node, event, d))
            return d

        a.policy.on_event = spy
    events = run_on_agents(tmp_path, agents, jobs, scheduler, params, tdf, nodes=nodes)
    rows = {r["job_id"]: r for r in results.job_rows(events)}
    assert all(r["final_state"] == results.FinalState.COMPLETED for r in rows.values()), rows
    return events, seen


def _boosted(seen, kind, job: str, nice: int = -10) -> int:
    """How many ``kind`` events of ``job``'s processes got them the boost nice value at once."""
    return sum(
        1 for _, e, d in seen if isinstance(e, kind) and e.proc.job_id == job and d.nice.get(e.proc) == nice
    )


def test_gang_stops_and_continues_mpi_ranks_like_synthetic_ones(tmp_path):
    _, seen = _run(tmp_path, "gang", {"mpl": 2, "quantum_ms": 30.0})
    for job in ("mpi", "syn"):
        stopped = [d for _, _, d in seen if d.run is not None and not any(p.job_id == job for p in d.run)]
        running = [d for _, _, d in seen if d.run is not None and any(p.job_id == job for p in d.run)]
        assert stopped and running, job  # switched out at some slots, in at others


def test_dcs_boosts_the_receiver_of_an_mpi_message_like_a_synthetic_one(tmp_path):
    _, seen = _run(tmp_path, "dcs", {"mpl": 2})
    for job in ("mpi", "syn"):
        assert _boosted(seen, MessageArrived, job) > 0, job


def test_sb_blocks_mpi_receivers_and_wakes_them_boosted_like_synthetic_ones(tmp_path):
    _, seen = _run(tmp_path, "sb", {"mpl": 2})
    for job in ("mpi", "syn"):
        blocked = [e for _, e, _ in seen if isinstance(e, ReceiverBlocked) and e.proc.job_id == job]
        assert blocked, job
        assert _boosted(seen, MessageArrived, job) > 0, job


def test_hybrid_boosts_an_mpi_rank_inside_a_collective_like_a_synthetic_one(tmp_path):
    _, seen = _run(tmp_path, "hybrid", {"mpl": 2})
    ops = {e.op for _, e, _ in seen if isinstance(e, CollectiveEnter) and e.proc.job_id == "mpi"}
    assert "allreduce" in ops, ops  # the program's comm.allreduce, as the node heard of it
    for job in ("mpi", "syn"):
        assert _boosted(seen, CollectiveEnter, job) > 0, job


def test_pb_periodically_favours_mpi_ranks_like_synthetic_ones(tmp_path):
    _, seen = _run(tmp_path, "pb", {"mpl": 2})
    for job in ("mpi", "syn"):
        picked = [
            d
            for _, e, d in seen
            if isinstance(e, Timer) and any(p.job_id == job and n == -10 for p, n in d.nice.items())
        ]
        assert picked, job
