"""The `divisible` kind on real processes with real NICs (no cluster: the plain tbcomm set-up of
test_tbcomm.py): a head and four workers, each on its own NIC, the head's NIC last. The head sends real
chunks one after another; each worker receives exactly its share's bytes and computes over them.

Without node envelopes nothing fixes the workers' CPU rate (time dilation 1, the host's CPU shared with
whatever else runs), so finish times are only reported here: the 5 % bound on them is checked on a real
cluster, tests/e2e/test_divisible.py.
"""

from __future__ import annotations

import sys

import pytest
from testbed.apps.divisible import DivisibleConfig, load, plan
from testbed.schedulers.base import Proc
from testbed.schedulers.divisible import exec_time

from .test_tbcomm import cluster_factory  # noqa: F401 - the fixture

WORKERS = 4


def _run(cl, cfg: DivisibleConfig, job: str):
    nodes = list(range(WORKERS + 1))  # rank 4, the head, on node 4
    procs = cl.start(["-m", "testbed.apps.worker"], job, nodes, TB_APP=cfg.model_dump_json())
    # Release them together once all have said HELLO (the agents' gang start does the same): a worker
    # still importing when its chunk arrives would finish late for a reason that is not the kind's.
    for node in nodes:
        cl.hooks[node].wait_for(lambda node=node: len(cl.hooks[node].hellos) == 1, timeout=30)
    for node in nodes:
        cl.nics[node].go(Proc(job, node))
    for p in procs:
        try:
            _out, err = p.communicate(timeout=30)
        except Exception:
            p.kill()
            raise
        assert p.returncode == 0, err
    got: dict[tuple[int, str], float] = {}
    for node in nodes:
        for proc, unit, value in cl.hooks[node].progress:
            got[(proc.rank, unit)] = value
    return got


@pytest.mark.parametrize(
    "costs",
    [{"setup_link": 0.0, "setup_compute": 0.0}, {"setup_link": 0.002, "setup_compute": 0.01}],
    ids=["no-setup", "setup"],
)
def test_a_task_on_four_workers_moves_the_bytes_of_its_shares(cluster_factory, costs):  # noqa: F811
    cfg = DivisibleConfig(
        sigma=100, deadline_s=5.0, cms=0.004, cps=0.001, unit_bytes=1000, arrival_s=0.0, **costs
    )
    alphas, nbytes = plan(cfg, WORKERS)
    assert all(a > 0 for a in alphas)
    e = exec_time(load(cfg), WORKERS)  # about 0.4 s: 100 units at 4 ms each, mostly transmission
    cl = cluster_factory(WORKERS + 1)
    got = _run(cl, cfg, "dlt")
    for j in range(WORKERS):
        assert got[(j, "bytes")] == nbytes[j] == round(alphas[j] * cfg.sigma * cfg.unit_bytes)
    assert got[(WORKERS, "bytes")] == sum(nbytes)
    finishes = [got[(j, "finish_s")] for j in range(WORKERS)]
    spread = max(finishes) - min(finishes)
    print(
        f"E = {e:.4f} s, finishes {[round(f, 4) for f in finishes]}, spread {spread * 1000:.1f} ms",
        file=sys.stderr,
    )
    assert all(f > 0 for f in finishes)
    assert got[(WORKERS, "deadlines_met")] + got[(WORKERS, "deadlines_missed")] == 1.0
