"""Per-process accounting straight from the kernel: CPU time, scheduler state, memory.

CPU time is the scheduler's own nanosecond count of time on a CPU (``sum_exec_runtime``, updated at every
context switch and scheduler tick). It is read, in this order of preference:

1. the process's CPU-time clock, ``clock_gettime(MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED))``: the same
   counter as the first field of ``/proc/<pid>/schedstat`` (equal to the nanosecond, checked), but summed
   over *all* threads including those that have exited, and one syscall (0.7 us) instead of
   open/read/close of a /proc file (~40 us here, more under load);
2. ``/proc/<pid>/task/*/schedstat`` first fields, summed (live threads only), if the kernel refuses the
   clock of another process;
3. ``/proc/<pid>/stat`` utime+stime (whole 1/CLK_TCK ticks), only if the kernel has no schedstat.

:data:`CPU_TIME_SOURCE` says which one this process uses; anything but the first is logged at import.
For a running task every source is current only to its last tick (4 ms at HZ=250): a reading taken while
it runs may be up to one tick behind. The envelope's ``cpu_usage_s()`` is the figure for a whole node.
"""

from __future__ import annotations

import logging
import os
import time

log = logging.getLogger(__name__)

_CLK_TCK = os.sysconf("SC_CLK_TCK")
_CPUCLOCK_SCHED = 2


def _pid_clock(pid: int) -> int:
    # include/linux/posix-timers.h: MAKE_PROCESS_CPUCLOCK(pid, clock) = ((~pid) << 3) | clock
    return ((~pid) << 3) | _CPUCLOCK_SCHED


def _probe_source() -> str:
    try:
        time.clock_gettime_ns(_pid_clock(os.getppid()))
        return "clock"
    except OSError as e:
        why = f"clock_gettime on another process's CPU clock refused ({e.strerror})"
    if os.path.exists("/proc/self/schedstat"):
        log.warning("per-process CPU time from /proc/<pid>/task/*/schedstat: %s", why)
        return "schedstat"
    log.warning(
        "per-process CPU time from /proc/<pid>/stat utime+stime in 1/%d s ticks: %s and this kernel "
        "has no schedstat",
        _CLK_TCK,
        why,
    )
    return "stat"


_SOURCE = _probe_source()
CPU_TIME_SOURCE = {
    "clock": "process CPU-time clock (ns, all threads)",
    "schedstat": "/proc/<pid>/task/*/schedstat (ns, live threads)",
    "stat": f"/proc/<pid>/stat utime+stime (1/{_CLK_TCK} s ticks)",
}[_SOURCE]


def _stat_fields(pid: int) -> list[str]:
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces and parentheses)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessLookupError(pid) from None
    return data[data.rindex(b")") + 2 :].decode().split()


def cpu_time_s(pid: int) -> float:
    """CPU seconds used by process ``pid`` (see the module docstring). ProcessLookupError if it is gone."""
    if _SOURCE == "clock":
        try:
            return time.clock_gettime_ns(_pid_clock(pid)) / 1e9
        except OSError:
            raise ProcessLookupError(pid) from None  # EINVAL: no such process
    if _SOURCE == "stat":
        f = _stat_fields(pid)
        # f[0] is field 3 (state) of /proc/<pid>/stat; utime and stime are fields 14 and 15.
        return (int(f[11]) + int(f[12])) / _CLK_TCK
    return schedstat_s(pid)


def schedstat_s(pid: int) -> float:
    """Sum of the first schedstat field of the live threads of ``pid``, in seconds."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessLookupError(pid) from None
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as f:
                total += int(f.read().split(None, 1)[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread exited between listdir and open
    return total / 1e9


def proc_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat: R running, S sleeping, T stopped, D (also frozen), Z zombie."""
    return _stat_fields(pid)[0]


def start_time_ticks(pid: int) -> int:
    """Start time of ``pid`` in clock ticks since boot: with the pid, it identifies a process across reuse."""
    return int(_stat_fields(pid)[19])


def rss_pss_mb(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of ``pid`` in MiB from /proc/<pid>/smaps_rollup. Raises ProcessLookupError if it is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith(b"Pss:"):
                    pss = int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        raise ProcessLookupError(pid) from None
    return rss / 1024.0, pss / 1024.0
