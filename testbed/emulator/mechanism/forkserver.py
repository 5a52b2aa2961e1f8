"""A node's fork server: worker start-up outside the job's time and CPU.

Starting a worker by exec costs a fresh interpreter its start-up (site, the editable install's finder,
the worker's imports: about 0.1 s of CPU here, and far longer in wall time inside a throttled node), all
charged to the job. A fork server is one long-lived interpreter per node with the worker modules already
imported; a ``python -m MODULE ARGS`` command is served by forking it and running MODULE as
``__main__`` in the child with that argv, environment, working directory and output files. The module
is imported once, in the server, on its first request (or at start with ``preload``), and its code
object is compiled there once; the child runs it directly. Anything else (``mpiexec ...``, another
interpreter, interpreter options) goes through :func:`testbed.emulator.mechanism.process.spawn`'s exec path.

The server keeps ``POOL_SIZE`` children forked ahead, each past the generic part of a start (the fork
itself, copy-on-write faults, the resets below; ~1-2 ms of CPU) and then past the envelope's join,
waiting in the envelope: a request goes to one of them, which runs the module, and the server forks its
replacement after it has answered. The join is done ahead because a v1 cgroup attach waits for an RCU
grace period under a host-wide lock: 13-21 ms of wall time per start here (median, 16 ranks starting
together, which queue on that lock), 2 emulated ms at TDF 9.4, and up to 4 when they queue. A waiting
child costs its node no CPU. A pooled child that could not join leaves it to its request, which then
fails with the step's one line. A pooled child has the code of every module loaded before its fork;
loading a new one retires the pool.

The child gets what ``process.spawn`` guarantees, before the first instruction of the worker:

* ``PR_SET_PDEATHSIG(SIGKILL)`` and a check that its parent (the server) is still there; the server has
  the same tie to the thread that started it (``ForkServer`` must be made on a long-lived thread, as
  ``spawn`` must be called from one): agent thread dies -> server dies -> workers die;
* SCHED_OTHER, nice 0 (the server runs at nice -10), an empty signal mask, default signal dispositions;
* the envelope joined (``Envelope.join_files``);
* ``TESTBED_RUN_ID`` in its environment (``os.environ``) and in ``/proc/<pid>/environ``, which a fork
  inherits from the server's own exec (the server is started with the run id): the janitor finds it;
* stdin, stdout and stderr the files asked for, every other descriptor closed;
* its own CPU clock: a forked process's CPU time starts at zero, and the fork's cost is the server's;
* a session of its own (session id = its pid), which whatever it forks inherits.

A step that fails writes ``fork server: child setup failed at <step>: <error>`` to the worker's stderr
and exits 127 (the agent's one-line reason), as ``spawn`` raises naming the step.

Where the server lives: outside the node's envelope, in the agent's cgroup (a child joins the envelope
before the worker's first instruction: while it waits in the pool, or else with its request). Inside
it, the server would answer a fork request, and report an exit, only when the node's CFS quota allows:
up to a period later (90 ms real at TDF 9.4 = 9.6 emulated ms) on a node whose quota a running job has
spent, and its pooled children's start would be the node's CPU. ``inside_envelope=True`` puts it
there all the same, for an envelope that a process cannot join after its start (a container would need
that; the tests cover it; it is not measured).

Exits: the server is the parent; it reaps each child (reading its CPU time from the zombie first) and
writes ``(exit code, CPU ns)`` to a socket given to the client for that worker alone
(:attr:`ForkedWorker.exit_fd`), which is readable once the exit is known, like a pidfd. The client also
gets a pidfd of the child (sent by the server, which cannot lose the pid to reuse before reaping it) for
signals.

Limits of a fork (said here, not hidden): interpreter-start settings of the request's environment
(``PYTHONHASHSEED``, ``PYTHONPATH``, ``-X`` options...) are the server's, except ``PYTHONUNBUFFERED``,
which the child applies to its standard streams; a module must be import-safe (no threads or other side
effects at import: the server refuses one that leaves a thread behind).

Server: ``python -m testbed.emulator.mechanism.forkserver --fd N [--preload M[:F],...] [--join FILE,...]``.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import gc
import importlib
import importlib.util
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
import types
from collections.abc import Mapping, Sequence
from typing import Any

from testbed.emulator.mechanism.envelope import join_files_now
from testbed.emulator.mechanism.priority import SLICE_US, set_slice
from testbed.emulator.mechanism.process import (
    KILL_REAP_TIMEOUT_S,
    BaseWorker,
    Output,
    SpawnError,
    spawn,
    worker_env,
)

_EXIT = struct.Struct("!iq")  # exit code (negative: signal), CPU ns
_MAX_MSG = 1 << 20
PR_SET_PDEATHSIG = 1
_CPUCLOCK_SCHED = 2
SERVER_NICE = -10
#: Children kept forked and waiting: a request is answered by one that has done the generic part of its
#: start already (the fork, copy-on-write faults, the resets: ~1-2 ms of CPU), outside the envelope.
POOL_SIZE = 2
#: Real seconds without a request before the pool is refilled (the ranks of a 64-node job took ~1 s to
#: start on a loaded 2-core host; a refill fork during that burst would compete with it).
REFILL_DELAY_S = 1.0


def _pid_cpu_clock(pid: int) -> int:
    return ((~pid) << 3) | _CPUCLOCK_SCHED  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)


# ---------------------------------------------------------------------------------------------------------
# Client (in the node agent)


class ForkedWorker(BaseWorker):
    """A worker forked by a :class:`ForkServer`: the server reaps it and reports its exit."""

    def __init__(self, pid: int, pidfd: int, exit_sock: socket.socket, envelope) -> None:
        super().__init__(pid, pidfd, envelope)
        self._exit_sock = exit_sock
        self._returncode: int | None = None
        self.cpu_at_exit_s: float | None = None

    @property
    def returncode(self) -> int | None:
        return self._returncode

    @property
    def exit_fd(self) -> int:
        return self._exit_sock.fileno()

    def _read_exit(self, timeout: float | None) -> bool:
        if self._returncode is not None:
            return True
        self._exit_sock.settimeout(timeout)
        try:
            data = self._exit_sock.recv(_EXIT.size)
        except (TimeoutError, BlockingIOError):
            return False
        except OSError:
            data = b""
        if len(data) == _EXIT.size:
            code, cpu_ns = _EXIT.unpack(data)
            self._returncode = code
            self.cpu_at_exit_s = cpu_ns / 1e9 if cpu_ns >= 0 else None
        else:
            # The server went away without reporting: its death killed the worker (PR_SET_PDEATHSIG).
            self._returncode = -signal.SIGKILL
        return True

    def poll(self) -> int | None:
        self._read_exit(0.0)
        return self._returncode

    def reap(self, timeout: float | None = None) -> int:
        if not self._read_exit(timeout):
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)
        return self._returncode

    # A worker exits, the server reaps it, and its report waits on the exit socket until the agent's loop
    # reaps it here (``reap``/``poll``). Until then it is, to the agent, what an exec'd child is before its
    # parent reaps it: a zombie. So nothing else consumes the report (a CPU sample that did made the next
    # slot switch signal a worker already reaped here, and ProcessLookupError failed quickstart runs), and a
    # signal or a nice in that window does nothing, where the kernel answers ESRCH (through the pidfd: the
    # same process, never a reused pid), as early as while the worker is exiting.

    def _peek_exit_cpu(self) -> float | None:
        """The CPU time in the unread exit report, if there is one (the report stays for ``reap``)."""
        try:
            data = self._exit_sock.recv(_EXIT.size, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:  # BlockingIOError: no report yet
            return None
        if len(data) != _EXIT.size:
            return None
        cpu_ns = _EXIT.unpack(data)[1]
        return cpu_ns / 1e9 if cpu_ns >= 0 else None

    def _check_alive(self) -> None:
        if self._returncode is not None or self.pidfd < 0:
            raise ProcessLookupError(self.pid)

    def signal(self, sig: int) -> None:
        try:
            super().signal(sig)
        except ProcessLookupError:
            self._check_alive()  # raises once reaped here; before that, as to a zombie, nothing

    def _each_thread(self, op) -> None:
        self._check_alive()
        try:
            signal.pidfd_send_signal(self.pidfd, 0)
            super()._each_thread(op)  # its _check_alive is the one above: the report stays unread
        except (ProcessLookupError, FileNotFoundError):
            pass  # exiting or reaped by the server: its pid may be someone else's from now on

    def cpu_time_s(self) -> float:
        if self._returncode is not None and self.cpu_at_exit_s is not None:
            return self.cpu_at_exit_s  # read by the server from the zombie, before it reaped it
        self._check_alive()
        cpu = self._peek_exit_cpu()
        if cpu is not None:
            return cpu
        try:
            return super().cpu_time_s()
        except (FileNotFoundError, ProcessLookupError):
            cpu = self._peek_exit_cpu()  # reaped by the server meanwhile: its report has the figure
            if cpu is None:
                raise ProcessLookupError(self.pid) from None
            return cpu

    def close(self) -> None:
        super().close()
        sock = getattr(self, "_exit_sock", None)
        if sock is not None and sock.fileno() >= 0:
            sock.close()


def served_module(argv: Sequence[str]) -> str | None:
    """The module of ``[sys.executable, "-m", MODULE, ...]`` (this interpreter, no other option); None
    for any other command, which the exec path must start."""
    if len(argv) < 3 or argv[1] != "-m" or not argv[2] or argv[2].startswith("-"):
        return None
    try:
        same = os.path.samefile(argv[0], sys.executable)
    except OSError:
        return None
    return argv[2] if same else None


def _output_fd(target: Output, default_fd: int) -> tuple[int, bool]:
    """(fd, opened here) for a spawn output argument."""
    if target is None:
        return default_fd, False
    if target == subprocess.DEVNULL:
        return os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC), True
    if isinstance(target, int):
        return target, False
    if isinstance(target, str | os.PathLike):
        return os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644), True
    return target.fileno(), False


class ForkServer:
    """The client end, and owner, of one node's fork server. Make it on a long-lived thread (the server
    dies with that thread, and its workers with it); :meth:`spawn` may then be called from any thread.

    ``env`` is the server's environment (it must carry the run id: ``process.worker_env`` marks it),
    ``log`` where its own output goes, ``preload`` modules imported at start (``module:function`` also
    calls ``function()`` once imported: a cache it fills, such as an entry-point scan, is then every
    child's without cost)."""

    def __init__(
        self,
        envelope,
        *,
        env: Mapping[str, str] | None,
        cwd: str | os.PathLike | None,
        log: Output,
        run_id: str | None = None,
        preload: Sequence[str] = (),
        inside_envelope: bool = False,
    ) -> None:
        self.envelope = envelope
        self.run_id = run_id or (envelope.run_id if envelope is not None else None)
        self._lock = threading.Lock()
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        join = envelope.join_files() if envelope is not None else []
        argv = [sys.executable, "-m", "testbed.emulator.mechanism.forkserver", "--fd", str(theirs.fileno())]
        if preload:
            argv += ["--preload", ",".join(preload)]
        if join:
            argv += ["--join", ",".join(join)]
        try:
            self.proc = spawn(
                argv,
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=log,
                envelope=envelope if inside_envelope else None,
                run_id=self.run_id,
                pass_fds=(theirs.fileno(),),
            )
        except BaseException:
            self._sock.close()
            raise
        finally:
            theirs.close()
        self.inside_envelope = inside_envelope
        self.closed = False
        self._ready = False

    def wait_ready(self, timeout: float | None = 60.0) -> None:
        """Waits until the server has imported its ``preload`` modules (it answers requests only then);
        raises SpawnError if it could not."""
        with self._lock:
            self._await_ready(timeout)

    def _await_ready(self, timeout: float | None) -> None:
        if self._ready:
            return
        self._sock.settimeout(timeout)
        try:
            msg = self._sock.recv(_MAX_MSG)
        except TimeoutError:
            raise SpawnError(f"{self!r} not ready after {timeout} s: {self._why_gone()}") from None
        except OSError as exc:
            raise SpawnError(f"{self!r} is gone ({exc}): {self._why_gone()}") from exc
        finally:
            self._sock.settimeout(None)
        if not msg:
            raise SpawnError(f"{self!r} closed its socket: {self._why_gone()}")
        reply = json.loads(msg)
        if "error" in reply:
            raise SpawnError(f"fork server cannot preload: {reply['error']}")
        self._ready = True

    def __repr__(self) -> str:
        return f"ForkServer(pid={self.proc.pid}, node={getattr(self.envelope, 'node', None)})"

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None,
        cwd: str | os.PathLike | None,
        stdout: Output,
        stderr: Output,
        stdin: Any = subprocess.DEVNULL,
    ) -> BaseWorker:
        """Start ``argv`` as a worker in this server's envelope: forked when it is ``python -m MODULE``
        (:func:`served_module`), else through ``process.spawn`` (same arguments as there)."""
        module = served_module(argv)
        if module is None:
            return spawn(
                argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr, envelope=self.envelope,
                run_id=self.run_id, stdin=stdin,
            )  # fmt: skip
        full_env = worker_env(env, self.envelope, self.run_id)
        request = json.dumps(
            {"module": module, "args": list(argv[3:]), "env": full_env, "cwd": os.fspath(cwd or os.getcwd())}
        ).encode()
        fds, opened = [], []
        try:
            for target, default in ((stdin, 0), (stdout, 1), (stderr, 2)):
                fd, mine = _output_fd(target, default)
                fds.append(fd)
                if mine:
                    opened.append(fd)
            with self._lock:
                if self.closed:
                    raise RuntimeError("fork server closed")
                self._await_ready(60.0)
                try:
                    socket.send_fds(self._sock, [request], fds)
                    msg, got, _, _ = socket.recv_fds(self._sock, _MAX_MSG, 2)
                except OSError as exc:
                    raise SpawnError(f"{self!r} is gone ({exc}): {self._why_gone()}") from exc
        finally:
            for fd in opened:
                os.close(fd)
        if not msg:
            for fd in got:
                os.close(fd)
            raise SpawnError(f"{self!r} closed its socket: {self._why_gone()}")
        reply = json.loads(msg)
        if "error" in reply:
            for fd in got:
                os.close(fd)
            raise SpawnError(f"fork server cannot start {module}: {reply['error']}")
        pidfd, exit_fd = got
        worker = ForkedWorker(reply["pid"], pidfd, socket.socket(fileno=exit_fd), self.envelope)
        if self.envelope is not None:
            self.envelope.track(worker.pid)
        return worker

    def _why_gone(self) -> str:
        code = self.proc.poll()
        return f"server exit code {code}" if code is not None else "server still running"

    def close(self, timeout: float = KILL_REAP_TIMEOUT_S) -> int:
        """End the server (its remaining workers die with it) and reap it; returns its exit code."""
        with self._lock:
            if not self.closed:
                self.closed = True
                self._sock.close()
        try:
            return self.proc.reap(timeout)
        except subprocess.TimeoutExpired:
            return self.proc.kill()
        finally:
            self.proc.close()


# ---------------------------------------------------------------------------------------------------------
# Server


class _Child:
    """A child of the server: pooled (``chan`` set: it waits for a request) or running a worker."""

    __slots__ = ("pid", "pidfd", "exit_sock", "client_exit", "chan", "generation")

    def __init__(self, pid: int, pidfd: int, exit_sock, client_exit, chan, generation: int) -> None:
        self.pid, self.pidfd, self.exit_sock, self.client_exit = pid, pidfd, exit_sock, client_exit
        self.chan, self.generation = chan, generation


class _Pooled:
    """What ``serve`` returns in a pooled child: its request channel and what it needs to run one."""

    def __init__(self, chan: socket.socket, server_pid: int, codes: dict) -> None:
        self.chan, self.server_pid, self.codes = chan, server_pid, codes
        self.joined = False  # the envelope, while waiting in the pool


class _Server:
    def __init__(self, fd: int, join: list[str], pool_size: int) -> None:
        self.sock = socket.socket(fileno=fd)
        self.join = [p.encode() for p in join]
        self.codes: dict[str, tuple[types.CodeType, Any]] = {}
        self.children: dict[int, _Child] = {}  # by pidfd
        self.pool: list[_Child] = []
        self.pool_size = pool_size
        self.generation = 0  # modules loaded so far: a pooled child has the code of those before its fork
        self.sel: selectors.BaseSelector | None = None

    def load(self, module: str):
        """(code, spec) of ``module``: imported here once (its imports then cost a child nothing)."""
        got = self.codes.get(module)
        if got is not None:
            return got
        before = threading.active_count()
        importlib.import_module(module)
        if threading.active_count() != before:
            raise RuntimeError(f"importing {module} started a thread: it cannot be forked safely")
        spec = importlib.util.find_spec(module)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise RuntimeError(f"no code for module {module}")
        if spec.submodule_search_locations is not None:  # a package: -m runs its __main__
            return self.load(module + ".__main__")
        code = spec.loader.get_code(module)
        if code is None:
            raise RuntimeError(f"no code for module {module}")
        gc.freeze()  # what the server holds stays out of every child's collections (no copy-on-write)
        self.codes[module] = (code, spec)
        self.generation += 1
        return code, spec

    def serve(self) -> _Pooled | None:
        """Serves until the client hangs up (None) or, in a forked child, returns what that child needs.
        Everything the server owns is closed on the way out, in the child too."""
        self.sel = sel = selectors.DefaultSelector()
        sel.register(self.sock, selectors.EVENT_READ, None)
        try:
            got = self._fill()
            if got is not None:
                return got
            refill_at = None
            while True:
                timeout = None if refill_at is None else max(0.0, refill_at - time.monotonic())
                events = sel.select(timeout)
                for key, _ in events:
                    child = key.data
                    if child is not None:
                        self._reap(child)
                        continue
                    msg, fds, _, _ = socket.recv_fds(self.sock, _MAX_MSG, 3)
                    if not msg:
                        return None
                    got = self._request(json.loads(msg), fds)
                    if got is not None:
                        return got
                    # The replacement is forked once requests pause: the ranks of a job start together,
                    # and a fork (~2-3 ms of CPU here) would compete with the other nodes' starts.
                    refill_at = time.monotonic() + REFILL_DELAY_S
                if refill_at is not None and not events and time.monotonic() >= refill_at:
                    refill_at = None
                    got = self._fill()
                    if got is not None:
                        return got
        finally:
            for child in self.children.values():
                os.close(child.pidfd)
                for s in (child.exit_sock, child.client_exit, child.chan):
                    if s is not None:
                        s.close()
            sel.close()
            self.sock.close()

    def _fill(self) -> _Pooled | None:
        while len(self.pool) < self.pool_size:
            got = self._fork_pooled()
            if got is None:
                return None  # fork failed: the next request forks for itself, or says why
            if isinstance(got, _Pooled):
                return got
        return None

    def _fork_pooled(self) -> _Child | _Pooled | None:
        """A child that does the generic part of a worker's start now, then waits for its request."""
        chan, chan_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # the exit report
        me = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as exc:
            for s in (chan, chan_child, ours, theirs):
                s.close()
            print(f"fork server: fork failed: {exc}", file=sys.stderr, flush=True)
            return None
        if pid == 0:
            for s in (chan, ours, theirs):
                s.close()
            return _Pooled(chan_child, me, self.codes)
        chan_child.close()
        pidfd = os.pidfd_open(pid)
        child = _Child(pid, pidfd, ours, theirs, chan, self.generation)
        self.children[pidfd] = child
        self.sel.register(pidfd, selectors.EVENT_READ, child)
        self.pool.append(child)
        return child

    def _retire(self, child: _Child) -> None:
        """A pooled child that will get no request: its channel's end makes it exit (reaped as usual)."""
        self.pool.remove(child)
        child.chan.close()
        child.chan = None

    def _request(self, req: dict, fds: list[int]) -> _Pooled | None:
        try:
            self.load(req["module"])
            for stale in [c for c in self.pool if c.generation != self.generation]:
                self._retire(stale)  # forked before this module was loaded: it lacks its code
            if not self.pool:
                got = self._fork_pooled()
                if isinstance(got, _Pooled):
                    return got  # in the new child: the parent hands the request over (fds: finally)
                if got is None:
                    raise OSError("fork failed (see the server's log)")
            child = self.pool.pop(0)
            socket.send_fds(child.chan, [json.dumps(req).encode()], fds)
        except BaseException as exc:  # noqa: BLE001 - told to the client, the server goes on
            self.sock.send(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
            return None
        finally:
            for fd in fds:
                os.close(fd)
        child.chan.close()
        child.chan = None
        try:
            msg = json.dumps({"pid": child.pid}).encode()
            socket.send_fds(self.sock, [msg], [child.pidfd, child.client_exit.fileno()])
        finally:
            child.client_exit.close()
            child.client_exit = None
        return None

    def _reap(self, child: _Child) -> None:
        self.sel.unregister(child.pidfd)
        del self.children[child.pidfd]
        if child in self.pool:
            self.pool.remove(child)  # died waiting (its setup failed: its reason is in the server's log)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        try:
            cpu_ns = time.clock_gettime_ns(_pid_cpu_clock(child.pid))  # the zombie still has its clock
        except OSError:
            cpu_ns = -1
        _, status = os.waitpid(child.pid, 0)
        try:
            child.exit_sock.send(_EXIT.pack(os.waitstatus_to_exitcode(status), cpu_ns))
        except OSError:
            pass  # the client closed its end, or never had it: nobody waits for this exit
        for s in (child.exit_sock, child.client_exit, child.chan):
            if s is not None:
                s.close()
        os.close(child.pidfd)


_libc = ctypes.CDLL(None, use_errno=True)


def _pooled(p: _Pooled, join: list[bytes]) -> tuple[dict, list[int]]:
    """In a pooled child: the generic part of a worker's start (outside the envelope, before any
    request), then the envelope's join, then wait for the request; returns it with its standard stream
    descriptors."""
    step = "prctl(PR_SET_PDEATHSIG, SIGKILL)"
    try:
        if _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl failed")
        if os.getppid() != p.server_pid:
            os._exit(127)  # the server died before the prctl: nobody would reap or kill us
        step = "setsid"
        # A session of its own: what the worker forks inherits its session id, so the agent finds its
        # leftovers by it (their /proc environ is the server's, not the worker's TB_JOB).
        os.setsid()
        step = "sched_setscheduler(SCHED_OTHER), nice 0"
        if os.sched_getscheduler(0) != os.SCHED_OTHER:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
        os.setpriority(os.PRIO_PROCESS, 0, 0)
        step = "sched_setattr (slice)"
        # A short slice, so that a worker woken by a message preempts a busy process of the host's at
        # once (priority.set_slice); the agent's run_info priority says whether this kernel grants it.
        set_slice(SLICE_US)
        step = "signals"
        for sig in (signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        atexit._clear()  # the server's exit handlers are not the worker's
        try:
            join_files_now(join)
            p.joined = True
        except OSError:
            pass  # joined with the request, whose worker then gets the step's one line
        step = "waiting for a request"
        msg, fds, _, _ = socket.recv_fds(p.chan, _MAX_MSG, 3)
    except BaseException as exc:  # noqa: BLE001 - one line in the server's log, then exit 127
        os.write(2, f"fork server: pooled child failed at {step}: {exc!r}\n".encode(errors="replace"))
        os._exit(127)
    if not msg:
        os._exit(0)  # the server retired this child, or is closing
    return json.loads(msg), fds


def _become_worker(p: _Pooled, req: dict, fds: list[int], join: list[bytes]) -> None:
    """In the child, with its request: the rest of the module docstring's guarantees, then MODULE as
    __main__. Every step before the join is the child's own; nothing of the worker runs before it."""
    step = "standard streams"
    try:
        for target, fd in zip((0, 1, 2), fds, strict=True):
            if fd != target:
                os.dup2(fd, target)
        for fd in set(fds) - {0, 1, 2}:
            os.close(fd)
        step = "envelope join"
        if not p.joined:
            join_files_now(join)
        step = "close descriptors"
        p.chan.close()
        os.closerange(3, 1 << 20)
        step = "working directory"
        os.chdir(req["cwd"])
        step = "environment"
        # Only the differences: most of the environment is the server's own (putenv costs ~5 us each).
        env = req["env"]
        for k in [k for k in os.environ if k not in env]:
            del os.environ[k]
        for k, v in env.items():
            if os.environ.get(k) != v:
                os.environ[k] = v
        code, spec = p.codes[req["module"]]
    except BaseException as exc:  # noqa: BLE001 - one line on the worker's stderr, then exit 127
        os.write(2, f"fork server: child setup failed at {step}: {exc!r}\n".encode(errors="replace"))
        os._exit(127)
    # sys.std* now write to the new descriptors; buffered as `python` would buffer them there.
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdout.reconfigure(write_through=unbuffered)
    sys.stderr.reconfigure(write_through=unbuffered)
    # As `python -m MODULE ARGS`: the module's code as __main__, argv[0] its file, sys.path[0] the cwd.
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=spec.origin, __cached__=spec.cached, __loader__=spec.loader, __spec__=spec,
        __package__=spec.parent, __builtins__=__builtins__,
    )  # fmt: skip
    sys.modules["__main__"] = main
    sys.argv = [spec.origin, *req["args"]]
    sys.path[0] = os.path.abspath(req["cwd"])
    exec(code, main.__dict__)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m testbed.emulator.mechanism.forkserver", description="fork server"
    )
    ap.add_argument("--fd", type=int, required=True, help="the client's SOCK_SEQPACKET socket")
    ap.add_argument(
        "--preload", default="", help="modules to import at start (module[:function]), comma-separated"
    )
    ap.add_argument("--join", default="", help="files to write 0 to, to join the envelope, comma-separated")
    ap.add_argument("--pool", type=int, default=POOL_SIZE, help="children kept forked, waiting for a request")
    args = ap.parse_args(argv)
    # Ctrl-C goes to the driver, which tears the run down; the server ends when its client hangs up.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, SERVER_NICE)
    except OSError:
        pass  # answers a little later, nothing worse
    server = _Server(args.fd, [p for p in args.join.split(",") if p], max(1, args.pool))
    try:
        for module in filter(None, args.preload.split(",")):
            module, _, warm = module.partition(":")
            server.load(module)
            if warm:
                getattr(sys.modules[module], warm)()
                gc.freeze()
    except BaseException as exc:  # noqa: BLE001 - told to the client, which fails loudly
        server.sock.send(json.dumps({"error": f"{module}: {type(exc).__name__}: {exc}"}).encode())
    else:
        server.sock.send(b'{"ready": true}')
    pooled = server.serve()
    if pooled is None:
        return 0
    # In a forked child from here on. It ends as `python -m` would end (exit handlers, non-daemon
    # threads, flushed streams) but skips the interpreter's teardown, which would touch, and so copy,
    # every page of the server's objects (measured: ~7 ms of the worker's CPU).
    req, fds = _pooled(pooled, server.join)
    code = 0
    try:
        _become_worker(pooled, req, fds, server.join)
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as python does: the exit status says SIGINT
        code = 130
    except BaseException:  # noqa: BLE001 - printed, exit 1, as python does with an uncaught exception
        traceback.print_exc()
        code = 1
    _finish()
    os._exit(code)


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _finish() -> None:
    for fn in (getattr(threading, "_shutdown", None), getattr(atexit, "_run_exitfuncs", None)):
        if fn is not None:
            try:
                fn()
            except BaseException:  # noqa: BLE001 - as at interpreter exit: reported, not fatal
                traceback.print_exc()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


if __name__ == "__main__":
    sys.exit(main())
