"""Starting and controlling real worker processes: spawn into an envelope, stop/continue, nice, accounting.

What ``spawn`` guarantees for the child, before the worker's first instruction runs (in ``preexec_fn``,
i.e. between fork and exec; kept to a handful of plain syscalls):

* ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the worker dies with its parent. The kernel fires it when the
  *thread* that forked the child exits, not the process: call ``spawn`` from a long-lived thread (the node
  agent's loop thread), never from a short-lived worker thread of a pool, or the workers die with it.
* the parent is still alive (``getppid()`` is the pid that called spawn), else the child exits (127):
  closes the race where the parent died before the prctl took effect.
* scheduling reset to SCHED_OTHER, nice 0: a controller running SCHED_FIFO or at negative nice would
  otherwise hand that to its workers, which can then starve it (docs/measurements.md, "Priorities and
  scheduling classes"). This must come before joining the envelope: an RT task may not enter a v1 cpu cgroup
  that has no RT runtime.
* signal mask emptied (a controller thread may block signals; the worker must not inherit that).
* the envelope joined (``envelope.join_self()``), so no worker instruction runs outside its quota.
* ``TESTBED_RUN_ID`` in its environment, so the janitor can find it (and its descendants) in /proc.

If any step fails the spawn raises :class:`SpawnError` naming the step and the errno, not the bare
"Exception occurred in preexec_fn" of subprocess.

CPU time (``Worker.cpu_time_s``) is the scheduler's nanosecond count (``sum_exec_runtime``), read through
the process's CPU-time clock: the same number as the first field of ``/proc/<pid>/schedstat``, but over
all threads and 50x cheaper; ``/proc/<pid>/task/*/schedstat`` and then ``/proc/<pid>/stat`` utime+stime
(10 ms ticks) are the fallbacks, used only if the kernel refuses the clock, and logged
(``accounting.CPU_TIME_SOURCE`` says which is in use).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, Any

from testbed.apps.environ import MARK_NODE as NODE_ENV
from testbed.apps.environ import MARK_RUN_ID as RUN_ID_ENV
from testbed.emulator.mechanism import accounting
from testbed.emulator.mechanism.envelope import Envelope

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
KILL_REAP_TIMEOUT_S = 5.0

# Loaded in the parent: the child must not dlopen anything between fork and exec.
_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int
_OTHER_PARAM = os.sched_param(0)


class SpawnError(RuntimeError):
    """The child could not be set up; the message names the step that failed and why."""


def _preexec(parent_pid: int, envelope: Envelope | None, errfd: int):
    def setup() -> None:
        step = b"prctl(PR_SET_PDEATHSIG, SIGKILL)"
        try:
            if _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl failed")
            if os.getppid() != parent_pid:
                os._exit(127)  # the parent died before the prctl: nobody would ever reap or kill us
            step = b"sched_setscheduler(SCHED_OTHER)"
            if os.sched_getscheduler(0) != os.SCHED_OTHER:
                os.sched_setscheduler(0, os.SCHED_OTHER, _OTHER_PARAM)
            step = b"setpriority(nice 0)"
            if os.getpriority(os.PRIO_PROCESS, 0) != 0:
                os.setpriority(os.PRIO_PROCESS, 0, 0)
            step = b"pthread_sigmask(empty)"
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            step = b"envelope.join_self()"
            if envelope is not None:
                envelope.join_self()
        except BaseException as e:
            os.write(errfd, step + b": " + repr(e).encode(errors="replace"))
            raise

    return setup


class BaseWorker:
    """A worker process, however it was started. Signals go through its pidfd, so a reaped worker's reused
    pid is never hit. Subclasses say how its exit is learnt (``exit_fd``, ``poll``, ``reap``)."""

    def __init__(self, pid: int, pidfd: int, envelope: Envelope | None) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.envelope = envelope
        self._tids: list[int] | None = None  # its threads when last listed (_each_thread)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pid={self.pid}, returncode={self.returncode})"

    @property
    def returncode(self) -> int | None:  # pragma: no cover - interface
        raise NotImplementedError

    @property
    def exit_fd(self) -> int:
        """Readable once the worker's exit is known here (an event loop can ``add_reader`` it)."""
        raise NotImplementedError  # pragma: no cover - interface

    def poll(self) -> int | None:  # pragma: no cover - interface
        raise NotImplementedError

    def reap(self, timeout: float | None = None) -> int:  # pragma: no cover - interface
        """Wait for exit and return the return code (negative: killed by that signal). Keeps the pidfd.
        Raises subprocess.TimeoutExpired after ``timeout`` seconds."""
        raise NotImplementedError

    def signal(self, sig: int) -> None:
        """Raises ProcessLookupError once the worker has been reaped (or its pidfd closed)."""
        if self.pidfd < 0:
            raise ProcessLookupError(self.pid)
        signal.pidfd_send_signal(self.pidfd, sig)

    def stop(self) -> None:
        self.signal(signal.SIGSTOP)

    def cont(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> int:
        """SIGKILL (+SIGCONT) and reap; returns the return code."""
        if self.poll() is not None:
            return self.returncode
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                self.signal(sig)
            except ProcessLookupError:
                break
        try:
            return self.reap(KILL_REAP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"worker {self.pid} still alive {KILL_REAP_TIMEOUT_S} s after SIGKILL (state {self.state()})"
            ) from None

    def set_nice(self, n: int) -> None:
        """setpriority on every thread: on Linux PRIO_PROCESS with a pid changes only that one thread."""
        self._each_thread(lambda tid: os.setpriority(os.PRIO_PROCESS, tid, n))

    def set_cpus(self, cpus: frozenset[int]) -> None:
        """sched_setaffinity on every thread (it too acts on one thread); children forked later inherit it."""
        self._each_thread(lambda tid: os.sched_setaffinity(tid, cpus))

    def _each_thread(self, op: Callable[[int], object]) -> None:
        """op(tid) on every thread. The threads are listed again only when their number (the task
        directory's link count, threads + 2: one stat) has changed or a listed one is gone: a policy
        renices or moves a worker up to a few times a message (DCS, PB), and listing each time took 5
        system calls for the 1 that does the work, each one a hand-over of the GIL between the agents of
        one process (issue 25: the agents' loops woke 9 times a message, 7 of them for the GIL).
        Equal count and every listed thread still there: none started since (tids are not reused
        before the pid space wraps)."""
        self._check_alive()
        task = f"/proc/{self.pid}/task"
        tids = self._tids
        if tids is None or os.stat(task).st_nlink != len(tids) + 2:
            tids = self._tids = [int(t) for t in os.listdir(task)]
        gone = False
        for tid in tids:
            try:
                op(tid)
            except ProcessLookupError:
                gone = True  # the thread exited meanwhile: another may have started in its place
        if gone:
            try:
                self._tids = [int(t) for t in os.listdir(task)]
            except FileNotFoundError:
                self._tids = None
                return  # the whole process exited meanwhile
            for tid in set(self._tids).difference(tids):
                try:
                    op(tid)
                except ProcessLookupError:
                    pass

    def cpu_time_s(self) -> float:
        self._check_alive()
        return accounting.cpu_time_s(self.pid)

    def state(self) -> str:
        self._check_alive()
        return accounting.proc_state(self.pid)

    def _check_alive(self) -> None:
        # After reaping, the pid may belong to someone else: never read /proc for it.
        if self.poll() is not None:
            raise ProcessLookupError(self.pid)

    def close(self) -> None:
        """Close the pidfd (remove it from any event loop first)."""
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class Worker(BaseWorker):
    """A worker this process started (and so reaps) itself: ``spawn``'s exec path."""

    def __init__(self, popen: subprocess.Popen, envelope: Envelope | None) -> None:
        # Readable once the process has exited: the agent's loop can add_reader(pidfd) instead of a thread
        # per child. A zombie still has a pidfd, so this cannot miss an early exit.
        super().__init__(popen.pid, os.pidfd_open(popen.pid), envelope)
        self.popen = popen

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    @property
    def exit_fd(self) -> int:
        return self.pidfd

    def poll(self) -> int | None:
        return self.popen.poll()

    def reap(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def _check_alive(self) -> None:
        # poll() would reap a zombie, whose CPU time the agent still reads: only a reaped one is gone.
        if self.popen.returncode is not None:
            raise ProcessLookupError(self.pid)


Output = str | os.PathLike | IO[Any] | int | None


def _open_output(target: Output) -> tuple[Any, bool]:
    if isinstance(target, (str, os.PathLike)):
        return open(target, "ab"), True
    return target, False


def worker_env(env: Mapping[str, str] | None, envelope: Envelope | None, run_id: str | None) -> dict:
    """The environment a worker gets: ``env`` (None: a copy of ours) marked with the run id (``run_id``,
    else the envelope's, else ``env[TESTBED_RUN_ID]``; without one the worker could not be found by the
    janitor, so that is an error) and the envelope's node."""
    full_env = dict(os.environ if env is None else env)
    rid = run_id or (envelope.run_id if envelope is not None else None) or full_env.get(RUN_ID_ENV)
    if not rid:
        raise ValueError(
            "spawn needs a run id (run_id=, an envelope, or env TESTBED_RUN_ID): unmarked workers "
            "cannot be cleaned up by the janitor"
        )
    if full_env.get(RUN_ID_ENV, rid) != rid:
        raise ValueError(f"env has {RUN_ID_ENV}={full_env[RUN_ID_ENV]!r} but the run id is {rid!r}")
    full_env[RUN_ID_ENV] = rid
    if envelope is not None:
        full_env.setdefault(NODE_ENV, str(envelope.node))
    return full_env


def spawn(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None,
    cwd: str | os.PathLike | None,
    stdout: Output,
    stderr: Output,
    envelope: Envelope | None,
    run_id: str | None = None,
    stdin: Any = subprocess.DEVNULL,
    pass_fds: Sequence[int] = (),
) -> Worker:
    """Start ``argv`` as a worker (see the module docstring for what the child gets).

    ``env`` None means a copy of ours. The run id comes from ``run_id``, else the envelope, else
    ``env[TESTBED_RUN_ID]``; without one the worker could not be found by the janitor, so that is an error.
    ``stdout``/``stderr``: a path (opened for append), a file object, an fd, subprocess.DEVNULL, or None.
    ``pass_fds``: descriptors the child keeps open (every other one is closed).
    """
    full_env = worker_env(env, envelope, run_id)

    out, close_out = _open_output(stdout)
    err, close_err = _open_output(stderr)
    rfd, wfd = os.pipe()  # O_CLOEXEC: the child's copy goes away at exec
    try:
        popen = subprocess.Popen(
            list(argv),
            env=full_env,
            cwd=cwd,
            stdin=stdin,
            stdout=out,
            stderr=err,
            preexec_fn=_preexec(os.getpid(), envelope, wfd),
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )
    except subprocess.SubprocessError as e:
        # The failed child wrote its step before exiting. Non-blocking: a sibling spawn from another thread
        # may hold a copy of wfd until its own exec, and we must not wait for that.
        os.set_blocking(rfd, False)
        try:
            detail = os.read(rfd, 4096).decode(errors="replace")
        except BlockingIOError:
            detail = ""
        raise SpawnError(f"spawn {argv[0]!r}: child setup failed at {detail or e}") from e
    finally:
        os.close(wfd)
        os.close(rfd)
        if close_out:
            out.close()
        if close_err:
            err.close()
    if envelope is not None:
        envelope.track(popen.pid)
    return Worker(popen, envelope)


# Group switches. kill(SIGSTOP) returns once the signal is queued and the target kicked: a task that is not
# on a CPU (waiting for one, or asleep) runs no user-space instruction after that, and one that is running
# on another CPU is interrupted by the reschedule IPI within microseconds and stops in the kernel. So the
# instant after the last kill() returned is when the switch took effect; /proc shows 'T' only later, when
# the task is next scheduled (docs/measurements.md, "Stopping and continuing processes"). kill(SIGCONT) wakes
# stopped tasks inside the call: they are runnable when it returns. Signals go back to back, with nothing in
# between, to keep a gang's skew small.


def stop_all(workers: Iterable[BaseWorker]) -> float:
    """SIGSTOP every worker; returns time.monotonic() after the last signal. Reaped workers are skipped."""
    return _signal_all(workers, signal.SIGSTOP)


def cont_all(workers: Iterable[BaseWorker]) -> float:
    """SIGCONT every worker; returns time.monotonic() after the last signal. Reaped workers are skipped."""
    return _signal_all(workers, signal.SIGCONT)


def _signal_all(workers: Iterable[BaseWorker], sig: int) -> float:
    gone = []
    for w in workers:
        try:
            w.signal(sig)
        except ProcessLookupError:
            gone.append(w.pid)
    t = time.monotonic()
    if gone:
        # The agent learns of exits from the pidfd; here it is only worth a trace.
        log.debug("%s: workers %s already reaped, skipped", signal.Signals(sig).name, gone)
    return t
