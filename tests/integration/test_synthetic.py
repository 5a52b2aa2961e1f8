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
from testbed.apps.work import WORK_UNIT_S, work
from testbed.apps.worker import EXIT_PEER_GONE
from testbed.schedulers.base import Proc

from testbed.core.clock import Clock
from testbed.core.jobs import WORK_UNIT_S as JOBS_WORK_UNIT_S
from testbed.core.jobs import Job, JobSpec, WaitSpec
from testbed.emulator.loop import LoopThread
from testbed.emulator.mechanism import envelope as envmod
from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.process import spawn
from testbed.emulator.nic import Nic

from ..conftest import requires

_V1_WHY = envmod.probe_v1()
needs_v1 = requires(_V1_WHY is None, f"cgroup v1 envelope not usable here: {_V1_WHY}")


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
        env.update(TB_NODE_NIC=addrs[rank], TB_IO_DIR=str(io_dir), TB_RUN_ID="test")
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
    assert r0.returncode == EXIT_PEER_GONE  # failed only because a peer did: the job's reason is the peer's
    assert time.monotonic() - t0 < 5
    assert "rank 1 of job die disconnected" in stderr
    assert len(stderr.strip().splitlines()) == 1  # one line, no traceback


def test_work_kernel_is_the_units_of_thread_cpu() -> None:
    assert WORK_UNIT_S == JOBS_WORK_UNIT_S
    for units in (0.5, 20):
        t0 = time.thread_time()
        work(units)
        used = time.thread_time() - t0
        # Burns until the thread's CPU clock moved by the units: it overshoots by one clock read (~1 us)
        # plus the call itself; 2 % + 20 us covers both with room (measured: +0.02 % at 50 units).
        assert units * WORK_UNIT_S <= used <= units * WORK_UNIT_S * 1.02 + 20e-6, (units, used)
    work(0)
    work(-1)  # no work, no error


WORK_CHILD = r"""
import sys, time
from testbed.apps.work import work
units = float(sys.argv[1])
c0, w0 = time.process_time(), time.monotonic()
work(units)
print(time.process_time() - c0, time.monotonic() - w0)
"""


@needs_v1
def test_a_unit_is_one_ms_of_cpu_on_a_throttled_node_beside_a_busy_one(run_id) -> None:
    """The unit does not depend on the node's rate, nor on what else runs: 200 units on a node at a
    quarter of a core, beside a busy process on the same node, take 200 ms of CPU and far longer in wall
    time (a wall-clock or calibrated kernel would miss one or the other)."""
    env = make_envelope("cgroup-v1", run_id, 0, 1.0, 4.0, period_us=20_000)
    env.create()
    try:
        hog = spawn([sys.executable, "-c", "while True: pass"], env=None, cwd=None,
                    stdout=subprocess.DEVNULL, stderr=None, envelope=env)  # fmt: skip
        try:
            out = subprocess.run(
                [sys.executable, "-c", WORK_CHILD, "200"], capture_output=True, text=True, timeout=60,
                preexec_fn=env.join_self,
            )  # fmt: skip
        finally:
            hog.kill()
            hog.close()
        assert out.returncode == 0, out.stderr
        cpu, wall = map(float, out.stdout.split())
        # The process's CPU clock around the call (not /proc/.../schedstat: that lags by up to a tick).
        assert cpu == pytest.approx(0.2, rel=0.01), cpu
        # A quarter core shared with the hog: about 1.6 s of wall; a wall-time kernel would stop at 0.2.
        assert wall > 0.8, wall
    finally:
        env.destroy()


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
    assert set(r) == {"cpu_s", "wall_s", "rate"}
    assert r["wall_s"] >= 0.2 and 0 < r["cpu_s"] <= r["wall_s"] + 0.01
    assert 0 < r["rate"] <= 1.05
