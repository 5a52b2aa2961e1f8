"""Shared fixtures for tests on real processes and cgroups."""

from __future__ import annotations

import uuid

import pytest

from testbed.janitor import cleanup_run


@pytest.fixture
def run_id():
    """A fresh run id; whatever the test left under it (processes, cgroups) is swept afterwards."""
    rid = f"test-{uuid.uuid4().hex[:10]}"
    yield rid
    report = cleanup_run(rid)
    assert not report["errors"], report


def run_on_agents(tmp_path, agents, jobs, scheduler, params, tdf, *, nodes=None, timeout=120.0, poll_s=0.1,
                  watch=None, keep=None):  # fmt: skip
    """Runs ``jobs`` under a Coordinator on in-process node ``agents`` (no Ray) until every job has ended,
    then stops the coordinator and shuts every agent down, whatever happened; returns the merged events.
    ``nodes``: the policy's node count when ``agents`` ends with a head node; ``watch(agents)`` is called
    at each poll; ``keep`` (a dict) receives the coordinator."""
    import concurrent.futures as cf
    import time

    from testbed.core import events as ev
    from testbed.emulator.control import LocalHandle
    from testbed.emulator.coordinator import Coordinator

    pool = cf.ThreadPoolExecutor(8)
    coord = None
    try:
        handles = [LocalHandle(a, pool) for a in agents]
        nics = [a.nic_address for a in agents]
        n = len(agents) if nodes is None else nodes
        coord = Coordinator(str(tmp_path), n, scheduler, params, 0, jobs, handles, nics, tdf)
        if keep is not None:
            keep["coordinator"] = coord
        t0 = time.monotonic() + 0.2
        for a in agents:
            a.set_run(t0, coord.on_node_event)
        coord.start(t0)
        deadline = time.monotonic() + timeout
        while not coord.status()["done"]:
            assert time.monotonic() < deadline, coord.status()
            if watch is not None:
                watch(agents)
            time.sleep(poll_s)
    finally:
        if coord is not None:
            coord.stop("test over")
        for a in agents:
            a.shutdown()
        pool.shutdown()
    return ev.merge(sorted((tmp_path / "events").glob("*.jsonl")), tmp_path / "events.jsonl")
