"""Raising the priority of a thread that must act on time (a node agent's switch loop).

On Linux both ``sched_setscheduler(0, ...)`` and ``setpriority(PRIO_PROCESS, tid, ...)`` act on one
thread, not the process: call this from the thread that needs it. docs/measurements.md, "Timers in Python": a
1 ms timer loop under load is 2 ms late at normal priority, 70 us at nice -19, 20 us at SCHED_FIFO. SCHED_FIFO
is refused inside a child v1 cpu cgroup (no RT runtime there), so the controller must not sit in its workers'
envelope; and children inherit the policy, which ``process.spawn`` resets in each worker. The kernel's RT
throttling (/proc/sys/kernel/sched_rt_runtime_us, 95 % by default) keeps a runaway FIFO thread from locking a
CPU forever.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import threading

#: The CFS slice (us) asked for the control plane's threads and the nodes' workers (:func:`set_slice`).
SLICE_US = 100
#: sched_setattr(2) by machine (no wrapper in Python's os module).
_SCHED_SETATTR = {"x86_64": 314, "aarch64": 274}.get(platform.machine())
_ATTR = "=IIQiIQQQII"  # struct sched_attr, SCHED_ATTR_SIZE_VER1 (56 bytes)
_libc = ctypes.CDLL(None, use_errno=True)


def set_slice(us: int = SLICE_US, tid: int = 0) -> str | None:
    """Ask the kernel for a CFS slice of ``us`` for thread ``tid`` (0: the caller; ``us`` 0: the kernel's
    default), keeping its nice; a thread that is not SCHED_OTHER is left alone. None if granted (or left
    alone), else why not.

    With EEVDF (Linux 6.6+), a task that wakes does not preempt the one running until that one's slice
    ends (1.4 ms here by default) unless its own slice is shorter (PREEMPT_SHORT, 6.12+; the slice is
    ``sched_attr.sched_runtime``, 0.1-100 ms). A busy process outside the testbed, whatever its weight,
    runs whenever the run leaves a CPU idle; a node's worker woken by a barrier message, or a control
    thread, then waited up to its slice, and the compute jobs measured 0.7-0.9 of their node instead of
    ~1.0 (docs/measurements.md, "Issue 25: a busy host"). Never raises."""
    if _SCHED_SETATTR is None:
        return f"sched_setattr: no syscall number known for {platform.machine()}"
    try:
        if os.sched_getscheduler(tid) != os.SCHED_OTHER:
            return None  # a SCHED_FIFO loop: no CFS slice to shorten, and sched_setattr would undo it
        nice = os.getpriority(os.PRIO_PROCESS, tid)
    except OSError as e:
        return f"sched_setattr (slice {us} us): {e.strerror}"
    attr = ctypes.create_string_buffer(struct.pack(_ATTR, 56, 0, 0, nice, 0, us * 1000, 0, 0, 0, 0), 56)
    if _libc.syscall(_SCHED_SETATTR, tid, attr, 0) != 0:
        return f"sched_setattr (slice {us} us) refused: {os.strerror(ctypes.get_errno())}"
    return None


def _cpu_cgroup() -> str:
    try:
        with open("/proc/thread-self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if "cpu" in ctrls.split(","):
                    return path
    except OSError:
        pass
    return "?"


def raise_thread_priority(fifo_priority: int = 10, nice: int = -10) -> str:
    """Try SCHED_FIFO ``fifo_priority``, else nice ``nice``, for the calling thread.

    Returns what was obtained: "SCHED_FIFO 10", "nice -10", or "normal (<why both were refused>)". Never
    raises: the caller logs the result (and the report should carry it).
    """
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(fifo_priority))
        return f"SCHED_FIFO {fifo_priority}"
    except OSError as e:
        cg = _cpu_cgroup()
        hint = f", thread is in cpu cgroup {cg} (no RT runtime there)" if cg not in ("/", "?") else ""
        why_fifo = f"SCHED_FIFO refused: {e.strerror}{hint}"
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, nice)
        return f"nice {nice}"
    except OSError as e:
        why_nice = f"nice {nice} refused: {e.strerror}"
    return f"normal ({why_fifo}; {why_nice})"


def reset_thread_priority() -> None:
    """Back to SCHED_OTHER, nice 0, for the calling thread (e.g. before it starts helpers of its own)."""
    if os.sched_getscheduler(0) != os.SCHED_OTHER:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 0)


def raise_process_nice(nice: int = -10) -> str:
    """Every current thread of this process to ``nice`` (new threads inherit it from their creator).

    A timer thread at SCHED_FIFO still waits for the GIL; if the thread holding it runs at nice 0 beside
    busy workers it is preempted while holding it (priority inversion). Raising every thread of the
    controller keeps the GIL holder on a CPU. Returns what was obtained, never raises.
    """
    done, refused, no_slice = 0, "", None
    for tid in os.listdir("/proc/self/task"):
        no_slice = set_slice(SLICE_US, int(tid)) or no_slice
        try:
            os.setpriority(os.PRIO_PROCESS, int(tid), nice)
            done += 1
        except OSError as e:
            refused = f"{e.strerror}"
    slice_ = f"slice {SLICE_US} us" if no_slice is None else no_slice
    if refused:
        return f"nice {nice} on {done} threads (refused on others: {refused}), {slice_}"
    return f"nice {nice}, {slice_}"


def raise_session_group(nice: int = -10) -> tuple[str, str | None]:
    """Raise this session's autogroup to ``nice``; returns (what was obtained, the nice to restore, or
    None when nothing changed): :func:`restore_session_group` puts it back.

    With autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``, on by default) the CPU is
    shared first between sessions, and a session weighs as one process of its autogroup's nice however
    its threads are niced. Every process of a run's control plane (Ray, the node agents, the fork
    servers) is in the driver's session, so it weighed 1024 against the testbed cgroups' 10240
    (envelope.SHARES_V1): under load a slot's dispatch could reach its node late (gang skew p99 up to
    5.6 ms in one of 3 runs on a busy host). At nice -10 (9548) it competes with the nodes as an equal,
    and both far outweigh other sessions. Where no autogroup applies (autogroups off, or a session left in
    the root group: the file reads empty, as in CI), each process weighs as itself, the agents' threads at
    nice -10: nothing to raise. Never raises.

    Now only the fallback where the run's control cgroup cannot be made (mechanism/controlgroup.py; the
    driver says so loudly): the autogroup raises every process of the session, and a busy loop started
    from the same shell as the run is raised with the control plane."""
    path = "/proc/self/autogroup"
    try:
        with open(path) as f:
            old = f.read().split()[-1]  # "/autogroup-11 nice 0"
    except (OSError, IndexError):
        return "no autogroup", None
    try:
        with open(path, "w") as f:
            f.write(str(nice))
    except OSError as e:
        return f"session group not raised ({e.strerror})", None
    return f"session group nice {nice}", old


def session_group_nice() -> str | None:
    """This session's autogroup nice now (what :func:`restore_session_group` puts back), None where there
    is no autogroup."""
    try:
        with open("/proc/self/autogroup") as f:
            return f.read().split()[-1]  # "/autogroup-11 nice 0"
    except (OSError, IndexError):
        return None


def restore_session_group(old: str | None, pid: int | str = "self") -> bool:
    """Set the autogroup of ``pid``'s session back to ``old`` (from :func:`raise_session_group`)."""
    if old is None:
        return False
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(old)
        return True
    except OSError:
        return False
