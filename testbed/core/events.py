"""The event log: every state change, with emulated and real timestamps (docs/architecture.md, "The event log
is the truth").

Each component (coordinator, each node) appends JSON lines to its own file under ``<run>/events/`` and
flushes as it goes, so what was written before a crash stays readable; the runner merges them into
``events.jsonl`` ordered by emulated time. Results are computed from the merged log only.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

# Job lifecycle (source: coordinator)
JOB_SUBMITTED = "job_submitted"  # job, size, job_class, realtime (true for a real-time job, else absent)
# job (the policy did not reject it on arrival; or, under a policy that admits_at_start, it first started)
JOB_ADMITTED = "job_admitted"
JOB_REJECTED = "job_rejected"  # job, reason
JOB_STARTED = "job_started"  # job, nodes
JOB_FINISHED = "job_finished"  # job
JOB_FAILED = "job_failed"  # job, reason
JOB_KILLED = "job_killed"  # job, reason (scenario ended first, or the policy killed it)
JOB_REQUEUED = "job_requeued"  # job, reason (back in the queue: its node went down, or the policy said so)
SLOT_PLANNED = "slot_planned"  # slot, at, rows (matrix rows sharing the quantum)
# Node level (source: nodeN)
PROC_STARTED = "proc_started"  # job, rank, node, pid
PROC_READY = "proc_ready"  # job, rank, node: the worker said HELLO to its NIC (start-up done)
PROC_EXITED = "proc_exited"  # job, rank, node, code, cpu_s, reason
# node, slot, at (planned, emulated), effect (emulated), late_ms, jobs (the jobs the slot lets the node run:
# the report's Gantt chart draws its stops and continues from them)
SLOT_SWITCH = "slot_switch"
PROC_CPU = "proc_cpu"  # node, job, rank, cpu_s (cumulative)
QUANTUM_CPU = "quantum_cpu"  # node, samples: [[job, rank, utilisation, interval], ...] (paired gang)
PROGRESS = "progress"  # node, job, rank, unit ("barriers"), value (cumulative)
RATE_PROBE = "rate_probe"  # node, cpu_rate (its own), configured, delivered (real cores), error
NODE_DOWN = "node_down"  # node, reason
# A local policy's CoopEvent (schedulers/base.py) sent to its job's other nodes (node, to: [nodes], event:
# its class's name, fields: {job_id, ...}), and one received (node, from_node, event, fields)
COOP_SENT = "coop_sent"
COOP_RECEIVED = "coop_received"
NODE_UP = "node_up"  # node
RUN_INFO = "run_info"  # free-form facts about the run (tdf, envelope, priority obtained)
RUN_ERROR = "run_error"  # error (one line), traceback: an exception that ended the run (policy, agent, ...)

#: The reason a job is killed when the scenario's ``duration_s`` ends the run: the one kill that was planned.
DURATION_REACHED = "scenario duration reached"
#: Why a node went down when the scenario's ``faults.script`` took it down (its jobs' failures were planned).
SCRIPTED_FAULT = "scripted fault"
#: The reason of a job killed by its policy starts with this (a planned end, like a rejection).
POLICY_KILL = "killed by the policy"


def describe_error(exc: BaseException) -> str:
    """One line for an exception: its type, its message, and where it was raised (the innermost frame),
    e.g. ``ZeroDivisionError: division by zero (schedulers/gang.py:120 in submit)``."""

    msg = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if frames:
        f = frames[-1]
        parts = Path(f.filename).parts
        text += f" ({'/'.join(parts[-2:])}:{f.lineno} in {f.name})"
    return text


class EventWriter:
    """Writes events as JSON lines to a file it creates afresh (an earlier run's file is never appended
    to); each line is flushed so a crash loses at most the line in flight."""

    def __init__(self, path: str | os.PathLike | None, source: str, clock=None) -> None:
        self.source = source
        self.clock = clock
        self._fh: IO[str] | None = None
        self.buffer: list[dict] = []  # kept when path is None (simulator, tests)
        self._subscribers: list[Callable[[dict], Any]] = []
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            # Unbuffered: each event is on disk once emitted, so a crash loses at most the line in flight.
            self._fh = open(path, "wb", buffering=0)  # noqa: SIM115 - long-lived

    def emit(self, kind: str, t: float | None = None, **fields: Any) -> dict:
        if t is None:
            t = self.clock.now() if self.clock is not None else 0.0
        ev = {"t": round(t, 9), "wall": round(time.time(), 6), "src": self.source, "kind": kind, **fields}
        if self._fh is not None:
            self._fh.write(_line(ev))
        else:
            self.buffer.append(ev)
        for fn in self._subscribers:
            fn(ev)
        return ev

    def subscribe(self, fn: Callable[[dict], Any]) -> None:
        """``fn(record)`` for every event emitted from now on, after it is written
        (testbed/core/observe.py)."""
        self._subscribers.append(fn)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class JsonlSink:
    """Writes records as JSON lines as they come, without holding them: a simulation of millions of
    events keeps its log on disk, and an interrupted one keeps what it had logged."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._fh: IO[bytes] | None = open(path, "wb", buffering=1 << 20)  # noqa: SIM115

    def __call__(self, record: dict) -> None:
        self._fh.write(_line(record))

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class EventLogError(ValueError):
    """An event log holds a line that is not an event, other than a torn last line. One line, naming the
    file and the line: results are computed from the log only, so a damaged log is never read past."""


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Reads events. Only a torn last line (a crash mid-write: no newline after it) is passed over; any
    other line that is not a JSON object raises :class:`EventLogError`."""
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            torn = not line.endswith(b"\n")
            line = line.strip()
            if not line:
                continue
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                if torn:
                    return
                event = None
            if not isinstance(event, dict) or "kind" not in event or "t" not in event:
                raise EventLogError(
                    f"{path}: line {n} is not an event ({line[:60]!r}...); the log is damaged, so no "
                    "results are computed from it"
                )
            yield event


def merge(parts: Iterable[str | os.PathLike], out: str | os.PathLike) -> list[dict]:
    events: list[dict] = []
    for p in parts:
        events.extend(read_jsonl(p))
    events.sort(key=lambda e: (e["t"], e.get("wall", 0.0)))
    write_all(events, out)
    return events


def write_all(events: Iterable[dict], out: str | os.PathLike) -> None:
    """Writes the log whole or not at all: a kill mid-write leaves the previous file, not half of one."""
    tmp = Path(f"{out}.tmp")
    with open(tmp, "wb") as fh:
        for ev in events:
            fh.write(_line(ev))
    os.replace(tmp, out)


def _line(record: dict) -> bytes:
    """One event as a JSON line. orjson: a long simulation logs millions of events, and its encoding and
    decoding cost a quarter of the standard library's (benchmarks/sim_scale.py); same JSON text."""
    return orjson.dumps(record, default=_plain, option=orjson.OPT_APPEND_NEWLINE)


def _plain(value: Any) -> Any:
    """A numpy scalar (a workload or a metric may hand one over) as the Python number it holds; anything
    else is a bug in the caller, and orjson says which type."""
    item = getattr(value, "item", None)
    if item is None:
        raise TypeError(f"an event field of type {type(value).__name__} is not JSON")
    return item()
