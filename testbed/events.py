"""The event log: every state change, with emulated and real timestamps (DESIGN.md, decision 6).

Each component (coordinator, each node) appends JSON lines to its own file under ``<run>/events/`` and
flushes as it goes, so what was written before a crash stays readable; the runner merges them into
``events.jsonl`` ordered by emulated time. Results are computed from the merged log only.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

# Job lifecycle (source: coordinator)
JOB_SUBMITTED = "job_submitted"  # job, size, job_class
JOB_REJECTED = "job_rejected"  # job, reason
JOB_STARTED = "job_started"  # job, nodes
JOB_FINISHED = "job_finished"  # job
JOB_FAILED = "job_failed"  # job, reason
JOB_KILLED = "job_killed"  # job, reason (scenario ended first)
SLOT_PLANNED = "slot_planned"  # slot, at, rows (matrix rows sharing the quantum)
# Node level (source: nodeN)
PROC_STARTED = "proc_started"  # job, rank, node, pid
PROC_READY = "proc_ready"  # job, rank, node: the worker said HELLO to its NIC (start-up done)
PROC_EXITED = "proc_exited"  # job, rank, node, code, cpu_s, reason
SLOT_SWITCH = "slot_switch"  # node, slot, at (planned, emulated), effect (emulated), late_ms
PROC_CPU = "proc_cpu"  # node, job, rank, cpu_s (cumulative)
QUANTUM_CPU = "quantum_cpu"  # node, samples: [[job, rank, utilisation, interval], ...] (paired gang)
PROGRESS = "progress"  # node, job, rank, unit ("barriers"), value (cumulative)
RATE_PROBE = "rate_probe"  # node, configured, delivered, error
NODE_DOWN = "node_down"  # node, reason
RUN_INFO = "run_info"  # free-form facts about the run (tdf, envelope, priority obtained)

#: The reason a job is killed when the scenario's ``duration_s`` ends the run: the one kill that was planned.
DURATION_REACHED = "scenario duration reached"


class EventWriter:
    """Appends events as JSON lines; each line is flushed so a crash loses at most the line in flight."""

    def __init__(self, path: str | os.PathLike | None, source: str, clock=None) -> None:
        self.source = source
        self.clock = clock
        self._fh: IO[str] | None = None
        self.buffer: list[dict] = []  # kept when path is None (simulator, tests)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - long-lived

    def emit(self, kind: str, t: float | None = None, **fields: Any) -> dict:
        if t is None:
            t = self.clock.now() if self.clock is not None else 0.0
        ev = {"t": round(t, 9), "wall": round(time.time(), 6), "src": self.source, "kind": kind, **fields}
        if self._fh is not None:
            self._fh.write(json.dumps(ev, separators=(",", ":")) + "\n")
        else:
            self.buffer.append(ev)
        return ev

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Reads events, tolerating a torn last line (a crash mid-write)."""
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def merge(parts: Iterable[str | os.PathLike], out: str | os.PathLike) -> list[dict]:
    events: list[dict] = []
    for p in parts:
        events.extend(read_jsonl(p))
    events.sort(key=lambda e: (e["t"], e.get("wall", 0.0)))
    write_all(events, out)
    return events


def write_all(events: Iterable[dict], out: str | os.PathLike) -> None:
    with open(out, "w", encoding="utf-8") as fh:
        for ev in events:
            fh.write(json.dumps(ev, separators=(",", ":")) + "\n")
