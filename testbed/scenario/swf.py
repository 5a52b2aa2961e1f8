"""Standard Workload Format (SWF) traces, as the Parallel Workloads Archive publishes them.

One job per line, 18 whitespace-separated fields, -1 for unknown; header lines start with ``;`` and carry
``Key: value`` facts (MaxNodes, MaxProcs, UnixStartTime, ...). Gzipped files are read as such. No PyPI
package reads SWF (the ones named so are absent or read other formats), and the format is 18 numbers.
"""

from __future__ import annotations

import gzip
import math
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

FIELDS = (
    "job", "submit", "wait", "run", "procs", "cpu", "memory", "req_procs", "req_time", "req_memory",
    "status", "user", "group", "executable", "queue", "partition", "preceding", "think",
)  # fmt: skip


class TraceError(ValueError):
    """The file is not a usable SWF trace; the message names the file and line."""


class TraceJob(NamedTuple):
    """One job of the trace. A named tuple: made in a third of a frozen dataclass's time (18,239 of them in
    the NASA trace, read at each run)."""

    job: int
    submit: float  # seconds from the trace's start
    run: float  # seconds
    procs: int  # allocated (requested when the trace lacks it)
    req_time: float | None  # the user's estimate, seconds
    status: int


def header(path: str | Path) -> dict[str, str]:
    """The header's ``Key: value`` facts (first occurrence of each key)."""
    out: dict[str, str] = {}
    for line in _lines(path):
        if not line.startswith(";"):
            break
        key, sep, value = line[1:].partition(":")
        if sep and key.strip() and key.strip() not in out:
            out[key.strip()] = value.strip()
    return out


def read(path: str | Path) -> Iterator[TraceJob]:
    """The trace's jobs in file order. Lines that are not 18 numbers are an error naming the line."""
    for n, line in enumerate(_lines(path), start=1):
        if not line or line.startswith(";"):
            continue
        parts = line.split()
        if len(parts) != len(FIELDS):
            raise TraceError(f"{path}:{n}: {len(parts)} fields, an SWF job line has {len(FIELDS)}")
        try:
            v = list(map(float, parts))
        except ValueError:
            v = None
        if v is None or not all(map(math.isfinite, v)):  # map: no generator step a field (16,171 lines)
            shown = line if len(line) <= 80 else line[:80] + "..."
            raise TraceError(f"{path}:{n}: not 18 finite numbers in {shown!r}")
        procs = int(v[4]) if v[4] > 0 else int(v[7])
        yield TraceJob(
            job=int(v[0]),
            submit=v[1],
            run=v[3],
            procs=procs,
            req_time=v[8] if v[8] > 0 else None,
            status=int(v[10]),
        )


def _lines(path: str | Path) -> Iterator[str]:
    p = Path(path)
    opener = gzip.open if p.suffix == ".gz" else open
    try:
        with opener(p, "rt", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                yield line.strip()
    except (OSError, EOFError, zlib.error) as exc:
        # gzip raises OSError for a file that is not gzip, EOFError for one cut short.
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise TraceError(f"{p}: cannot read it as an SWF trace ({why})") from None
