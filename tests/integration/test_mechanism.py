"""Process control on real processes: spawn, stop/continue (checked with schedstat), priority, PDEATHSIG."""

from __future__ import annotations

import functools
import mmap
import os
import select
import signal
import statistics
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from testbed.emulator.mechanism import accounting
from testbed.emulator.mechanism.envelope import NoEnvelope
from testbed.emulator.mechanism.priority import raise_thread_priority, reset_thread_priority
from testbed.emulator.mechanism.process import SpawnError, cont_all, spawn, stop_all

from ..conftest import measured, wait_for

BUSY = [sys.executable, "-c", "while True: pass"]


def _spawn(argv, run_id, **kw):
    kw.setdefault("envelope", None)
    return spawn(argv, env=None, cwd=None, stdout=subprocess.DEVNULL, stderr=None, run_id=run_id, **kw)


_wait_for = functools.partial(wait_for, timeout=3.0, step=0.001)


def _gone(pid: int) -> bool:
    try:
        return accounting.proc_state(pid) == "Z"
    except ProcessLookupError:
        return True


HEARTBEAT = textwrap.dedent("""
    import mmap, struct, sys, time
    with open(sys.argv[1], "r+b") as f:
        m = mmap.mmap(f.fileno(), 8)
    put, now = struct.Struct("q").pack_into, time.monotonic_ns
    while True:
        put(m, 0, now())
""")


def test_stop_cont_take_effect_at_once(run_id, tmp_path):
    """After stop_all returns the worker runs no more user code; after cont_all it runs again at once."""
    beat_file = tmp_path / "beat"
    beat_file.write_bytes(b"\0" * 8)
    w = _spawn([sys.executable, "-c", HEARTBEAT, str(beat_file)], run_id)
    with open(beat_file, "rb") as f:
        beat_map = mmap.mmap(f.fileno(), 8, access=mmap.ACCESS_READ)

    def beat() -> int:
        return struct.unpack_from("q", beat_map)[0]

    try:
        assert _wait_for(lambda: beat() > 0 and w.cpu_time_s() > 0.05), "busy worker never ran"
        overruns, t_latencies, cont_delays = measured(
            lambda: _stop_cont_five_times(w, beat),
            lambda m: max(m[0]) < 0.001,  # the reschedule IPI (us), not a tick (4 ms)
            why="a task running on the other CPU stops at the reschedule IPI, within microseconds; one "
            "whose CPU is busy with interrupts or other tests' work may take longer once in a while",
        )
        print(
            f"\nstop: last user instruction {max(overruns) * 1e6:.0f} us after stop_all returned (max of 5); "
            f"/proc showed T after {statistics.median(t_latencies) * 1e6:.0f} us median; new heartbeat seen "
            f"{statistics.median(cont_delays) * 1e6:.0f} us after cont_all returned (median)"
        )
    finally:
        beat_map.close()
        assert w.kill() == -signal.SIGKILL


def _stop_cont_five_times(w, beat):
    """(overruns, T latencies, continue delays) of five stop/continue cycles of a heartbeat worker."""
    overruns, t_latencies, cont_delays = [], [], []
    for _ in range(5):
        time.sleep(0.03)
        t_stop = stop_all([w])
        assert _wait_for(lambda: w.state() == "T", timeout=1.0)
        t_latencies.append(time.monotonic() - t_stop)
        time.sleep(0.01)
        # The last heartbeat the worker wrote is the last user instruction it ran.
        overruns.append(beat() / 1e9 - t_stop)
        settled = w.cpu_time_s()
        time.sleep(0.05)
        assert w.cpu_time_s() == settled, "schedstat run time rose while stopped"
        t_cont = cont_all([w])
        before = beat()
        assert _wait_for(lambda before=before: beat() != before, timeout=0.5, step=0), (
            "no progress after SIGCONT"
        )
        cont_delays.append(time.monotonic() - t_cont)
        # CPU time of a running task is current only to its last tick: give it a few.
        assert _wait_for(lambda settled=settled: w.cpu_time_s() > settled, timeout=0.1)
    return overruns, t_latencies, cont_delays


def test_worker_api(run_id, tmp_path):
    out = tmp_path / "out.txt"
    w = spawn(
        [
            sys.executable,
            "-c",
            "import os, sys, time; print(os.environ['TESTBED_RUN_ID'], flush=True); "
            "sys.stdin.read(); time.sleep(30)",
        ],
        env={"PATH": os.environ["PATH"]},
        cwd=str(tmp_path),
        stdout=str(out),
        stderr=subprocess.STDOUT,
        envelope=None,
        run_id=run_id,
    )
    try:
        assert _wait_for(lambda: out.exists() and out.read_text().strip() == run_id)
        assert w.poll() is None
        assert w.state() == "S"
        w.set_nice(5)
        assert os.getpriority(os.PRIO_PROCESS, w.pid) == 5
        rss, pss = accounting.rss_pss_mb(w.pid)
        assert 1 < pss <= rss < 500
        assert w.cpu_time_s() > 0
        assert not select.select([w.pidfd], [], [], 0)[0], "pidfd readable before exit"
    finally:
        assert w.kill() == -signal.SIGKILL
    assert select.select([w.pidfd], [], [], 1.0)[0], "pidfd not readable after exit"
    with pytest.raises(ProcessLookupError):
        w.stop()
    with pytest.raises(ProcessLookupError):
        w.cpu_time_s()
    assert w.kill() == -signal.SIGKILL  # idempotent
    t = stop_all([w])  # a reaped worker is skipped, not signalled by pid
    assert t <= time.monotonic()
    w.close()


# A worker that starts a thread when told (a line on stdin) and ends one (another line): the agent keeps
# its thread list between renices (BaseWorker._each_thread), which must not miss a thread started since.
_THREADS = textwrap.dedent("""
    import sys, threading, time
    stop = threading.Event()
    threads = []
    for line in sys.stdin:
        if line.strip() == "start":
            threads.append(threading.Thread(target=stop.wait, daemon=True))
            threads[-1].start()
        else:
            stop.set()
            for t in threads:
                t.join()
            stop.clear()
            threads = [threading.Thread(target=stop.wait, daemon=True)]
            threads[0].start()
        print(threading.active_count(), flush=True)
""")


def _nices(pid: int) -> dict[int, int]:
    return {int(t): os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir(f"/proc/{pid}/task")}


def test_renice_reaches_threads_started_since_the_last(run_id, tmp_path):
    out = tmp_path / "out.txt"
    w = spawn([sys.executable, "-c", _THREADS], env={"PATH": os.environ["PATH"]}, cwd=str(tmp_path),
              stdout=str(out), stderr=subprocess.STDOUT, envelope=None, run_id=run_id,
              stdin=subprocess.PIPE)  # fmt: skip
    try:

        def tell(line: str, lines: int) -> None:
            w.popen.stdin.write(f"{line}\n".encode())
            w.popen.stdin.flush()
            assert _wait_for(lambda: len(out.read_text().split()) == lines)

        w.set_nice(3)  # one thread, listed
        tell("start", 1)  # two: the count changed
        w.set_nice(4)
        assert set(_nices(w.pid).values()) == {4}
        tell("swap", 2)  # the started thread ended and another began: the same count
        w.set_nice(5)
        assert len(_nices(w.pid)) == 2 and set(_nices(w.pid).values()) == {5}
    finally:
        w.kill()
        w.popen.stdin.close()
        w.close()


def test_pidfd_reports_exit_without_reaping(run_id):
    w = _spawn([sys.executable, "-c", "raise SystemExit(3)"], run_id)
    assert select.select([w.pidfd], [], [], 5.0)[0]
    assert w.reap() == 3


def test_spawn_needs_a_run_id():
    env = {k: v for k, v in os.environ.items() if k != "TESTBED_RUN_ID"}
    with pytest.raises(ValueError, match="run id"):
        spawn(["true"], env=env, cwd=None, stdout=None, stderr=None, envelope=None)


def test_spawn_failure_names_the_step(run_id):
    class Broken(NoEnvelope):
        def join_self(self) -> None:
            os.open("/nonexistent/cgroup.procs", os.O_WRONLY)

    with pytest.raises(SpawnError, match=r"envelope\.join_self\(\).*FileNotFoundError"):
        _spawn(["true"], run_id, envelope=Broken(run_id, 0, 1.0, 1.0))


def test_children_do_not_inherit_controller_priority(run_id):
    """A worker spawned by a SCHED_FIFO thread runs SCHED_OTHER at nice 0 (docs/measurements.md, "Priorities
    and scheduling classes")."""
    result: dict = {}

    def controller() -> None:
        result["got"] = raise_thread_priority()
        try:
            result["worker"] = _spawn(["sleep", "30"], run_id)
        finally:
            reset_thread_priority()

    t = threading.Thread(target=controller)
    t.start()
    t.join()
    w = result["worker"]
    try:
        assert result["got"] in ("SCHED_FIFO 10", "nice -10") or result["got"].startswith("normal (")
        assert os.sched_getscheduler(w.pid) == os.SCHED_OTHER
        assert os.getpriority(os.PRIO_PROCESS, w.pid) == 0
        print(f"\ncontroller thread got: {result['got']}")
    finally:
        w.kill()


def test_pdeathsig_kills_stopped_worker_with_parent(run_id):
    helper = textwrap.dedent(f"""
        import time
        from testbed.emulator.mechanism.process import spawn
        w = spawn(["sleep", "60"], env=None, cwd=None, stdout=None, stderr=None, envelope=None,
                  run_id={run_id!r})
        w.stop()
        print(w.pid, flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", helper], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(parent.stdout.readline())
        assert _wait_for(lambda: accounting.proc_state(pid) == "T")
        parent.kill()
        parent.wait()
        assert _wait_for(lambda: _gone(pid), timeout=2.0), "stopped worker outlived its killed parent"
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()
