"""The run's control cgroup (testbed/emulator/mechanism/controlgroup.py) on real processes: a process put in
it is there with its weight and RT runtime, its children are born there, SCHED_FIFO works there, the
driver goes back where it was, and the janitor removes the group, killing what is left in it, whatever
happened to the driver."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from testbed import janitor
from testbed.emulator.mechanism import envelope as envmod
from testbed.emulator.mechanism.controlgroup import CONTROL_SHARES, HOST_SHARES, ControlGroup
from testbed.janitor import cleanup_run, start_janitor

from ..conftest import requires, wait_for

_V1_WHY = envmod.probe_v1()
needs_v1 = requires(_V1_WHY is None, f"cgroup v1 not usable here: {_V1_WHY}")
pytestmark = pytest.mark.cgroup


def _cpu_cgroup(pid: int | str) -> str:
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if "cpu" in ctrls.split(","):
                return path
    raise AssertionError(f"no cpu cgroup for {pid}")


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


# A child that reports its cpu cgroup and whether SCHED_FIFO is granted there, forks a grandchild that
# reports its own, then sleeps.
CHILD = textwrap.dedent("""
    import json, os, sys, time
    def cg(pid):
        for line in open(f"/proc/{pid}/cgroup"):
            _, c, p = line.rstrip("\\n").split(":", 2)
            if "cpu" in c.split(","):
                return p
    sys.stdin.readline()  # joined by the test
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        fifo = "ok"
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except OSError as e:
        fifo = e.strerror
    r, w = os.pipe()
    if os.fork() == 0:
        os.write(w, cg("self").encode()); time.sleep(60); os._exit(0)
    print(json.dumps({"cg": cg("self"), "fifo": fifo, "grandchild": os.read(r, 4096).decode()}), flush=True)
    time.sleep(60)
""")


@needs_v1
def test_a_process_in_the_control_group_is_weighted_and_its_children_are_born_there(run_id):
    ctl = ControlGroup(run_id)
    ctl.create()
    cpu = ctl.dirs["cpu"]
    rel = cpu[len(ctl.mounts["cpu"]) :]
    assert rel == f"/testbed/{run_id}/control"
    for d, shares in (
        (os.path.dirname(os.path.dirname(cpu)), HOST_SHARES),
        (os.path.dirname(cpu), HOST_SHARES),
        (cpu, CONTROL_SHARES),
    ):
        with open(os.path.join(d, "cpu.shares")) as f:
            assert int(f.read()) == shares, d
    # A node made after it (by an agent) does not lower its ancestors' weight.
    node = envmod.CgroupV1Envelope(run_id, 0, 1.0, 4.0)
    node.create()
    with open(os.path.join(os.path.dirname(cpu), "cpu.shares")) as f:
        assert int(f.read()) == HOST_SHARES
    has_rt = os.path.exists(os.path.join(cpu, "cpu.rt_runtime_us"))
    if has_rt:
        with open(os.path.join(cpu, "cpu.rt_runtime_us")) as f:
            got = int(f.read())
        # Granted unless the host's RT budget is spent, which the note must then say.
        assert got == ctl.rt_runtime_us and (got > 0 or "NO RT runtime" in ctl.note), ctl.note
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert _cpu_cgroup(child.pid) != rel
        ctl.join(child.pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        info = json.loads(child.stdout.readline())
        assert info["cg"] == rel and info["grandchild"] == rel
        assert child.pid in ctl.pids()
        if has_rt and ctl.rt_runtime_us:
            assert info["fifo"] == "ok", info  # the agents' loops keep SCHED_FIFO in it
        assert ctl.cpu_usage_s() > 0
    finally:
        report = cleanup_run(run_id)  # the janitor's sweep: kills what is in the group, removes it
    assert child.wait(timeout=5) != 0
    assert not report["errors"], report
    assert any(d.endswith(f"{run_id}/control") for d in report["cgroups_removed"]), report
    assert not janitor._run_dirs(run_id)


@needs_v1
def test_the_driver_goes_back_where_it_was(run_id):
    before = _cpu_cgroup("self")
    ctl = ControlGroup(run_id)
    ctl.create()
    ctl.join()
    try:
        assert _cpu_cgroup("self") == f"/testbed/{run_id}/control"
    finally:
        ctl.leave()
    assert _cpu_cgroup("self") == before
    assert ctl.pids() == []
    ctl.destroy()
    assert not janitor._run_dirs(run_id)


# A driver: makes the control group, joins it, starts a child (as Ray's would be, born in the group),
# reports, and waits to be killed.
DRIVER = textwrap.dedent("""
    import json, subprocess, sys, time
    from testbed.emulator.mechanism.controlgroup import ControlGroup
    ctl = ControlGroup(sys.argv[1])
    ctl.create()
    ctl.join()
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    print(json.dumps({"child": child.pid}), flush=True)
    time.sleep(60)
""")


@needs_v1
def test_a_killed_driver_leaves_no_control_group(run_id, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TESTBED_RUN_ID"}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, run_id], stdout=subprocess.PIPE, text=True, env=env
    )
    info = json.loads(driver.stdout.readline())
    log = tmp_path / "janitor.log"
    jan = start_janitor(run_id, [driver.pid], log_path=str(log))
    try:
        assert _cpu_cgroup(info["child"]) == f"/testbed/{run_id}/control"
        driver.kill()
        driver.wait()
        # The child carries no mark: only its cgroup finds it.
        assert wait_for(lambda: _gone(info["child"]) and not janitor._run_dirs(run_id)), log.read_text()
        assert jan.wait(timeout=5) == 0, log.read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
        if jan.poll() is None:
            jan.kill()


def _slice_ns(pid: int) -> int:
    import ctypes
    import struct

    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(56)
    assert libc.syscall({"x86_64": 315, "aarch64": 275}[os.uname().machine], pid, buf, 56, 0) == 0
    return struct.unpack("=IIQiIQQQII", buf.raw)[5]


@requires(os.uname().machine in ("x86_64", "aarch64"), "sched_setattr's number known on x86_64/aarch64 only")
def test_a_short_slice_is_granted_and_a_fifo_thread_left_alone():
    from testbed.emulator.mechanism.priority import SLICE_US, set_slice

    child = subprocess.Popen(["sleep", "30"])
    try:
        os.setpriority(os.PRIO_PROCESS, child.pid, 3)
        before = _slice_ns(child.pid)
        assert set_slice(SLICE_US, child.pid) is None
        assert _slice_ns(child.pid) == SLICE_US * 1000 != before
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == 3  # its nice kept
        os.sched_setscheduler(child.pid, os.SCHED_FIFO, os.sched_param(1))
        assert set_slice(SLICE_US * 2, child.pid) is None
        assert os.sched_getscheduler(child.pid) == os.SCHED_FIFO  # not undone
    finally:
        child.kill()
        child.wait()
