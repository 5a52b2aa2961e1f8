"""Paper 000's best-effort process on real processes: each communication pattern through real NICs, and
memory that each worker really allocates and keeps resident."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from testbed.apps.synthetic import SyntheticConfig, pattern_plan
from testbed.schedulers.base import Proc

from testbed.core.jobs import Job, JobSpec, WaitSpec

from .test_synthetic import nodes, start  # noqa: F401  (the four-NIC fixture and the worker launcher)

ITERS = 4
ROUNDS = 3
MSG = 3000


def _stats(hooks) -> list[dict]:
    return [h.nic.stats() for h in hooks]


@pytest.mark.parametrize("pattern", ["ring", "neighbour", "alltoall", "rank0"])
def test_pattern_runs_to_completion_and_exchanges_the_expected_messages(nodes, tmp_path, pattern) -> None:  # noqa: F811
    clock, addrs, hooks, procs = nodes
    app = {"iterations": ITERS, "gcomp": 1, "pattern": pattern, "msg_bytes": MSG, "msgs": ROUNDS}
    ranks = start(clock, addrs, procs, f"p-{pattern}", 4, app, tmp_path, WaitSpec("spin-block", 50.0))
    for p in ranks:
        _, stderr = p.communicate(timeout=30)
        assert p.returncode == 0, stderr
    expect = [ITERS * ROUNDS * len(pattern_plan(pattern, r, 4)[2]) for r in range(4)]
    deadline = time.monotonic() + 5
    while [s["messages_in"] for s in _stats(hooks)] != expect and time.monotonic() < deadline:
        time.sleep(0.05)
    stats = _stats(hooks)
    assert [s["messages_in"] for s in stats] == expect
    assert [s["bytes_in"] for s in stats] == [n * MSG for n in expect]
    assert [s["unconsumed"] for s in stats] == [0, 0, 0, 0]
    for rank, h in enumerate(hooks):
        with h.cond:
            assert h.cond.wait_for(lambda h=h: len(h.progress) == ITERS, 5)
            assert h.progress == [(Proc(f"p-{pattern}", rank), "iterations", float(i)) for i in range(1, 5)]


def test_large_messages_in_all_to_all_do_not_deadlock(nodes, tmp_path) -> None:  # noqa: F811
    # Everyone sends 3 x 256 KiB before receiving anything: sends go to the receivers' NICs, which always
    # read, so send-then-receive cannot deadlock even with messages far above the socket buffers.
    clock, addrs, hooks, procs = nodes
    size = 256 * 1024
    app = {"iterations": 2, "gcomp": 1, "pattern": "alltoall", "msg_bytes": size, "msgs": 2}
    for p in start(clock, addrs, procs, "big", 4, app, tmp_path):
        _, stderr = p.communicate(timeout=30)
        assert p.returncode == 0, stderr
    assert [s["bytes_in"] for s in _stats(hooks)] == [2 * 2 * 3 * size] * 4


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS line")


def test_worker_memory_is_resident_while_it_runs(nodes, tmp_path) -> None:  # noqa: F811
    clock, addrs, hooks, procs = nodes
    (w,) = start(clock, addrs, procs, "mem", 1, {"iterations": 100000, "gcomp": 1}, tmp_path, memory_mb=64)
    h = hooks[0]
    with h.cond:
        assert h.cond.wait_for(lambda: len(h.progress) >= 20, 20), "no progress"
    assert w.poll() is None
    assert _rss_mb(w.pid) >= 64
    # A worker without memory_mb stays small (so the 64 MB above is the allocation, not the interpreter).
    (small,) = start(clock, addrs[1:], procs, "small", 1, {"iterations": 100000, "gcomp": 1}, tmp_path)
    h1 = hooks[1]
    with h1.cond:
        assert h1.cond.wait_for(lambda: len(h1.progress) >= 20, 20), "no progress"
    assert _rss_mb(small.pid) < 40


def test_launch_carries_the_typed_config_once_and_the_job_settings(tmp_path) -> None:
    app = SyntheticConfig(iterations=3, gcomp=2.0, pattern="ring", msg_bytes=100, msgs=2)
    job = Job(JobSpec("j", 2, 0.0, memory_mb=8.0), app, WaitSpec("spin-block", 40.0, "spin"))
    launch = job.launch(1, ["a:1", "b:2"])
    assert launch.argv[1:] == ("-m", "testbed.apps.worker")
    # The config travels as JSON and comes back as the same model: no field is spelled out twice.
    assert SyntheticConfig.model_validate_json(launch.env["TB_APP"]) == app
    env = launch.env
    assert (env["TB_JOB"], env["TB_RANK"], env["TB_SIZE"], env["TB_NICS"]) == ("j", "1", "2", "a:1,b:2")
    assert (env["TB_WAIT_MODE"], env["TB_SPIN_US"], env["TB_SEND_WAIT"]) == ("spin-block", "40.0", "spin")
    assert env["TB_MEMORY_MB"] == "8.0"
