"""The generic worker: ``python -m testbed.apps.worker`` runs one process of a job, of any program kind.

The node agent starts it with the job's typed config as JSON in ``TB_APP`` (apps/base.py,
:meth:`ProgramKind.launch`) and the job's and the node's settings in the environment (apps/environ.py
names, builds and reads them all: the job's id, rank and NICs, how it waits, the memory each process
keeps resident; the clock, the node's NIC and its folder for real I/O files; when the policy started the
job). It rebuilds the config with the kind's own model, allocates the memory, and calls the kind's
``run``.

Exit 0 on success; otherwise one line on stderr saying why (the agent records it as the job's failure
reason) and a non-zero exit: :data:`EXIT_PEER_GONE` when this rank failed only because a peer of its job
went away first (the coordinator then looks for that cause before it names one), 1 for any other reason.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping

from testbed.apps.environ import APP, IO_DIR, JOB, RANK, JobEnv, NodeEnv, start_s

#: The exit code of a rank that failed because its job had already failed elsewhere (a peer went away).
EXIT_PEER_GONE = 3

#: Each iteration (or whatever a kind calls a step) rewrites one page in this many, so memory stays resident.
TOUCH_EVERY = 16
PAGE = 4096


def allocate(memory_mb: float) -> bytearray | None:
    """``memory_mb`` MiB, every page written once (resident, not just reserved)."""
    n = int(memory_mb * 1024 * 1024)
    if n <= 0:
        return None
    mem = bytearray(n)  # zero pages are mapped lazily: only the writes below make them resident
    mem[::PAGE] = b"\x01" * len(range(0, n, PAGE))
    return mem


class WorkerError(RuntimeError):
    """The worker cannot go on; the message is the one-line reason the job fails with."""


class WorkerContext:
    """What a kind's ``run`` gets: its place in the job, the clock, the node's I/O folder, its resident
    memory, and (after :meth:`connect`) tbcomm."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        try:
            job = JobEnv.from_env(env)
        except KeyError as exc:
            raise WorkerError(f"environment variable {exc.args[0]} is not set (the agent sets it)") from None
        node = NodeEnv.from_env(env)
        self.job, self.rank, self.size = job.job, job.rank, job.size
        #: The run's clock (emulated seconds: ``clock.now()``).
        self.clock = node.clock
        self.tdf = node.clock.tdf
        self.io_dir = node.io_dir
        #: When the policy started the job (emulated s), where the backend says (the Ray backend does).
        self.start_s = start_s(env)
        self.memory = allocate(job.memory_mb)
        self.comm = None

    def connect(self):
        """Joins the job's messaging; returns at the node's GO, so everything before is start-up."""
        from testbed.apps.tbcomm import Comm

        self.comm = Comm.from_env(self.env)
        return self.comm

    def touch(self, i: int) -> None:
        """Rewrites one page in TOUCH_EVERY of the resident memory (offset rotating with ``i``): cheap,
        and it keeps the pages in use."""
        mem = self.memory
        if mem is None:
            return
        start = (i % TOUCH_EVERY) * PAGE
        step = PAGE * TOUCH_EVERY
        count = len(range(start, len(mem), step))
        if count:
            mem[start::step] = bytes([i & 0xFF | 1]) * count

    def io_path(self, name: str) -> str:
        if not self.io_dir:
            raise WorkerError(f"{IO_DIR} is not set, but this program writes real files there")
        if not os.path.isabs(self.io_dir):
            raise WorkerError(f"{IO_DIR} must be absolute, got {self.io_dir!r}")
        return os.path.join(self.io_dir, name)

    def progress(self, unit: str, value: float) -> None:
        """Reports the running total of ``unit`` (a counter the kind declares in its ``reports``)."""
        self.comm.progress(unit, value)


def main(env: Mapping[str, str] | None = None) -> int:
    from pydantic import ValidationError
    from testbed.apps import registry
    from testbed.apps.tbcomm import CommError, PeerGone

    env = os.environ if env is None else env
    who = f"job {env.get(JOB, '?')} rank {env.get(RANK, '?')}"
    ctx = None
    try:
        doc = json.loads(env[APP])
        kind = registry.get(doc.get("kind", registry.DEFAULT))
        cfg = kind.Config.model_validate(doc)
        who = f"{kind.name}: {who}"
        ctx = WorkerContext(env)
        try:
            kind.run(cfg, ctx)
        except BaseException:
            if ctx.comm is not None:
                ctx.comm.abort()
            raise
        if ctx.comm is not None:
            ctx.comm.close()
    except KeyError as exc:
        print(f"{who}: environment variable {exc} is not set (the node agent sets it)", file=sys.stderr)
        return 1
    except PeerGone as exc:
        print(f"{who}: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return EXIT_PEER_GONE
    except (WorkerError, CommError, OSError, ValidationError, registry.UnknownKind) as exc:
        print(f"{who}: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        print(f"{who}: interrupted", file=sys.stderr, flush=True)
        return 130
    except Exception as exc:  # any other failure still gets its one-line reason
        print(f"{who}: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
