"""The synthetic worker program, the work kernel and the CPU probe, as real processes on real NICs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from testbed.apps.synthetic import SyntheticConfig
from testbed.apps.work import WORK_UNIT_S, calibrate, spin, work
from testbed.schedulers.base import Proc

from testbed.clock import Clock
from testbed.jobs import WORK_UNIT_S as JOBS_WORK_UNIT_S
from testbed.jobs import Job, JobSpec, WaitSpec
from testbed.loop import LoopThread
from testbed.nic import Nic

from ..conftest import measured


class Hooks:
    def __init__(self) -> None:
        self.nic: Nic | None = None
        self.cond = threading.Condition()
        self.progress: list[tuple[Proc, str, float]] = []

    def on_hello(self, proc: Proc, pid: int) -> None:
        self.nic.go(proc)

    def on_local_event(self, event) -> None:
        pass

    def on_progress(self, proc: Proc, unit: str, value: float) -> None:
        with self.cond:
            self.progress.append((proc, unit, value))
            self.cond.notify_all()

    def on_disconnect(self, proc: Proc) -> None:
        pass


@pytest.fixture
def nodes():
    """Four NICs in loop threads; yields (clock, addresses, hooks); cleans up NICs and workers."""
    clock = Clock.starting_now(1.0)
    threads, nics, hooks, addrs = [], [], [], []
    for node in range(4):
        lt = LoopThread(f"nic{node}")
        h = Hooks()
        h.nic = lt.call(lambda node=node, h=h: Nic(node, h, clock))
        addrs.append(lt.call(h.nic.start))
        threads.append(lt)
        nics.append(h.nic)
        hooks.append(h)
    procs: list[subprocess.Popen] = []
    yield clock, addrs, hooks, procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    for lt, nic in zip(threads, nics, strict=True):
        lt.call(nic.close, timeout=5)
        lt.stop()


def start(
    clock, addrs, procs, job, size, app: dict, io_dir, wait=WaitSpec(), memory_mb=0.0, **extra
) -> list[subprocess.Popen]:
    """The job's ranks as the agent starts them (Job.launch: the generic worker, the config as JSON),
    each talking to its own NIC here."""
    j = Job(JobSpec(job, size, 0.0, memory_mb=memory_mb), SyntheticConfig(**app), wait)
    out = []
    for rank in range(size):
        launch = j.launch(rank, addrs[:size])
        env = dict(os.environ)
        env.update(clock.to_env())
        env.update(launch.env)
        env.update(TB_NODE_NIC=addrs[rank], TB_ITERS_PER_UNIT="2000", TB_IO_DIR=str(io_dir), TB_RUN_ID="test")
        env.update(extra)
        p = subprocess.Popen(
            list(launch.argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out.append(p)
        procs.append(p)
    return out


def test_synthetic_four_ranks_runs_to_completion(nodes, tmp_path) -> None:
    clock, addrs, hooks, procs = nodes
    app = {"iterations": 5, "gcomp": 2, "gio": 2, "io_bytes": 8193, "io_time_ms": 2}
    ranks = start(clock, addrs, procs, "syn", 4, app, tmp_path, WaitSpec("spin-block", 50.0))
    for p in ranks:
        _, stderr = p.communicate(timeout=20)
        assert p.returncode == 0, stderr
    for rank in range(4):
        assert (tmp_path / f"syn.{rank}.io").stat().st_size == 5 * 2 * 8193
        h = hooks[rank]
        with h.cond:
            assert h.cond.wait_for(lambda h=h: len(h.progress) == 5, 5)
            assert h.progress == [(Proc("syn", rank), "barriers", float(i)) for i in range(1, 6)]


def test_worker_whose_peer_dies_exits_with_reason(nodes, tmp_path) -> None:
    clock, addrs, hooks, procs = nodes
    r0, r1 = start(clock, addrs, procs, "die", 2, {"iterations": 100000, "gcomp": 1}, tmp_path)
    with hooks[0].cond:
        assert hooks[0].cond.wait_for(lambda: len(hooks[0].progress) >= 3, 10), "no progress"
    r1.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    _, stderr = r0.communicate(timeout=10)
    assert r0.returncode == 1
    assert time.monotonic() - t0 < 5
    assert "rank 1 of job die disconnected" in stderr
    assert len(stderr.strip().splitlines()) == 1  # one line, no traceback


def test_missing_calibration_is_a_clear_error(nodes, tmp_path) -> None:
    clock, addrs, _, procs = nodes
    env = {k: v for k, v in os.environ.items() if k != "TB_ITERS_PER_UNIT"}
    app = SyntheticConfig(iterations=1, gcomp=1).model_dump_json()
    p = subprocess.run(
        [sys.executable, "-m", "testbed.apps.worker"],
        env={**env, "TB_APP": app, "TB_JOB": "x", "TB_RANK": "0", "TB_SIZE": "1", "TB_NICS": addrs[0]},
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert p.returncode == 1
    assert "TB_ITERS_PER_UNIT" in p.stderr


def test_work_kernel_and_calibration() -> None:
    assert WORK_UNIT_S == JOBS_WORK_UNIT_S
    assert spin(1000) == spin(1000)  # deterministic

    def run():
        ipu = calibrate(0.05)
        assert ipu > 100
        t0 = time.thread_time()
        work(20, ipu)
        return time.thread_time() - t0

    # 20 units = 20 ms of CPU, with the calibration made just before (the same-test baseline)
    measured(
        run,
        lambda used: 0.01 < used < 0.06,
        why="the calibration and the work it calibrates are 50 ms of CPU apart; a change of the host's "
        "load in between (the other hyperthread busy, say) moves iterations per CPU-ms by up to 25 %",
    )


def test_probe_prints_one_json_line() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "testbed.apps.probe", "--seconds", "0.2"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert p.returncode == 0, p.stderr
    (line,) = p.stdout.strip().splitlines()
    r = json.loads(line)
    assert set(r) == {"iters", "cpu_s", "wall_s", "iters_per_unit"}
    assert r["wall_s"] >= 0.2 and 0 < r["cpu_s"] <= r["wall_s"] + 0.01
    assert r["iters"] > 0 and r["iters_per_unit"] > 100
