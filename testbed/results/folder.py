"""A results folder belongs to one run, and ``--force`` removes only what a run wrote.

A run *claims* its folder before it writes anything: it creates the marker file :data:`MARKER` with an
exclusive ``flock`` already held (made under a private name, locked, then hard-linked into place, which
fails when the name exists), and keeps the lock until it ends. So:

- two runs can never share a folder: the second finds the marker and is refused, whether the first is
  still running (the lock is held) or done;
- ``--force`` replaces only a folder that holds a marker, takes the marker's lock first (a live run keeps
  it, so its folder is never replaced under it), and removes only the entries a run writes
  (:data:`RUN_ENTRIES`, and sub-folders with markers of their own: repetitions, sweep variants). An entry
  of anyone else's, anywhere in it, makes ``--force`` refuse before anything is removed;
- whether a run is live is one non-blocking ``flock`` away (:func:`is_live`).
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.core.events import LOG_FILES

#: The marker a run writes first into its results folder (JSON: who claimed it and when).
MARKER = ".testbed-run"
MARKER_FORMAT = 1
#: Every top-level entry a run writes into its folder besides sub-folders with markers of their own.
#: One list: tests/e2e/test_results_safety.py checks that the runs of every backend and a sweep write
#: nothing else, so a new output file must be named here or ``--force`` refuses folders holding it.
RUN_ENTRIES = frozenset(
    {
        MARKER,
        "scenario.yaml",  # the effective scenario
        # the merged event log, plain or compressed (results.events), and the merge's temporary file
        # (events.write_all), left by a kill mid-merge
        *LOG_FILES.values(),
        *(f"{name}.tmp" for name in LOG_FILES.values()),
        "events",  # per-node event logs of a real run
        "logs",  # fork-server, probe and worker logs of a real run
        "io",  # the synthetic kind's I/O files
        "prometheus",  # targets and config for a live Prometheus
        "jobs.csv",
        "summary.json",
        "summaries.json",  # one per repetition
        "repetitions.json",  # the repetitions' seeds and statistics (testbed/results/stats.py)
        "comparison.csv",  # a sweep's table
        "plots",  # a sweep's plots
        "error.txt",  # a failed sweep variant's traceback
        "report.html",  # testbed report's page (testbed/results/report.py REPORT_FILE)
    }
)


class FolderError(ValueError):
    """The folder cannot be claimed; the message is one line naming ``--out`` and the fix."""


@dataclass
class Claim:
    """A held results folder: the open, locked marker. :meth:`release` (or the process's exit) frees it."""

    path: Path
    fd: int

    def release(self) -> None:
        if self.fd >= 0:
            _HELD.pop(self.path, None)
            os.close(self.fd)  # closing the last descriptor drops the flock
            self.fd = -1


#: Folders this process holds, by absolute path: the runner claims a folder once, however many layers
#: (CLI, sweep, run) pass it on.
_HELD: dict[Path, Claim] = {}


def held(path: Path) -> Claim | None:
    return _HELD.get(Path(path).absolute())


def claim(path: Path, force: bool = False, label: str | None = None) -> Claim:
    """Claims ``path`` (created if missing) for one run, or raises :class:`FolderError`. Without
    ``force`` the folder must be new or empty; with it, a finished run's folder is emptied of what the
    run wrote."""
    path = Path(path).absolute()
    label = label or f"--out {path}"
    if path in _HELD:
        return _HELD[path]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise FolderError(f"{label}: is a file, not a folder; give a folder (created if missing)") from None
    except OSError as exc:
        raise FolderError(f"{label}: cannot create it ({exc.strerror}); give another folder") from None
    fd, private = _locked_marker(path, label)
    try:
        os.link(private, path / MARKER)
        created = True
    except FileExistsError:
        created = False
    finally:
        private.unlink()
    if created:
        others = sorted(e for e in os.listdir(path) if e != MARKER and not e.startswith(_PRIVATE))
        if others:
            # It held something already (a file a user put there after our check, say): not ours to use.
            os.unlink(path / MARKER)
            os.close(fd)
            raise FolderError(
                f"{label}: already holds {_some(others)}; results are never mixed: give a new folder"
            )
        return _hold(path, fd)
    os.close(fd)
    if not force:
        raise FolderError(
            f"{label}: already holds a run's results (or another run is starting in it); results are never "
            "mixed: give a new folder, or add --force to replace a finished run's folder"
        )
    return _take_over(path, label)


def is_live(path: Path) -> bool:
    """True when a run holds ``path`` now (its marker's lock is taken)."""
    try:
        fd = os.open(Path(path) / MARKER, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def foreign_entries(path: Path) -> list[str]:
    """The entries below ``path`` (relative paths) that no run wrote: anything not in
    :data:`RUN_ENTRIES` at the top of a marked folder, and unmarked sub-folders."""
    path = Path(path)
    found: list[str] = []
    for entry in sorted(os.listdir(path)):
        p = path / entry
        if entry in RUN_ENTRIES:
            continue
        if p.is_dir() and not p.is_symlink() and (p / MARKER).is_file():
            found += [f"{entry}/{sub}" for sub in foreign_entries(p)]
        else:
            found.append(entry)
    return found


# --------------------------------------------------------------------------------------------------------

_PRIVATE = f"{MARKER}.claim-"


def _locked_marker(path: Path, label: str) -> tuple[int, Path]:
    """A new marker under a private name, already locked and written, ready to be linked into place: the
    marker never exists unlocked, so a --force run can never take it between its creation and its lock."""
    private = path / f"{_PRIVATE}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        fd = os.open(private, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
    except OSError as exc:
        raise FolderError(
            f"{label}: cannot write in it ({exc.strerror}); give a folder you can write to"
        ) from None
    fcntl.flock(fd, fcntl.LOCK_EX)
    _write_marker(fd)
    return fd, private


def _write_marker(fd: int) -> None:
    doc = {
        "format": MARKER_FORMAT,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "claimed": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(doc) + "\n").encode(), 0)


def _hold(path: Path, fd: int) -> Claim:
    c = Claim(path, fd)
    _HELD[path] = c
    return c


def _take_over(path: Path, label: str) -> Claim:
    """``--force`` on a folder with a marker: lock it (refused while its run lives), check that every
    entry is a run's, then remove them all but the marker, which becomes this run's."""
    try:
        fd = os.open(path / MARKER, os.O_RDWR)
    except OSError as exc:
        raise FolderError(
            f"{label}: cannot open its {MARKER} ({exc.strerror}); give another folder"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise FolderError(
            f"{label}: a run is writing it now ({_owner(path)}); --force never replaces a live run's "
            "folder: give another folder"
        ) from None
    foreign = foreign_entries(path)
    if foreign:
        os.close(fd)
        raise FolderError(
            f"{label}: --force removes only what a testbed run wrote, and this folder also holds "
            f"{_some(foreign)}; move those out or give another folder"
        )
    for entry in os.listdir(path):
        if entry != MARKER and not entry.startswith(_PRIVATE):
            p = path / entry
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
    _write_marker(fd)
    return _hold(path, fd)


def _owner(path: Path) -> str:
    try:
        doc = json.loads((path / MARKER).read_text())
        return f"pid {doc['pid']} on {doc['host']}, since {doc['claimed']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its marker is unreadable"


def _some(entries: list[str]) -> str:
    shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
    return f"{len(entries)} {'entry' if len(entries) == 1 else 'entries'} ({shown})"
