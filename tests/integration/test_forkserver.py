"""The fork server on real processes: what a forked worker gets is what process.spawn guarantees, its
start-up costs the worker next to nothing, and every way out leaves no process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from testbed.emulator.mechanism import envelope as envmod
from testbed.emulator.mechanism import forkserver
from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.forkserver import ForkedWorker, ForkServer, served_module
from testbed.emulator.mechanism.process import SpawnError, Worker
from testbed.janitor import marked_processes

from ..conftest import requires

_V1_WHY = envmod.probe_v1()
needs_v1 = requires(_V1_WHY is None, f"cgroup v1 envelope not usable here: {_V1_WHY}")

# A worker module that reports what it got, first thing (the server imports it from its cwd).
REPORT = r"""
import json, os, signal, sys, time
first_cpu = time.process_time()
cg = open("/proc/self/cgroup").read()
status = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
stat = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
out = {
    "first_cpu_s": first_cpu, "name": __name__, "argv": sys.argv[1:], "cwd": os.getcwd(),
    "env": os.environ.get("FS_TEST"), "run_id": os.environ.get("TESTBED_RUN_ID"),
    "cgroup": cg, "sigblk": status["SigBlk"].strip(), "nice": int(stat[16]),
    "policy": os.sched_getscheduler(0), "sigint": str(signal.getsignal(signal.SIGINT)),
    "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")), "ppid": os.getppid(),
}
print(json.dumps(out))
if "--fail" in sys.argv:
    raise RuntimeError("asked to fail")
if "--exit" in sys.argv:
    sys.exit(int(sys.argv[sys.argv.index("--exit") + 1]))
if "--sleep" in sys.argv:
    time.sleep(60)
if "--work" in sys.argv:
    from testbed.apps.work import work
    work(float(sys.argv[sys.argv.index("--work") + 1]))
"""

THREADED = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"


@pytest.fixture
def server(tmp_path, run_id):
    """make(envelope=None, inside=False) -> a ForkServer in tmp_path (which holds the test modules)."""
    (tmp_path / "fs_report.py").write_text(REPORT)
    (tmp_path / "fs_threaded.py").write_text(THREADED)
    made = []

    def make(envelope=None, inside=False, **kw):
        fs = ForkServer(
            envelope, env={**os.environ, "FS_TEST": "server"}, cwd=str(tmp_path),
            log=str(tmp_path / "server.log"), run_id=run_id, inside_envelope=inside, **kw,
        )  # fmt: skip
        made.append(fs)
        return fs

    yield make
    for fs in made:
        fs.close()


def _argv(*args: str, module: str = "fs_report") -> list[str]:
    return [sys.executable, "-m", module, *args]


def _run(fs, tmp_path, *args, env_value="worker", timeout=30, name="w"):
    w = fs.spawn(_argv(*args), env={**os.environ, "FS_TEST": env_value}, cwd=str(tmp_path),
                 stdout=str(tmp_path / f"{name}.out"), stderr=str(tmp_path / f"{name}.err"))  # fmt: skip
    code = w.reap(timeout)
    out = (tmp_path / f"{name}.out").read_text()
    err = (tmp_path / f"{name}.err").read_text()
    return w, code, out, err


def test_served_module_only_for_this_interpreter_with_dash_m():
    assert served_module([sys.executable, "-m", "testbed.apps.synthetic", "--x"]) == "testbed.apps.synthetic"
    assert served_module(["mpiexec", "-n", "2", sys.executable, "-m", "x"]) is None
    assert served_module([sys.executable, "-u", "-m", "x"]) is None  # interpreter options: exec
    assert served_module([sys.executable, "script.py"]) is None
    assert served_module(["/nonexistent/python", "-m", "x"]) is None


def test_a_forked_worker_runs_the_module_as_main_with_its_argv_env_cwd_and_files(server, tmp_path):
    import json

    fs = server()
    w, code, out, err = _run(fs, tmp_path, "--a", "1")
    assert isinstance(w, ForkedWorker) and code == 0, err
    r = json.loads(out)
    assert r["name"] == "__main__" and r["argv"] == ["--a", "1"] and r["cwd"] == str(tmp_path)
    assert r["env"] == "worker" and r["run_id"] == fs.run_id
    assert r["ppid"] == fs.proc.pid
    assert r["fds"] == [0, 1, 2, 3]  # 3: the listing's own descriptor; nothing of the server's leaks
    # As a fresh interpreter has them: default Ctrl-C handler, nothing blocked, SCHED_OTHER at nice 0,
    # although the server runs at nice -10 and ignores SIGINT.
    assert "default_int_handler" in r["sigint"] and int(r["sigblk"], 16) == 0
    assert r["policy"] == os.SCHED_OTHER and r["nice"] == 0
    with open(f"/proc/{fs.proc.pid}/stat") as f:
        assert int(f.read().rsplit(")", 1)[1].split()[16]) == -10
    # Exit codes: sys.exit, an uncaught exception (traceback on stderr, as python -m), a signal.
    assert _run(fs, tmp_path, "--exit", "3", name="e3")[1] == 3
    _, code, _, err = _run(fs, tmp_path, "--fail", name="fail")
    assert code == 1 and err.strip().splitlines()[-1] == "RuntimeError: asked to fail"
    w = fs.spawn(_argv("--sleep"), env=None, cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=None)
    assert w.poll() is None
    assert w.kill() == -signal.SIGKILL and w.poll() == -signal.SIGKILL
    w.close()


def test_anything_but_python_dash_m_goes_through_the_exec_path(server, tmp_path):
    fs = server()
    w = fs.spawn([sys.executable, "-c", "import sys; sys.exit(4)"], env=None, cwd=str(tmp_path),
                 stdout=subprocess.DEVNULL, stderr=None)  # fmt: skip
    assert isinstance(w, Worker) and w.reap(30) == 4
    w.close()


def test_start_up_costs_the_worker_next_to_nothing(server, tmp_path):
    """The point of the server: a forked worker's CPU at its first instruction is a few ms (measured
    1-3 ms here: copy-on-write faults and the setup), an exec'd interpreter's is tens of ms."""
    import json

    fs = server(preload=["fs_report"])
    firsts = [json.loads(_run(fs, tmp_path, name=f"s{i}")[2])["first_cpu_s"] for i in range(5)]
    p = subprocess.run(_argv(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    exec_first = json.loads(p.stdout)["first_cpu_s"]
    assert sorted(firsts)[2] < 0.015, firsts
    assert sorted(firsts)[2] < exec_first / 3, (firsts, exec_first)
    # The CPU time reported at exit is the worker's own, read from the kernel before the server reaped it.
    w, code, _, _ = _run(fs, tmp_path, "--work", "50", name="work")
    assert code == 0 and 0.05 <= w.cpu_time_s() < 0.05 + 0.02, w.cpu_time_s()


@needs_v1
@pytest.mark.parametrize("inside", [False, True])
def test_the_worker_is_in_its_envelope_from_its_first_instruction(server, tmp_path, run_id, inside):
    import json

    env = make_envelope("cgroup-v1", run_id, 0, 1.0, 2.0)
    env.create()
    try:
        fs = server(env, inside=inside)
        w, code, out, err = _run(fs, tmp_path)
        assert code == 0, err
        groups = json.loads(out)["cgroup"]
        assert f"/testbed/{run_id}/node0" in groups and groups.count(f"/testbed/{run_id}/node0") >= 2
        with open(f"/proc/{fs.proc.pid}/cgroup") as f:
            assert (f"/testbed/{run_id}/node0" in f.read()) == inside
        # The janitor finds workers and server by their mark; the envelope's pids include the worker.
        w2 = fs.spawn(_argv("--sleep"), env=None, cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=None)
        marked = marked_processes(run_id)
        assert w2.pid in marked and fs.proc.pid in marked
        # spawn returns after the fork; the child joins the envelope right after, before anything else.
        deadline = time.monotonic() + 5
        while w2.pid not in env.pids():
            assert time.monotonic() < deadline, env.pids()
            time.sleep(0.01)
        w2.kill()
        w2.close()
    finally:
        env.destroy()


@needs_v1
def test_pooled_children_wait_inside_the_envelope_so_a_start_does_not_pay_the_join(server, run_id):
    """A v1 cgroup attach waits for an RCU grace period under a host-wide lock (13-21 ms of a rank's
    start, measured with 16 ranks starting together): the pool pays it before any request."""
    env = make_envelope("cgroup-v1", run_id, 0, 1.0, 2.0)
    env.create()
    try:
        fs = server(env)
        fs.wait_ready()
        deadline = time.monotonic() + 5
        while len(env.pids()) < forkserver.POOL_SIZE:
            assert time.monotonic() < deadline, env.pids()
            time.sleep(0.01)
        for pid in env.pids():
            with open(f"/proc/{pid}/stat") as f:
                assert int(f.read().rsplit(")", 1)[1].split()[1]) == fs.proc.pid  # the server's children
    finally:
        env.destroy()


@needs_v1
def test_a_failed_setup_step_is_one_line_on_the_workers_stderr(server, tmp_path, run_id):
    env = make_envelope("cgroup-v1", run_id, 0, 1.0, 2.0)
    env.create()
    fs = server(env)
    env.destroy()  # the cgroup is gone: joining it fails in the child
    w, code, _, err = _run(fs, tmp_path)
    assert code == 127
    (line,) = err.strip().splitlines()
    assert line.startswith("fork server: child setup failed at envelope join: FileNotFoundError"), line


def test_a_module_that_starts_a_thread_at_import_is_refused_and_the_server_goes_on(server, tmp_path):
    fs = server()
    with pytest.raises(SpawnError, match="importing fs_threaded started a thread"):
        fs.spawn(_argv(module="fs_threaded"), env=None, cwd=str(tmp_path), stdout=None, stderr=None)
    with pytest.raises(SpawnError, match="No module named 'no_such_module'"):
        fs.spawn(_argv(module="no_such_module"), env=None, cwd=str(tmp_path), stdout=None, stderr=None)
    assert _run(fs, tmp_path)[1] == 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None


def _wait_dead(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_workers_die_with_the_server_and_the_server_with_the_thread_that_started_it(tmp_path, run_id):
    (tmp_path / "fs_report.py").write_text(REPORT)
    box: dict = {}

    def start():
        # A short-lived thread: the server's PR_SET_PDEATHSIG fires when this thread ends.
        box["fs"] = ForkServer(None, env=None, cwd=str(tmp_path), log=subprocess.DEVNULL, run_id=run_id)
        box["w"] = box["fs"].spawn(_argv("--sleep"), env=None, cwd=str(tmp_path), stdout=subprocess.DEVNULL,
                                   stderr=None)  # fmt: skip
        time.sleep(0.5)  # the server has forked it

    t = threading.Thread(target=start)
    t.start()
    t.join()
    fs, w = box["fs"], box["w"]
    assert _wait_dead(fs.proc.pid) and _wait_dead(w.pid)
    # The worker's end is reported as a kill (nobody was left to report its exit).
    assert w.reap(5) == -signal.SIGKILL
    fs.close()


def test_killing_the_server_kills_its_workers(server, tmp_path):
    fs = server()
    ws = [fs.spawn(_argv("--sleep"), env=None, cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=None)
          for _ in range(3)]  # fmt: skip
    # Its children: the three workers and the ones it keeps forked, waiting for a request (refilled once
    # requests pause).
    time.sleep(forkserver.REFILL_DELAY_S + 0.3)
    children = [int(t) for t in os.listdir("/proc") if t.isdigit() and _ppid(int(t)) == fs.proc.pid]
    assert len(children) >= len(ws) + 1 and {w.pid for w in ws} <= set(children), children
    os.kill(fs.proc.pid, signal.SIGKILL)
    assert all(_wait_dead(pid) for pid in children)
    for w in ws:
        assert _wait_dead(w.pid)
        assert w.reap(5) == -signal.SIGKILL
        w.close()
    with pytest.raises(SpawnError, match="is gone|closed its socket"):
        fs.spawn(_argv(), env=None, cwd=str(tmp_path), stdout=None, stderr=None)


def test_a_worker_that_exited_unreported_takes_signals_and_nice_as_a_zombie_would(server, tmp_path):
    """The server reaps a worker before the agent reads its exit report; a slot switch in between (SIGSTOP
    to it) must not fail: it once ended quickstart runs with ProcessLookupError."""
    fs = server()
    w = fs.spawn(_argv("--exit", "0"), env=None, cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=None)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until the server has reaped it: its pidfd then finds no process
        try:
            signal.pidfd_send_signal(w.pidfd, 0)
        except ProcessLookupError:
            break
        time.sleep(0.005)
    else:
        pytest.fail("the server did not reap the worker within 10 s")
    assert w.returncode is None  # the report is unread
    # A CPU sample reads the report's figure and leaves the report for the reap (a sample that took it
    # made the next slot switch signal a worker already reaped, and fail).
    cpu = w.cpu_time_s()
    assert 0 < cpu < 1 and w.returncode is None
    w.stop()
    w.cont()
    w.set_nice(5)
    assert w.reap(5) == 0 and w.cpu_time_s() == cpu
    # Once its exit is known here, it is gone, as a reaped child is.
    with pytest.raises(ProcessLookupError):
        w.stop()
    with pytest.raises(ProcessLookupError):
        w.set_nice(0)
    w.close()


def test_preload_module_colon_function_fills_a_cache_every_worker_inherits(server, tmp_path):
    (tmp_path / "fs_cache.py").write_text(
        "import functools\n"
        "CALLS = []\n"
        "@functools.lru_cache(maxsize=1)\n"
        "def scan():\n"
        "    CALLS.append(1)\n"
        "    return 42\n"
    )
    (tmp_path / "fs_use.py").write_text(
        "import fs_cache\n"
        "if __name__ == '__main__':\n"
        "    fs_cache.scan()\n"
        "    print(len(fs_cache.CALLS), fs_cache.scan.cache_info().hits)\n"
    )
    fs = server(preload=["fs_cache:scan"])
    w = fs.spawn(_argv(module="fs_use"), env=None, cwd=str(tmp_path), stdout=str(tmp_path / "u.out"),
                 stderr=str(tmp_path / "u.err"))  # fmt: skip
    assert w.reap(30) == 0, (tmp_path / "u.err").read_text()
    w.close()
    # Called once, in the server at start: the worker's call was a hit on what the server had filled.
    assert (tmp_path / "u.out").read_text().split() == ["1", "1"]
