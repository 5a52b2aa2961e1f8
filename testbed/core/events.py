"""The event log: every state change, with emulated and real timestamps (docs/architecture.md, "The event log
is the truth").

Each component (coordinator, each node) appends JSON lines to its own file under ``<run>/events/`` and
flushes as it goes, so what was written before a crash stays readable; the runner merges them into
``events.jsonl`` ordered by emulated time. Results are computed from the merged log only.

The merged log may be compressed instead (the scenario's ``results.events: zstd``): ``events.jsonl.zst``,
the same lines as a stream of zstd frames, each one whole on its own and written out where the plain
writer writes out its buffer, so an interrupted run keeps every frame it finished. :func:`read_jsonl`
reads either, by the file's first bytes.
"""

from __future__ import annotations

import os
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson
import zstandard

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
# the report's Gantt chart draws its stops and continues from them); or, of every node at once, switched
# in place of node (SWITCHED_FIELD)
SLOT_SWITCH = "slot_switch"
PROC_CPU = "proc_cpu"  # node, job, rank, cpu_s (cumulative)
QUANTUM_CPU = "quantum_cpu"  # node, samples: [[job, rank, utilisation, interval], ...] (paired gang)
PROGRESS = "progress"  # node, job, rank, unit ("barriers"), value (cumulative)
RATE_PROBE = "rate_probe"  # node, cpu_rate (its own), configured, delivered (real cores), error, seconds
#: node, t0 (window start), w (real s), cpu, wait, explained, entitled, runnable (the threads' runnable
#: time, summed), longest (one thread's) (real s), error (None: its threads were runnable less than half
#: the window): the rate watch's window (mechanism/ratewatch.py)
RATE_WINDOW = "rate_window"
NODE_DOWN = "node_down"  # node, reason
# A local policy's CoopEvent (schedulers/base.py) sent to its job's other nodes (node, to: [nodes], event:
# its class's name, fields: {job_id, ...}), and one received (node, from_node, event, fields)
COOP_SENT = "coop_sent"
COOP_RECEIVED = "coop_received"
NODE_UP = "node_up"  # node
#: node, demand_mb, memory_mb, factor: the modelled paging of a node changed (testbed/core/paging.py;
#: factor 1.0 when its demand fits again). The simulator's; the real backend models no paging.
NODE_PAGING = "node_paging"
RUN_INFO = "run_info"  # free-form facts about the run (tdf, envelope, priority obtained)
RUN_ERROR = "run_error"  # error (one line), traceback: an exception that ended the run (policy, agent, ...)

#: A record of these kinds with ``nodes`` (a list) in place of ``node`` stands for one record per node: of
#: rank ``rank + i`` on ``nodes[i]`` (proc_started, proc_exited, progress), or of node ``nodes[i]``
#: (slot_switch), each with the record's other fields and source ``node<N>`` (:func:`per_node`). The
#: simulator logs so the ranks of a job run as one piece that do the same at the same instant (a lane,
#: docs/architecture.md, "The simulator's job-level fast path"), and the nodes that one slot switch lets
#: run the same jobs: one line where there were hundreds, which writing and reading the log paid for
#: (docs/measurements.md, "The simulator at trace scale").
GROUPED = frozenset({PROC_STARTED, PROC_EXITED, PROGRESS, SLOT_SWITCH})

#: A slot_switch with this field and neither ``node`` nor ``nodes`` is a switch of every node at once
#: (source :data:`EVERY_NODE`): ``jobs`` holds every job the slot runs, each on the nodes of its latest
#: job_started, and ``switched`` how many nodes logged it, those with a live rank (from its proc_started to
#: its proc_exited) at that point of the log. It stands for one record of each such node n, with the
#: record's other fields and as its ``jobs`` those of the record started on n (:class:`PerNode`). The
#: simulator's switch by job logs so (docs/architecture.md, "Gang switches scheduled ahead"): one line of
#: the slot's jobs where grouped records listed thousands of nodes at every quantum. Logs of the per-node
#: forms read as before.
SWITCHED_FIELD = "switched"
#: The source of a switch of every node (:data:`SWITCHED_FIELD`).
EVERY_NODE = "nodes"

#: The reason a job is killed when the scenario's ``duration_s`` ends the run: the one kill that was planned.
DURATION_REACHED = "scenario duration reached"
#: Why a node went down when the scenario's ``faults.script`` took it down (its jobs' failures were planned).
SCRIPTED_FAULT = "scripted fault"
#: The reason of a job killed by its policy starts with this (a planned end, like a rejection).
POLICY_KILL = "killed by the policy"


#: The merged event log in a results folder, by the scenario's ``results.events`` (testbed/scenario/model.py).
#: One definition: the runner, both backends and every reader find the log through :func:`log_file` and
#: :func:`find_log` (testbed/results/folder.py's RUN_ENTRIES names both, and their merge's ``.tmp``).
LOG_FILES = {"jsonl": "events.jsonl", "zstd": "events.jsonl.zst"}
#: Bytes of log lines a streaming writer gathers before it writes them out: :class:`JsonlSink`'s buffer, and
#: the uncompressed size of each of :class:`ZstdSink`'s frames (about 50 kB compressed).
FLUSH_BYTES = 1 << 20
#: zstd's own default level: 20x smaller on the NASA replay's log at 0.1 s of CPU for its 78 MB; level 9
#: gains a sixth more at six times the CPU (docs/measurements.md, "Event logs at scale").
ZSTD_LEVEL = 3
#: How every zstd frame begins (RFC 8878 §3.1.1): how :func:`read_jsonl` tells a compressed log.
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def log_file(run_dir: str | os.PathLike, fmt: str = "jsonl") -> Path:
    """Where a run in ``run_dir`` writes its merged log in format ``fmt`` (a key of :data:`LOG_FILES`)."""
    return Path(run_dir) / LOG_FILES[fmt]


def find_log(run_dir: str | os.PathLike) -> Path | None:
    """The merged log a run left in ``run_dir``, whichever its format; None when it left none."""
    for name in LOG_FILES.values():
        p = Path(run_dir) / name
        if p.is_file():
            return p
    return None


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


def per_node(e: dict) -> list[dict]:
    """The records that ``e`` stands for: one per node of a grouped record (:data:`GROUPED`), in order;
    ``[e]`` for any other."""
    nodes = e.get("nodes")
    if nodes is None or e["kind"] not in GROUPED:
        return [e]
    base = {k: v for k, v in e.items() if k != "nodes"}
    if e["kind"] == SLOT_SWITCH:
        return [{**base, "src": f"node{n}", "node": n} for n in nodes]
    first = e["rank"]
    return [{**base, "src": f"node{n}", "rank": first + i, "node": n} for i, n in enumerate(nodes)]


class PerNode:
    """Reads a log, in its order, as the records each of its records stands for: a grouped one's
    (:func:`per_node`), and a switch of every node's (:data:`SWITCHED_FIELD`), for which it follows each
    job's nodes and which of the ``nodes`` nodes (0..nodes-1; a job's head process runs beyond) have a live
    rank."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.placed: dict[str, list[int]] = {}  # job -> its nodes (its latest job_started)
        self.live: dict[int, int] = {}  # node -> its live ranks, while it has some

    def __call__(self, e: dict) -> list[dict]:
        kind = e["kind"]
        if kind == SLOT_SWITCH and SWITCHED_FIELD in e:
            return self._switch(e)
        if kind == JOB_STARTED:
            self.placed[e["job"]] = e["nodes"]
        elif kind == PROC_STARTED or kind == PROC_EXITED:
            step = 1 if kind == PROC_STARTED else -1
            for n in e["nodes"] if "nodes" in e else (e.get("node"),):
                if n is not None and n < self.nodes:
                    left = self.live.get(n, 0) + step
                    if left > 0:
                        self.live[n] = left
                    else:
                        self.live.pop(n, None)
        return per_node(e) if "nodes" in e and kind in GROUPED else [e]

    def _switch(self, e: dict) -> list[dict]:
        """The node records a switch of every node stands for: in the order the grouped form has them (by
        the jobs each node runs, first those of the lowest node), each group's nodes in order."""
        base = {k: v for k, v in e.items() if k != SWITCHED_FIELD}
        here: dict[int, list[str]] = {}
        for job in e["jobs"]:  # sorted: so is each node's share
            for n in self.placed.get(job, ()):
                if n in self.live:
                    here.setdefault(n, []).append(job)
        groups: dict[tuple[str, ...], list[int]] = {}
        for n in sorted(self.live):
            groups.setdefault(tuple(here.get(n, ())), []).append(n)
        return [
            {**base, "src": f"node{n}", "node": n, "jobs": list(g)} for g, ns in groups.items() for n in ns
        ]


def per_node_all(events: Iterable[dict], nodes: int) -> Iterator[dict]:
    """``events`` (of a run of ``nodes`` nodes) with each record replaced by the records it stands for
    (:class:`PerNode`)."""
    read = PerNode(nodes)
    for e in events:
        yield from read(e)


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
        self._fh: IO[bytes] | None = open(path, "wb", buffering=FLUSH_BYTES)  # noqa: SIM115

    def __call__(self, record: dict) -> None:
        self._fh.write(_line(record))

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def open_sink(path: str | os.PathLike) -> JsonlSink | ZstdSink:
    """A streaming writer for ``path``: zstd frames for a name ending in ``.zst``, else JSON lines."""
    return ZstdSink(path) if str(path).endswith(".zst") else JsonlSink(path)


class ZstdSink:
    """:class:`JsonlSink` in zstd frames: the lines gathered are compressed into one frame (with its
    checksum) and written out every :data:`FLUSH_BYTES` of them, where JsonlSink writes out its buffer, and
    at :meth:`close`. Each frame decodes on its own, so a run killed outright loses at most the frame in
    flight (:func:`read_jsonl` passes a torn last frame over), and one interrupted by Ctrl-C, even amid a
    frame's write, keeps every line once :meth:`close` has run: close cuts a frame left half-written and
    writes it again, whole."""

    def __init__(self, path: str | os.PathLike) -> None:
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self._cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_checksum=True)
        # (bytes of whole frames on disk, the lines not yet in one): replaced in one assignment once a
        # frame is written, so a KeyboardInterrupt anywhere leaves a state that close() can finish from.
        # The lines are copied into one buffer: each of orjson's own bytes objects holds 4 kB at least.
        self._state: tuple[int, bytearray] = (0, bytearray())

    def __call__(self, record: dict) -> None:
        lines = self._state[1]
        lines += _line(record)
        if len(lines) >= FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        pos, lines = self._state
        if not lines:
            return
        frame = self._cctx.compress(lines)
        os.lseek(self._fd, pos, os.SEEK_SET)  # over a frame an interrupted write left torn, if any
        view = memoryview(frame)
        while view:
            view = view[os.write(self._fd, view) :]
        self._state = (pos + len(frame), bytearray())

    def close(self) -> None:
        if self._fd is not None:
            try:
                self._flush()
                os.ftruncate(self._fd, self._state[0])  # nothing torn after the last whole frame
            finally:
                os.close(self._fd)
                self._fd = None


class EventLogError(ValueError):
    """An event log holds a line that is not an event, other than a torn last line. One line, naming the
    file and the line: results are computed from the log only, so a damaged log is never read past."""


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    """Reads events, from JSON lines or from zstd frames of them (:class:`ZstdSink`; told by the file's
    first bytes). Only a torn end (a crash mid-write) is passed over: a last line without its newline, or
    a last zstd frame cut short. Any other line that is not a JSON object, or a frame that does not decode
    to what was written (zstd's checksum), raises :class:`EventLogError`."""
    with open(path, "rb") as fh:
        compressed = fh.read(len(ZSTD_MAGIC)) == ZSTD_MAGIC
        fh.seek(0)
        lines = _zstd_lines(path, fh) if compressed else fh
        loads = orjson.loads
        for n, line in enumerate(lines, 1):
            # Parsed as it is (JSON allows the whitespace around it): a blank line and a torn end are told
            # only when a line does not parse, not checked on each (85,311 lines in the NASA replay).
            try:
                event = loads(line)
            except orjson.JSONDecodeError:
                if not line.strip():
                    continue
                if not line.endswith(b"\n"):  # torn
                    return
                event = None
            if not isinstance(event, dict) or "kind" not in event or "t" not in event:
                raise EventLogError(
                    f"{path}: line {n} is not an event ({line.strip()[:60]!r}...); the log is damaged, so no "
                    "results are computed from it"
                )
            yield event


def _zstd_lines(path: str | os.PathLike, fh: IO[bytes]) -> Iterator[bytes]:
    """The lines of a stream of zstd frames, each frame's once it decoded whole and its checksum agreed; a
    last frame cut short yields nothing (any frame after one cut short is damage)."""
    carry = b""
    for data in _zstd_frames(path, fh):
        parts = (carry + data).split(b"\n")
        carry = parts.pop()
        for part in parts:
            yield part + b"\n"
    if carry:
        yield carry  # a last line without its newline: torn, as in a plain log


def _zstd_frames(path: str | os.PathLike, fh: IO[bytes]) -> Iterator[bytes]:
    dctx = zstandard.ZstdDecompressor()
    obj, out = dctx.decompressobj(), []
    frame, start, pos = 1, 0, 0  # the frame being decoded, the byte it begins at, the next chunk's
    while chunk := fh.read(FLUSH_BYTES):
        while chunk:
            try:
                data = obj.decompress(chunk)
            except zstandard.ZstdError as exc:
                raise EventLogError(
                    f"{path}: zstd frame {frame} (from byte {start}) does not decode ({exc}); the log is "
                    "damaged, so no results are computed from it"
                ) from None
            out.append(data)
            if not obj.eof:
                pos += len(chunk)
                break
            yield b"".join(out)
            rest = obj.unused_data
            pos += len(chunk) - len(rest)
            frame, start, chunk = frame + 1, pos, rest
            obj, out = dctx.decompressobj(), []
    if pos > start:
        # A frame cut short: the torn end of a killed run's log, unless another frame follows (a damaged
        # block header can make a frame's decoder wait for bytes that never come, swallowing the rest).
        fh.seek(start)
        after = fh.read().find(ZSTD_MAGIC, 1)
        if after >= 0:
            raise EventLogError(
                f"{path}: zstd frame {frame} (from byte {start}) does not end before the frame at byte "
                f"{start + after}; the log is damaged, so no results are computed from it"
            )


def merge(parts: Iterable[str | os.PathLike], out: str | os.PathLike) -> list[dict]:
    events: list[dict] = []
    for p in parts:
        events.extend(read_jsonl(p))
    events.sort(key=lambda e: (e["t"], e.get("wall", 0.0)))
    write_all(events, out)
    return events


def write_all(events: Iterable[dict], out: str | os.PathLike) -> None:
    """Writes the log whole or not at all: a kill mid-write leaves the previous file, not half of one.
    Compressed when ``out`` ends in ``.zst`` (:func:`open_sink`)."""
    tmp = Path(f"{out}.tmp")
    sink = ZstdSink(tmp) if str(out).endswith(".zst") else JsonlSink(tmp)
    try:
        for ev in events:
            sink(ev)
    finally:
        sink.close()
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
