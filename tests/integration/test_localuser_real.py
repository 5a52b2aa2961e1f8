"""Local users' sessions on real processes (issue 22, deliverable 2): node agents and the coordinator in this
process (no Ray), real workers under the node's envelope. A session really runs its profile's duty cycle
(the CPU the kernel counted is its share of the session's time), its memory is really resident (VmRSS
read from /proc while it runs), an Xwin session really sends its bytes, and alone its own slowdown is
about 1."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from testbed.apps.localuser import PROFILES
from testbed.apps.reports import SESSION_BYTES, SESSION_ELAPSED, SESSION_IDEAL

from testbed.core import events as ev
from testbed.emulator.agent import NodeAgent, NodeConfig
from testbed.results import summary as results
from testbed.scenario import workload
from testbed.scenario.model import from_file_or_doc

from ..conftest import measured
from .conftest import run_on_agents

SESSION_S = 3.0
#: A session's slowdown alone on real processes: the sleeps' overshoot and the host's other work stretch
#: its cycles. Measured at TDF 1 on this 2-core host with other work on it (load average 8-13): 1.065,
#: 1.065, 1.085, 1.10 (one CPU session), so 1.25 bounds what was seen; never below 1 but for the clock's
#: resolution (a cycle's sleep is never shorter than asked).
SLOWDOWN_ALONE = (0.99, 1.25)
#: CPU seconds a session may use besides its work units (see the test).
CPU_BESIDES_S = 0.2


def _jobs(doc: dict):
    return workload.build(from_file_or_doc(doc=doc))


def _run(
    tmp_path, doc: dict, scheduler="local", tdf=1.0, watch: Callable[[list[NodeAgent]], None] | None = None
):
    """Runs the scenario ``doc``'s jobs on in-process agents; ``watch(agents)`` is called every 50 ms."""
    nodes = doc["cluster"]["nodes"]
    run_id = "test-" + uuid.uuid4().hex[:8]
    kinds = ("testbed.apps.localuser",)
    agents = [
        NodeAgent(
            NodeConfig(
                run_id=run_id, node=n, run_dir=str(tmp_path), tdf=tdf, scheduler=scheduler, preload=kinds
            )
        )
        for n in range(nodes)
    ]
    return run_on_agents(tmp_path, agents, _jobs(doc), scheduler, {}, tdf, poll_s=0.05, watch=watch)


def _totals(events, job: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for e in events:
        if e["kind"] == ev.PROGRESS and e["job"] == job:
            out[e["unit"]] = max(out.get(e["unit"], 0.0), float(e["value"]))
    return out


def _rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def test_a_session_runs_its_duty_cycle_with_its_memory_resident_and_alone_at_slowdown_1(tmp_path):
    doc = {
        "cluster": {"nodes": 2},
        "workload": {
            "jobs": [
                {
                    "id": p,
                    "size": 1,
                    "app": {"kind": "localuser", "profile": p, "session_s": SESSION_S, "node": n},
                }
                for n, p in enumerate(("cpu", "xwin"))
            ]
        },
    }
    rss: dict[str, float] = {}

    def watch(agents):
        # The largest resident set each session's process had while it ran (its pages written at start).
        for a in agents:
            for proc, st in list(a.procs.items()):
                mb = _rss_mb(st.worker.pid)
                if mb is not None:
                    rss[proc.job_id] = max(rss.get(proc.job_id, 0.0), mb)

    def once():
        rss.clear()
        events = _run(tmp_path / uuid.uuid4().hex[:6], doc, watch=watch)
        return events, {r["job_id"]: r for r in results.job_rows(events)}

    def slowdowns(value):
        events, _ = value
        return [
            _totals(events, j)[SESSION_ELAPSED] / _totals(events, j)[SESSION_IDEAL] for j in ("cpu", "xwin")
        ]

    lo, hi = SLOWDOWN_ALONE
    events, rows = measured(
        once,
        lambda v: all(lo <= s <= hi for s in slowdowns(v)),
        why="a session's cycles stretch with the host's other work (2 cores shared)",
    )
    print(f"\nslowdown alone {slowdowns((events, rows))}, VmRSS MB {rss}")
    assert all(r["final_state"] == results.FinalState.COMPLETED for r in rows.values()), rows
    for job in ("cpu", "xwin"):
        # The duty cycle: the CPU the kernel counted is the profile's share of the session's ideal time,
        # plus what the worker spends besides its work units: its memory's first writes (a page fault each,
        # ~50 ms for 84 MB), the sink's sends, the reports (measured +0.01 s for cpu, +0.09 s for xwin).
        share = PROFILES[job].cpu_fraction
        cpu = float(rows[job]["cpu_time"])
        assert share * SESSION_S * 0.98 <= cpu <= share * SESSION_S + CPU_BESIDES_S, (job, cpu)
        assert _totals(events, job)[SESSION_IDEAL] == pytest.approx(SESSION_S)
    # Memory really touched: the Xwin session (84 MB) held 49 MB more than the CPU one (35 MB), both
    # forked from alike fork servers.
    diff = rss["xwin"] - rss["cpu"]
    assert 84 - 35 - 5 <= diff <= 84 - 35 + 5, rss
    assert rss["cpu"] >= 35
    # Xwin's trickle: 300 bytes each 100 ms cycle, sent to its loopback sink.
    assert _totals(events, "xwin")[SESSION_BYTES] == 300 * round(SESSION_S * 10)
    assert SESSION_BYTES not in _totals(events, "cpu")
