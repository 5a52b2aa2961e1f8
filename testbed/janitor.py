"""The janitor: whatever happens to the driver, a run leaves no process and no cgroup behind.

The driver starts it detached at the start of a run (:func:`start_janitor`)::

    python -m testbed.janitor --run-id ID --watch PID [--watch PID ...]

It waits (pidfds, polled every 0.2 s) until every watched pid has died, or for SIGTERM/SIGINT, then
cleans up run ID and exits. When the driver died (rather than told it to stop) and ``--run-dir`` was
given, it then rebuilds that run's jobs.csv and summary.json from the events written so far
(``results.rebuild``), so a killed run still says how it ended. Cleaning (:func:`cleanup_run`, also
called synchronously by the driver at a normal end) means:

* every process whose environment has ``TESTBED_RUN_ID=ID`` (``process.spawn`` puts it there and children
  inherit it; the driver sets it before starting Ray, so Ray's own processes for the run carry it too),
  and every process inside a cgroup under ``testbed/ID`` in any hierarchy, gets SIGKILL, its freezer
  cgroup is thawed (a frozen task does not act on SIGKILL until thawed), then SIGCONT. The testbed
  itself freezes nothing; a node's processes may still sit in a frozen cgroup (a container paused with
  ``docker pause``, a v1 freezer cgroup left by an earlier version), and must die all the same;
* every cgroup under ``testbed/ID`` in every hierarchy is removed, children first, and ``testbed/`` too if
  no other run uses it;
* every container labelled ``testbed.run_id=ID`` (the docker envelope's) is removed through the daemon,
  first (which kills what is in its cgroups), and then ``testbed-docker/ID`` in every hierarchy;
* the run's scratch folder on this host (``agent.scratch_dir``: a joined Ray cluster's agents write there
  until the driver collects their files) is removed.

Only marked or enveloped processes are touched: the janitor never kills the watched processes themselves
or anything else they started. It strips ``TESTBED_RUN_ID`` from its own environment and never signals
itself. :func:`cleanup_leftovers` (the ``testbed cleanup`` command) does the same for every run found
on the host whose driver is gone: a live run (its janitor watching a live driver) is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.apps.environ import MARK_NODE
from testbed.apps.environ import MARK_RUN_ID as RUN_ID_ENV  # the name other modules import it by here
from testbed.emulator.mechanism.envelope import TOP, cgroup_mounts, rmdir_up
from testbed.emulator.mechanism.priority import restore_session_group

_NEEDLE = RUN_ID_ENV.encode() + b"="
POLL_S = 0.2
KILL_TIMEOUT_S = 5.0


def marked_processes(run_id: str | None = None) -> dict[int, str]:
    """pid -> run id of every live process whose environ has TESTBED_RUN_ID (= run_id, if given)."""
    me = os.getpid()
    out: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                data = f.read()
        except OSError:
            continue  # gone, a zombie, or a kernel thread
        if _NEEDLE not in data:
            continue
        for entry in data.split(b"\0"):
            if entry.startswith(_NEEDLE):
                rid = entry[len(_NEEDLE) :].decode(errors="replace")
                if run_id is None or rid == run_id:
                    out[int(name)] = rid
                break
    return out


def processes_with(env: dict[str, str], candidates: list[int] | None = None) -> list[int]:
    """The live processes (among ``candidates``, else all of /proc) whose environment holds every
    ``KEY=VALUE`` of ``env``: a worker's children inherit its environment, so they are found by it even
    after they outlived it (an orphan no longer has its parent's pid)."""
    needles = [f"{k}={v}".encode() for k, v in env.items()]
    me = os.getpid()
    pids = candidates if candidates is not None else [int(n) for n in os.listdir("/proc") if n.isdigit()]
    out = []
    for pid in pids:
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                entries = set(f.read().split(b"\0"))
        except OSError:
            continue
        if all(n in entries for n in needles):
            out.append(pid)
    return out


def session_members(sid: int, candidates: list[int] | None = None) -> list[int]:
    """The live processes (among ``candidates``, else all of /proc) in session ``sid``, its leader aside: a
    forked worker leads its own session, so what it forked is found by it once the worker is gone (a
    leader with that pid then is a newer process that reused the pid, not one of them)."""
    pids = candidates if candidates is not None else [int(n) for n in os.listdir("/proc") if n.isdigit()]
    out = []
    for pid in pids:
        if pid == sid:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z" and int(fields[3]) == sid:  # fields: state, ppid, pgrp, session
            out.append(pid)
    return out


def _run_dirs(run_id: str) -> list[tuple[str, str]]:
    """(mount point, testbed/<run_id> dir) in every cgroup hierarchy where it exists."""
    return [
        (mnt, os.path.join(mnt, TOP, run_id))
        for mnt, _, _, _ in cgroup_mounts()
        if os.path.isdir(os.path.join(mnt, TOP, run_id))
    ]


def _subtree(path: str) -> list[str]:
    """path and every cgroup below it, children before parents."""
    return [d for d, _, _ in os.walk(path, topdown=False)]


def _try_write(path: str, value: str, errors: list[str]) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except FileNotFoundError:
        pass
    except OSError as e:
        errors.append(f"write {value!r} to {path}: {e}")


def _cgroup_pids(dirs: list[str]) -> set[int]:
    pids: set[int] = set()
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                pids.update(int(x) for x in f.read().split())
        except OSError:
            pass
    return pids


def _let_out_of_freezer(pid: int, errors: list[str]) -> None:
    """Thaw the freezer holding ``pid``: a testbed cgroup wholesale, any other by moving just ``pid`` out."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return
    mounts = {frozenset(c): m for m, t, c, _ in cgroup_mounts()}
    for line in lines:
        _, ctrls, path = line.split(":", 2)
        mnt = mounts.get(frozenset(ctrls.split(","))) if ctrls else None
        if mnt is None or path == "/":
            continue
        if "freezer" in ctrls.split(","):
            if path.startswith(f"/{TOP}/"):
                _try_write(os.path.join(mnt, path.lstrip("/"), "freezer.state"), "THAWED", errors)
            else:
                _try_write(os.path.join(mnt, "cgroup.procs"), str(pid), errors)


def _kill(pids: set[int], dirs: list[str], errors: list[str]) -> None:
    # SIGKILL first, then thaw: the frozen ones die on thaw without running another user instruction.
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for d in dirs:
        if os.path.exists(os.path.join(d, "freezer.state")):
            _try_write(os.path.join(d, "freezer.state"), "THAWED", errors)
        if os.path.exists(os.path.join(d, "cgroup.kill")):
            _try_write(os.path.join(d, "cgroup.kill"), "1", errors)
        elif os.path.exists(os.path.join(d, "cgroup.freeze")):
            _try_write(os.path.join(d, "cgroup.freeze"), "0", errors)
    for pid in pids:
        _let_out_of_freezer(pid, errors)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _cleanup(run_ids: set[str]) -> dict[str, Any]:
    report: dict[str, Any] = {"run_ids": sorted(run_ids), "killed": [], "cgroups_removed": [], "errors": []}
    errors: list[str] = report["errors"]
    # The docker envelope's containers go first (removing one kills what is in its cgroups). A run that
    # used it has testbed-docker/<run> cgroups until cleaned; only then is the daemon asked (importing its
    # SDK and a round trip cost every other run's cleanup 0.1-0.3 s). `testbed cleanup` asks it anyway.
    from testbed.emulator.mechanism import docker_envelope as de  # here: not on the janitor's start-up path

    docker_ids = sorted(de.leftover_run_ids() & run_ids)
    rep: dict[str, list[str]] = {"removed": [], "errors": []}
    for rid in docker_ids:
        r = de.remove_containers(rid)
        rep["removed"] += r["removed"]
        rep["errors"] += r["errors"]
    report["containers_removed"] = rep["removed"]
    errors += rep["errors"]
    me = os.getpid()
    killed: set[int] = set()
    deadline = time.monotonic() + KILL_TIMEOUT_S
    # Repeat until nothing is left: a worker may fork while we kill its siblings.
    while True:
        marked = {p: r for rid in run_ids for p, r in marked_processes(rid).items()}
        dirs = [d for rid in sorted(run_ids) for _, top in _run_dirs(rid) for d in _subtree(top)]
        targets = (set(marked) | _cgroup_pids(dirs)) - {me}
        if not targets:
            break
        killed |= targets
        _kill(targets, dirs, errors)
        if time.monotonic() > deadline:
            errors.append(f"processes {sorted(targets)} survived SIGKILL for {KILL_TIMEOUT_S} s")
            break
        time.sleep(0.01)
    report["killed"] = sorted(killed)
    report["run_ids"] = sorted(run_ids)
    for rid in sorted(run_ids):
        for mnt, top in _run_dirs(rid):
            for d in _subtree(top):
                try:
                    os.rmdir(d)
                    report["cgroups_removed"].append(d)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    errors.append(f"rmdir {d}: {e}")
            # testbed/ goes too, unless another run still has a directory there.
            try:
                report["cgroups_removed"] += rmdir_up(os.path.join(mnt, TOP), mnt)
            except OSError as e:
                errors.append(f"rmdir {os.path.join(mnt, TOP)}: {e}")
    for rid in sorted(run_ids):
        scratch = scratch_root(rid)
        if scratch.is_dir():
            shutil.rmtree(scratch, onerror=lambda _f, p, e: errors.append(f"removing {p}: {e[1]}"))
            report.setdefault("scratch_removed", []).append(str(scratch))
    for rid in docker_ids:
        try:
            report["cgroups_removed"] += de.remove_parent_cgroups(rid)
        except OSError as e:
            errors.append(f"removing testbed-docker/{rid}: {e}")
        if de.leftover_run_ids(rid):
            errors.append(f"cgroups under testbed-docker/{rid} are left (a container not removed?)")
    return report


def scratch_root(run_id: str) -> Path:
    """The run's folder on a host whose agents cannot write the driver's run folder (a joined Ray
    cluster): node k writes under ``<this>/node<k>`` (agent.scratch_dir)."""
    return Path(tempfile.gettempdir()) / f"testbed-{run_id}"


def cleanup_run(run_id: str) -> dict[str, Any]:
    """Kill every process of ``run_id`` and remove its cgroups, now. Returns what was done and any errors."""
    report = _cleanup({run_id})
    report["run_id"] = run_id
    return report


# --------------------------------------------------------------------------------------------------------
# `testbed cleanup`: what runs left behind, live runs spared


def live_runs() -> dict[str, list[int]]:
    """run id -> the live driver pids of every run whose driver is alive: a driver starts its janitor as
    ``python -m testbed.janitor --run-id ID --watch PID``, so a janitor watching a live pid is a live
    run (one whose watched pids are gone is cleaning up after a dead driver)."""
    out: dict[str, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "testbed.janitor" not in argv or "--run-id" not in argv:
            continue
        rid = argv[argv.index("--run-id") + 1] if argv.index("--run-id") + 1 < len(argv) else ""
        watched = [
            int(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a == "--watch" and argv[i + 1].isdigit()
        ]
        alive = [p for p in watched if _is_alive(p)]
        if rid and alive:
            out.setdefault(rid, []).extend(alive)
    return out


def _is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


@dataclass
class Leftovers:
    """What one run left on this host."""

    run_id: str
    processes: list[int] = field(default_factory=list)  # marked, or inside its cgroups
    cgroups: list[str] = field(default_factory=list)  # its directories under testbed/ (every hierarchy)
    docker: bool = False  # it used the docker envelope and has cgroups under testbed-docker/
    scratch: str | None = None  # its scratch folder (a joined Ray cluster's)


def survey() -> dict[str, Leftovers]:
    """Every run with something left on this host: cgroups under testbed/ or testbed-docker/, marked
    processes, a scratch folder."""
    from testbed.emulator.mechanism import docker_envelope as de  # not on the janitor's start-up path

    found: dict[str, Leftovers] = {}

    def of(rid: str) -> Leftovers:
        return found.setdefault(rid, Leftovers(rid))

    for mnt, _, _, _ in cgroup_mounts():
        top = os.path.join(mnt, TOP)
        if os.path.isdir(top):
            for n in os.listdir(top):
                if os.path.isdir(os.path.join(top, n)):
                    of(n).cgroups += _subtree(os.path.join(top, n))
    for pid, rid in marked_processes(None).items():
        of(rid).processes.append(pid)
    for rid in de.leftover_run_ids():
        of(rid).docker = True
    for lo in found.values():
        lo.processes = sorted(set(lo.processes) | _cgroup_pids(lo.cgroups))
    prefix = scratch_root("").name
    for p in Path(tempfile.gettempdir()).glob(f"{prefix}*"):
        if p.is_dir() and p.name != prefix:
            of(p.name[len(prefix) :]).scratch = str(p)
    return found


@dataclass
class CleanupReport:
    """What ``testbed cleanup`` did (or, with ``dry_run``, would do)."""

    dry_run: bool
    run_id: str | None = None  # the one run asked for (--run), or None: every run
    cleaned: list[Leftovers] = field(default_factory=list)
    live: dict[str, list[int]] = field(default_factory=dict)  # spared: run id -> live driver pids
    containers_removed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        """One human sentence: what was (or would be) removed, and which live runs were left alone."""
        n_proc = sum(len(lo.processes) for lo in self.cleaned)
        n_cg = sum(len(lo.cgroups) for lo in self.cleaned)
        verb = "would remove" if self.dry_run else "removed"
        if self.cleaned:
            ids = ", ".join(lo.run_id for lo in self.cleaned)
            what = [f"{n_proc} process(es)", f"{n_cg} cgroup(s)"]
            if any(lo.docker for lo in self.cleaned):
                what.append(
                    f"{len(self.containers_removed)} container(s)" if not self.dry_run else "containers"
                )
            if any(lo.scratch for lo in self.cleaned):
                what.append(f"{sum(1 for lo in self.cleaned if lo.scratch)} scratch folder(s)")
            n = len(self.cleaned)
            text = f"{verb.capitalize()} {', '.join(what)} left by {n} run(s) whose driver is gone ({ids})"
        elif self.run_id is not None:
            text = f"Nothing to clean: run {self.run_id} left nothing on this host"
        else:
            text = "Nothing to clean: no run whose driver is gone left anything on this host"
        if self.live:
            runs = "; ".join(
                f"{rid} (driver pid {', '.join(map(str, p))})" for rid, p in sorted(self.live.items())
            )
            text += f"; left {len(self.live)} live run(s) alone: {runs}"
        return text + "."

    def as_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "runs": [asdict(lo) for lo in self.cleaned],
            "live_runs": {rid: pids for rid, pids in sorted(self.live.items())},
            "containers_removed": self.containers_removed,
            "errors": self.errors,
        }


class LiveRun(ValueError):
    """``testbed cleanup --run ID`` named a run whose driver is alive."""


def cleanup_leftovers(run_id: str | None = None, dry_run: bool = False) -> CleanupReport:
    """Clean what runs whose driver is gone left on this host (every such run, or ``run_id`` alone); a
    live run is never touched (:func:`live_runs`). ``dry_run``: only say what would be removed. Raises
    :class:`LiveRun` when ``run_id`` is live."""
    live = live_runs()
    if run_id is not None and run_id in live:
        raise LiveRun(
            f"--run {run_id}: that run is live (driver pid {', '.join(map(str, live[run_id]))}); stop it "
            "(Ctrl-C, or kill the driver) and its janitor cleans it up"
        )
    found = survey()
    targets = [lo for rid, lo in sorted(found.items()) if rid not in live and run_id in (None, rid)]
    report = CleanupReport(dry_run, run_id, targets, {r: p for r, p in live.items() if run_id is None})
    if dry_run:
        return report
    for lo in targets:
        done = _cleanup({lo.run_id})
        report.containers_removed += done.get("containers_removed", [])
        report.errors += done["errors"]
    return report


def cleanup_all() -> dict[str, Any]:
    """Every run whose driver is gone, cleaned (:func:`cleanup_leftovers`), as a dict."""
    return cleanup_leftovers().as_json()


def start_janitor(
    run_id: str,
    watch_pids: list[int],
    log_path: str | None = None,
    run_dir: str | None = None,
    session_nice: tuple[int, str | None] | None = None,
) -> subprocess.Popen:
    """Start the janitor detached (own session, no TESTBED_RUN_ID) watching ``watch_pids``; with
    ``run_dir``, it rebuilds that run's results if the watched processes die. ``session_nice`` = (session
    id, autogroup nice): put that session's autogroup back to it if they die
    (priority.raise_session_group)."""
    env = {k: v for k, v in os.environ.items() if k not in (RUN_ID_ENV, MARK_NODE)}
    argv = [sys.executable, "-m", "testbed.janitor", "--run-id", run_id]
    for pid in watch_pids:
        argv += ["--watch", str(pid)]
    if session_nice is not None and session_nice[1] is not None:
        argv += ["--session-nice", f"{session_nice[0]}:{session_nice[1]}"]
    if run_dir is not None:
        argv += ["--run-dir", run_dir]
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        if log_path:
            out.close()  # type: ignore[union-attr]


def watch(
    run_id: str, pids: list[int], run_dir: str | None = None, session_nice: tuple[int, str] | None = None
) -> dict[str, Any]:
    """Block until every pid in ``pids`` has died (or SIGTERM/SIGINT), then cleanup_run(run_id); if they
    died, rebuild ``run_dir``'s results from its events (when given) and put ``session_nice``'s session
    autogroup back (a killed driver could not)."""
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    poller = select.poll()
    fds: set[int] = set()
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # already gone
        fds.add(fd)
        poller.register(fd, select.POLLIN)
    why = "all watched processes exited"
    while fds:
        if stop:
            why = "signalled"
            break
        for fd, _ in poller.poll(POLL_S * 1000):
            poller.unregister(fd)
            os.close(fd)
            fds.discard(fd)
    report = cleanup_run(run_id)
    report["why"] = why
    if session_nice is not None and not stop:
        report["session_nice_restored"] = _restore_session_nice(*session_nice)
    if run_dir is not None and not stop:
        try:
            from testbed.results import summary as results

            results.rebuild(
                Path(run_dir),
                ended=f"driver (pid {', '.join(map(str, pids))}) died without ending the run; "
                "the janitor killed what it left",
                allow_empty=True,
            )
            report["results"] = run_dir
        except Exception as exc:  # noqa: BLE001 - the cleanup is done; say why the results are not
            report["errors"].append(f"rebuilding the results in {run_dir}: {type(exc).__name__}: {exc}")
    return report


def _restore_session_nice(sid: int, nice: str) -> bool:
    """Through any live process of session ``sid`` (an autogroup is the session's)."""

    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                session = int(f.read().rsplit(")", 1)[1].split()[3])  # state ppid pgrp session
        except (OSError, ValueError, IndexError):
            continue
        if session == sid and restore_session_group(nice, int(name)):
            return True
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m testbed.janitor", description=__doc__.splitlines()[0])
    ap.add_argument("--run-id", required=True)
    ap.add_argument("--watch", type=int, action="append", default=[], metavar="PID")
    ap.add_argument("--session-nice", default=None, metavar="SID:NICE", help="autogroup to put back")
    ap.add_argument("--run-dir", default=None, help="results folder to rebuild if the watched pids die")
    args = ap.parse_args(argv)
    os.environ.pop(RUN_ID_ENV, None)  # never mark ourselves (nor anything we might start)
    session_nice = None
    if args.session_nice:
        sid, _, nice = args.session_nice.partition(":")
        session_nice = (int(sid), nice)
    report = watch(args.run_id, args.watch, args.run_dir, session_nice)
    print(json.dumps(report), flush=True)
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
