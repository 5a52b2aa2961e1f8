"""Traces of MPI programs for the simulator (docs/architecture.md, "MPI programs"), as SimGrid's SMPI
replays traces: the program is run once on real processes, and each rank records the CPU it spent
between MPI calls and the calls themselves; the simulator then replays them as its operations.

Recording runs the program with ``size`` ranks on this host, outside any node (ranks as plain child
processes, MPICH bootstrapped by the testbed's PMI server, apps/mpi_pmi.py), each rank's COMM_WORLD
wrapped as in a real run (apps/mpi_wrap.py) but recording instead of mirroring:

* ``["c", cpu_s]``: CPU seconds of the rank's main thread since its previous call returned (its own
  clock: the host's other load does not inflate it), at rate 1.0 (a host core, as a work unit is);
  the first one covers the program's imports and MPI_Init's CPU (not the interpreter's start: a real
  run's ranks are forked with it done);
* ``["s", dest, nbytes, tag]``: a send (its payload's bytes, pickled size for the lowercase methods);
* ``["r", source, tag]``: a receive, with the source and tag it actually matched (its status), so
  ANY_SOURCE / ANY_TAG replay as they ran;
* ``["k", op, nbytes]``: a collective of COMM_WORLD, with the bytes of the data the rank handed it
  (its send buffer; the receive buffer of an IN_PLACE call or a Bcast; an object's pickled size).

A trace is cached by the program's content, its arguments and the number of ranks (``trace_path``), in
``$TESTBED_MPI_TRACES`` or ``~/.cache/testbed/mpi-traces``; the first simulation of a program records it
and says so on stderr. It is stamped with the host's speed (apps/speed.py ``stamp``: the mean of a
measurement just before the recording and one just after), so that it can be replayed for another host
or another time (``cluster.host_speed_s``).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from testbed.apps.environ import MPICH_NO_LOCAL, TRACE_PARENT
from testbed.apps.mpi_wrap import ComputeClock
from testbed.apps.speed import around, speed_s, stamp, stamp_of

#: Numbers this process's recordings (their PMI key-value spaces must differ: apps/mpi_pmi.py).
_RECORDINGS = itertools.count()
#: Real seconds a recording may take before it is given up (its processes killed).
RECORD_TIMEOUT_S = 600.0


#: The environment variable naming the folder traces are cached in (else ~/.cache/testbed/mpi-traces).
TRACES_ENV = "TESTBED_MPI_TRACES"


def cache_dir() -> Path:
    env = os.environ.get(TRACES_ENV)
    return Path(env) if env else Path.home() / ".cache" / "testbed" / "mpi-traces"


#: The recorder's version, part of a trace's key: a trace recorded by an older recorder is recorded again
#: (2: a Sendrecv's CPU before it counted once, not twice; 3: a collective's bytes).
RECORDER_VERSION = 3


def trace_key(program: str, args: tuple[str, ...], size: int) -> str:
    h = hashlib.sha256()
    h.update(Path(program).read_bytes())
    h.update(json.dumps([list(args), size, RECORDER_VERSION]).encode())
    return h.hexdigest()[:24]


def trace_path(program: str, args: tuple[str, ...], size: int) -> Path:
    return cache_dir() / f"{Path(program).stem}-{size}-{trace_key(program, args, size)}.json"


def load_or_record(program: str, args: tuple[str, ...], size: int) -> list[list]:
    """The per-rank operations of ``program`` run with ``args`` on ``size`` ranks: from the cache, or
    recorded now (saying so on stderr). Raises RuntimeError with one line if the recording fails."""
    path = trace_path(program, args, size)
    if path.is_file():
        return _cached(path)["ranks"]
    print(
        f"mpi: recording {' '.join([Path(program).name, *args])} on {size} real processes for the simulator "
        f"(once; cached in {path})",
        file=sys.stderr,
        flush=True,
    )
    before = speed_s()
    t0 = time.monotonic()
    ranks = record(program, args, size)
    recorded = time.monotonic() - t0
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    doc = {"program": str(program), "args": list(args), "size": size, "recorded_s": recorded}
    doc.update(stamp(around(before, speed_s())))
    tmp.write_text(json.dumps({**doc, "ranks": ranks}))
    tmp.replace(path)
    return ranks


def recorded_speed(program: str, args: tuple[str, ...], size: int) -> float | None:
    """The host's speed stamped on the cached trace (:func:`load_or_record`), or None: not stamped (a
    trace recorded before stamps), or not recorded."""
    path = trace_path(program, args, size)
    return stamp_of(_cached(path)) if path.is_file() else None


def _cached(path: Path) -> dict:
    """A cached trace's document, parsed once for as long as its file stays as it is: a replay asks for
    the trace and its stamp once per rank (each rank parsed the whole file before)."""
    st = path.stat()
    return _parse(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)  # a few programs' traces held, not every one a sweep replays
def _parse(path: str, mtime_ns: int, nbytes: int) -> dict:
    return json.loads(Path(path).read_text())


def compute_s(ops: list[list]) -> float:
    """A rank's compute in its trace: the CPU of its ``["c", cpu_s]`` operations (what a real rank reports
    as ``compute_s``, apps/mpi_wrap.py ComputeClock)."""
    return sum(op[1] for op in ops if op[0] == "c")


def record(program: str, args: tuple[str, ...], size: int, timeout: float = RECORD_TIMEOUT_S) -> list[list]:
    from testbed.apps.mpi_pmi import PmiFailure, PmiServer

    server = PmiServer(size, "127.0.0.1", timeout, kvsname=f"tb-record-{os.getpid()}-{next(_RECORDINGS)}")
    failure: list[str] = []

    def serve():
        try:
            server.serve()
        except PmiFailure as exc:
            failure.append(str(exc))

    th = threading.Thread(target=serve, name="mpi-trace-pmi", daemon=True)
    th.start()
    procs = []
    with tempfile.TemporaryDirectory(prefix="tb-mpi-trace-") as tmp:
        try:
            for r in range(size):
                cmd = [sys.executable, "-m", "testbed.apps.mpi_trace", server.address, str(r), str(size),
                       f"{tmp}/rank{r}.json", str(program), *args]  # fmt: skip
                err = open(f"{tmp}/rank{r}.err", "w")  # noqa: SIM115 - closed with the process below
                # As a real run's ranks (testbed/emulator/agent.py): one BLAS thread. With the host's
                # cores, OpenBLAS's threads split NAS CG's dot products and its main thread spun waiting
                # for them, which its CPU clock counted: CG.A on 1 rank recorded 1.8 to 4.4 s a run.
                env = {
                    **os.environ,
                    TRACE_PARENT: str(os.getpid()),
                    MPICH_NO_LOCAL: "1",
                    "OMP_NUM_THREADS": "1",
                }
                if size > (os.cpu_count() or 1):
                    # More ranks than cores: MPICH's busy-polling rank would hold a core its peer needs
                    # for the message it waits for (IS class A on 8 ranks, 2 cores: minutes instead of
                    # seconds). Yielding changes no compute the trace records: that is between calls.
                    env.setdefault("MPIR_CVAR_CH4_PROGRESS_THROTTLE", "1")
                p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp, env=env)
                procs.append((p, err))
            deadline = time.monotonic() + timeout
            left = set(range(size))
            # The first rank that fails ends the recording (the others may wait for it for ever).
            grace = None
            while left:
                if failure:
                    # The process manager saw a rank go: give that rank a moment to report its own reason.
                    grace = grace or time.monotonic() + 1.0
                    if time.monotonic() > grace:
                        raise RuntimeError(f"recording {Path(program).name} for the simulator: {failure[0]}")
                for r in sorted(left):
                    code = procs[r][0].poll()
                    if code is None:
                        continue
                    left.discard(r)
                    if code != 0:
                        lines = Path(f"{tmp}/rank{r}.err").read_text(errors="replace").strip().splitlines()
                        why = lines[-1] if lines else f"exit code {code}"
                        raise RuntimeError(
                            f"recording {Path(program).name} for the simulator: rank {r}: {why}"
                        )
                if time.monotonic() > deadline:
                    raise subprocess.TimeoutExpired("recording", timeout)
                time.sleep(0.02)
            return [json.loads(Path(f"{tmp}/rank{r}.json").read_text()) for r in range(size)]
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"recording {Path(program).name} for the simulator took more than {timeout:g} s"
            ) from None
        finally:
            for p, err in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                err.close()
            server.close()


class Recorder:
    """Stands for apps/mpi_wrap.py's mirror while recording: notes each call and the CPU before it."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.ops: list[list] = []
        self.clock = ComputeClock()
        self.wants_bytes = True  # a collective's data size is part of the trace

    def _compute(self) -> None:
        spent = self.clock.lap()
        if spent > 0:
            self.ops.append(["c", spent])

    def done(self) -> None:
        self.clock.resume()

    def flush(self) -> None:
        pass

    def send(self, dest: int, tag: int, nbytes: int, sent_at: float) -> None:
        self._compute()
        if 0 <= dest < self.n:
            self.ops.append(["s", dest, nbytes, max(0, tag)])

    def recv(self, source: int, tag: int) -> tuple[int, int]:
        self._compute()
        return source, tag

    def matched(self, status) -> None:
        # The source and tag the receive took, from its status: wildcards replay as they ran.
        self.ops.append(["r", status.Get_source(), status.Get_tag()])

    def collective(self, op: str, nbytes: int) -> None:
        self._compute()
        self.ops.append(["k", op, nbytes])

    def collective_left(self, op: str) -> None:
        pass  # MPI's CPU on the collective's data is left out of the trace and charged by the replay


def _rank_main(argv: list[str]) -> int:
    """One recording rank: ``ADDR RANK SIZE OUT PROGRAM ARGS...``."""
    import runpy
    import socket

    from testbed.apps import mpi_wrap

    addr, rank, size, out, program, *args = argv
    # Dies with the recording process (the driver): nothing of a recording outlives a killed run.
    import ctypes
    import signal

    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != int(os.environ.get(TRACE_PARENT, os.getppid())):
        return 1  # the parent died before the prctl
    host, _, port = addr.rpartition(":")
    sock = socket.create_connection((host, int(port)))
    sock.sendall(f"cmd=tb_hello rank={rank}\n".encode())
    os.environ.update(PMI_FD=str(sock.fileno()), PMI_RANK=rank, PMI_SIZE=size)
    rec = Recorder(int(size))

    def ready():
        sock.sendall(b"cmd=tb_ready\n")
        if not sock.recv(4096).startswith(b"cmd=tb_go"):
            raise RuntimeError("the recording's process manager gave up before MPI_Init")

    def on_init(MPI):
        rec._compute()  # the program's imports and MPI_Init's CPU, the rank's first compute
        rec.done()

    mpi_wrap.install(rec, int(size), before_init=ready, on_init=on_init, mirror=rec)
    sys.argv = [program, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(program)))
    # From here on as in a real run, whose ranks start forked with the interpreter up (its start-up is
    # not the job's): the program's own imports and MPI_Init are its first compute.
    rec.done()
    try:
        runpy.run_path(program, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            print(f"the program exited with {exc.code!r}", file=sys.stderr, flush=True)
            os._exit(1)
    except BaseException as exc:  # noqa: BLE001 - its one line, then out without MPI_Finalize
        print(f"{type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        os._exit(1)
    rec._compute()
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and not MPI.Is_finalized():
        MPI.Finalize()
    sock.sendall(b"cmd=tb_finalized\n")
    Path(out).write_text(json.dumps(rec.ops))
    return 0


if __name__ == "__main__":
    sys.exit(_rank_main(sys.argv[1:]))
