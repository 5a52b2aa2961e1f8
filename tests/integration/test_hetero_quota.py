"""Heterogeneous nodes on real processes (issue 22): each node's envelope takes its CFS quota from its own
group's rate, so a CPU-bound worker on a 0.43-rate node gets 43 % of an emulated CPU while one on a
1.0-rate node beside it gets a whole one (at TDF 4: 10.75 % and 25 % of a real core)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from testbed.emulator.mechanism import envelope as envmod
from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.process import spawn
from testbed.scenario.model import from_file_or_doc

from ..conftest import measured, requires

BUSY = [sys.executable, "-c", "while True: pass"]
_V1_WHY = envmod.probe_v1()
needs_v1 = requires(_V1_WHY is None, f"cgroup v1 envelope not usable here: {_V1_WHY}")

PAPER004 = [{"count": 1, "cpu_rate": 0.43, "memory_mb": 128}, {"count": 1, "cpu_rate": 1.0, "memory_mb": 256}]
#: An emulated CPU is 1/TDF of a real core: 2 nodes of rates 0.43 and 1.0 take 0.36 of the host's 2 cores
#: (at TDF 1 the 1.0 node needs a whole core, which a host loaded by other tests does not always give).
TDF = 4.0
#: Measured on this 2-core host at load average 15 (other work), 3 runs: 0.4360, 0.4273, 0.4303 and
#: 1.0082, 0.9911, 1.0008 emulated CPU-s/s (within 1.4 % of each node's rate); one window at load 17 got
#: 0.361 and 0.912 and was retried. The quota is a cap: above it by 5 % fails at once; below, retried.
TOLERANCE = 0.05


def _slope(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of CPU usage against time: robust to where the quota's bursts fall."""
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mu = sum(u for _, u in samples) / n
    return sum((t - mt) * (u - mu) for t, u in samples) / sum((t - mt) ** 2 for t, _ in samples)


@pytest.mark.cgroup
@needs_v1
def test_each_node_gets_the_quota_of_its_own_rate(run_id):
    scn = from_file_or_doc(doc={"cluster": {"groups": PAPER004}, "workload": {"jobs": [{"size": 1}]}})
    info = scn.cluster.node_info()
    # The node agent makes its envelope from its own NodeConfig, which carries its group's rate
    # (emulator/backend.py).
    nodes = [make_envelope("cgroup-v1", run_id, n, i.rate, TDF) for n, i in enumerate(info)]
    workers = []
    try:
        for e in nodes:
            e.create()
        assert [e.configured_rate() for e in nodes] == [0.43 / TDF, 1.0 / TDF]  # real cores
        workers = [
            spawn(BUSY, env=None, cwd=None, stdout=subprocess.DEVNULL, stderr=None, envelope=e) for e in nodes
        ]
        time.sleep(0.3)  # past interpreter start-up

        def rates():
            samples: list[list[tuple[float, float]]] = [[] for _ in nodes]
            t_end = time.monotonic() + 1.5
            while time.monotonic() < t_end:
                now = time.monotonic()
                for k, e in enumerate(nodes):
                    samples[k].append((now, e.cpu_usage_s()))
                time.sleep(0.01)
            got = [_slope(s) * TDF for s in samples]  # emulated CPU-s per emulated s
            # A quota is a cap, whatever the host's load: never above the node's own rate.
            assert all(r / i.rate - 1 < TOLERANCE for r, i in zip(got, info, strict=True)), got
            return got

        why = "the quota is a cap: a host whose 2 cores are busy with other tests can deliver less than it"
        got = measured(
            rates, lambda rs: all(r / i.rate - 1 > -TOLERANCE for r, i in zip(rs, info, strict=True)), why=why
        )
        print(
            f"\nnodes at rates 0.43 and 1.0, TDF {TDF:g}, 1.5 s: delivered (emulated) "
            + ", ".join(
                f"{r:.4f} CPU-s/s ({(r / i.rate - 1) * 100:+.1f} %)" for r, i in zip(got, info, strict=True)
            )
        )
    finally:
        for w in workers:
            w.kill()
        for e in nodes:
            e.destroy()
