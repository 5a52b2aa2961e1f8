"""Scenario -> results folder, on real processes (``ray``) or in the simulator (``sim``).

:func:`preflight` checks, before Ray starts, everything that can be checked then (the scheduler's
parameters by building its policies, the envelope, the CFS quota at the run's TDF, the results folder);
``testbed validate`` and ``testbed run`` both call it. A run never writes into a folder that already
holds a run's events, and its summary.json always says how it ended and the error, if any.

A run takes one path on either backend (:func:`run_once`): the backend (the interface is
testbed/core/backend.py) runs it and returns its :class:`~testbed.core.backend.Outcome`; the results are
written from the event log and the outcome; then Ctrl-C goes on up, or :class:`RunFailed` is raised.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import tempfile
import time
import traceback
from pathlib import Path

import yaml

from testbed.apps.wire import MAX_FRAME_BODY
from testbed.core import events as ev
from testbed.core.backend import Backend, Hooks, PreflightError
from testbed.core.clock import host_cores
from testbed.core.interrupts import interrupts_deferred
from testbed.core.jobs import Job
from testbed.emulator import ray_auth
from testbed.emulator.mechanism import docker_envelope
from testbed.emulator.mechanism.envelope import MIN_QUOTA_US, probe_envelopes, probe_pod
from testbed.results import comparison, stats
from testbed.results import folder as outfolder
from testbed.results import summary as results
from testbed.results.dedicated import Dedicated
from testbed.scenario import Scenario, effective_tdf, sweep
from testbed.scenario.swf import TraceError
from testbed.scenario.workload import build, trace_notes
from testbed.schedulers import registry
from testbed.schedulers.base import PolicyConfigError
from testbed.sim import Simulation

BACKENDS = ("ray", "sim")
#: Where results go without --out (relative to the working directory, as the README shows).
DEFAULT_PARENT = Path("results")


class RunFailed(RuntimeError):
    """An error ended the run (a policy raised, Ray could not start, ...). The message is one line; the
    results folder holds what happened until then and summary.json the error. ``exit_code``: 2 when the
    host is the problem (Ray could not start), 1 otherwise."""

    def __init__(self, error: str, run_dir: Path | None = None, exit_code: int = 1) -> None:
        super().__init__(error)
        self.error = error
        self.run_dir = run_dir
        self.exit_code = exit_code


# --------------------------------------------------------------------------------------------------------
# Before anything starts


def preflight(scn: Scenario, backend: str, out: Path | None = None, force: bool = False) -> list[str]:
    """Raises :class:`PreflightError` for what would make the run fail, checked without starting Ray.
    Returns notes the user should see (the automatic envelope falling back to none, say)."""
    if backend not in BACKENDS:
        raise PreflightError(f"--backend: unknown backend '{backend}'; known: {', '.join(BACKENDS)}")
    runs = [("", scn)]
    if scn.sweep:
        runs = [(f"variant '{v.name}': ", v.scenario) for v in sweep.variants(scn)]
    built = []
    for where, s in runs:
        _check_policies(s, where)
        built.append(_check_jobs(s, where))
    notes: list[str] = []
    for where, s in runs:
        _check_repetitions(s, backend, where)
        notes += [f"{where}{n}" for n in trace_notes(s) if f"{where}{n}" not in notes]
    if backend == "ray":
        joined = next((where for where, s in runs if s.cluster.ray_address is not None), None)
        if joined is not None and (problem := ray_auth.joined_cluster_problem()):
            raise PreflightError(f"{joined}{problem}")
        for (where, s), jobs in zip(runs, built, strict=True):
            _check_messages(jobs, where)
            if s.cluster.ray_address is None:  # every node on this host
                _check_memory(jobs, where)
        usable: dict[str, str | None] = probe_envelopes()
        if any(s.cluster.envelope == "docker" for _, s in runs):
            usable["docker"] = docker_envelope.probe()
        if any(s.cluster.envelope == "pod" for _, s in runs):
            usable["pod"] = probe_pod()
        for where, s in runs:
            note = _check_envelope(s, usable, where)
            if note and note not in notes:
                notes.append(note)
    if out is not None:
        check_out(Path(out), force)
    else:
        check_writable(DEFAULT_PARENT, f"results folder {DEFAULT_PARENT}/ (default; --out chooses another)")
    return notes


def _check_repetitions(scn: Scenario, backend: str, where: str) -> None:
    """Repetitions of the simulator with one seed are one deterministic run counted again: refused."""
    if backend == "sim" and scn.repetitions > 1 and not sweep.seeds_vary(scn, backend):
        raise PreflightError(
            f"{where}repetitions: {scn.repetitions} runs of the simulator with one workload seed "
            "(repetition_seeds: same) are one deterministic run counted again; set repetition_seeds: vary "
            "(or auto), or repetitions: 1"
        )


def _check_jobs(scn: Scenario, where: str) -> list[Job]:
    """Builds the workload as the run will: a trace is opened, parsed and checked here (it is read only
    when the jobs are built), and a workload with no job to run is refused. The jobs are kept for the
    run of this very scenario that follows (:func:`_workload`)."""
    global _BUILT
    try:
        jobs = build(scn)
    except TraceError as exc:
        raise PreflightError(f"{where}workload.trace: {exc}") from None
    if not jobs:
        raise PreflightError(
            f"{where}workload: no job to run (a trace's jobs all lack a run time or processors, or "
            "workload.trace.skip passes them all); give jobs the workload can run"
        )
    _BUILT = (scn, jobs)
    return jobs


#: The workload the checks built last: (the scenario object, its jobs). The run of that same scenario takes
#: these jobs instead of building them again (a quarter of a second of the NASA replay's 3.7 s of CPU, issue
#: 23's comparison with AccaSim; docs/measurements.md, "The simulator at trace scale"). A scenario is frozen
#: (its model refuses changes), its jobs too, and a workload is a function of its scenario: they are the
#: jobs a second build gives.
_BUILT: tuple[Scenario, list[Job]] | None = None


def _workload(scn: Scenario) -> list[Job]:
    """``scn``'s jobs: those the checks built for this very scenario object (taken once: a later run builds
    its own), else built now."""
    global _BUILT
    kept, _BUILT = _BUILT, None
    if kept is not None and kept[0] is scn:
        return list(kept[1])
    return build(scn)


def _check_messages(jobs: list[Job], where: str) -> None:
    """A job whose program sends a message beyond what any NIC takes (apps/wire.py MAX_FRAME_BODY) cannot
    run on real processes: its connection would be closed at that message."""
    for job in jobs:
        largest = job.kind.largest_message(job.app, job.spec.size)
        if largest is not None and largest > MAX_FRAME_BODY:
            raise PreflightError(
                f"{where}job '{job.job_id}': app: a message of {largest / 2**20:.1f} MiB, over the "
                f"{MAX_FRAME_BODY // 2**20} MiB a message between real processes may have; make the "
                "program's messages smaller (a divisible task's sigma x unit_bytes, a frame's width x "
                "height), or run it with --backend sim"
            )


def _check_memory(jobs: list[Job], where: str) -> None:
    """A process's memory is allocated for real (apps/worker.py allocate): more than this host has cannot
    be, and memory_mb 1e12 was a MemoryError in every worker of the job."""
    import psutil

    total = psutil.virtual_memory().total / 2**20
    for job in jobs:
        if job.spec.memory_mb > total:
            raise PreflightError(
                f"{where}job '{job.job_id}': memory_mb: {job.spec.memory_mb:g} MiB per process, more than "
                f"this host's {total:.0f} MiB, and each process allocates it for real; lower memory_mb, or "
                "run it with --backend sim"
            )


def _check_policies(scn: Scenario, where: str) -> None:
    """Builds the global policy and one local policy with the scenario's parameters: what the policies
    check when they are built is then refused here, not in a node agent after Ray has started."""

    s = scn.scheduler
    sched = registry.get(s.name)  # the scenario model already checked the name
    try:
        info = scn.cluster.node_info()
        sched.make_global(scn.cluster.nodes, s.params, scn.workload.seed, info)
        sched.make_local(0, s.params, scn.workload.seed, info[0])
    except PolicyConfigError as exc:
        raise PreflightError(where + " ".join(str(exc).split())) from None
    except Exception as exc:  # noqa: BLE001 - a policy that fails to build on these values: say which
        raise PreflightError(
            f"{where}scheduler.params: scheduler '{s.name}' cannot be built with {s.params}: "
            f"{ev.describe_error(exc)}; see `testbed schedulers` for its parameters"
        ) from None


def _check_envelope(scn: Scenario, usable: dict[str, str | None], where: str) -> str | None:

    c = scn.cluster
    if c.envelope == "none":
        return None
    if c.envelope == "auto" and usable["cgroup"] is not None:
        return (
            f"cluster.envelope auto: no usable cgroup here ({usable['cgroup']}); the run uses envelope "
            "none and the CPU rate is NOT fixed"
        )
    kind = "cgroup" if c.envelope == "auto" else c.envelope
    if kind in ("docker", "pod") and usable.get(kind) is not None:
        raise PreflightError(f"{where}cluster.envelope: {usable[kind]}")
    if usable.get(kind) is not None:
        raise PreflightError(
            f"{where}cluster.envelope: {kind} is not available here ({usable[kind]}); run as root with "
            "the cpu and cpuacct controllers mounted read-write, or set cluster.envelope: none "
            "(CPU rate then NOT fixed)"
        )
    tdf = effective_tdf(scn)
    period_us = round(c.cfs_period_ms * 1000)
    rate = c.min_rate()  # the slowest node has the smallest quota
    quota = round(period_us * rate * c.cores_per_node / tdf)
    if quota >= MIN_QUOTA_US:
        return None
    need_ms = math.ceil(MIN_QUOTA_US * tdf / (rate * c.cores_per_node) / 1000)
    why = (
        f"{where}cluster.cfs_period_ms: a node's CPU quota would be {quota} us per {period_us} us period, "
        f"below the kernel's minimum of {MIN_QUOTA_US} us (TDF {tdf:.4g}: {c.nodes} nodes x "
        f"{c.cores_per_node} core(s) at rate {rate:g} on {host_cores()} host cores)"
    )
    if need_ms <= 1000:
        raise PreflightError(f"{why}; raise cluster.cfs_period_ms to at least {need_ms}")
    raise PreflightError(
        f"{why}; no CFS period can give it (the kernel's maximum is 1000 ms): use fewer nodes, or run it "
        "in the simulator (--backend sim)"
    )


# --------------------------------------------------------------------------------------------------------
# The results folder


def check_out(out: Path, force: bool = False) -> None:
    """Refuses a results folder this run cannot use: a file, a folder that already holds something (unless
    ``force``, and then only a finished run's folder holding nothing but what runs write), or a place where
    nothing can be written. :func:`claim_out` checks again as it claims: this is the early, whole answer
    for ``validate``."""
    label = f"--out {out}"
    if out.is_symlink() and not out.exists():
        raise PreflightError(f"{label}: is a link to nothing ({os.readlink(out)}); give a folder")
    if out.exists():
        if not out.is_dir():
            raise PreflightError(f"{label}: is a file, not a folder; give a folder (created if missing)")
        try:
            entries = sorted(os.listdir(out))
        except OSError as exc:
            raise PreflightError(f"{label}: cannot read it ({exc.strerror}); give another folder") from None
        if entries and not force:
            shown = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise PreflightError(
                f"{label}: already holds {len(entries)} {'entry' if len(entries) == 1 else 'entries'} "
                f"({shown}); results are never mixed: give a "
                "new folder, or add --force to replace this one"
            )
        if entries:
            _check_replaceable(out, label)
        _probe_write(out, label)
    else:
        check_writable(out, label)


def _check_replaceable(out: Path, label: str) -> None:
    if not (out / outfolder.MARKER).is_file():
        raise PreflightError(
            f"{label}: --force replaces only a folder a testbed run made (one with its "
            f"{outfolder.MARKER} marker) and this one has none; remove it yourself or give another folder"
        )
    if outfolder.is_live(out):
        raise PreflightError(
            f"{label}: a run is writing it now; --force never replaces a live run's folder: give another"
        )
    foreign = outfolder.foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise PreflightError(
            f"{label}: --force removes only what a testbed run wrote, and this folder also holds "
            f"{len(foreign)} other {'entry' if len(foreign) == 1 else 'entries'} ({shown}); move those "
            "out or give another folder"
        )
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise PreflightError(f"{label}: --force would empty the current folder; give another folder")


def check_writable(path: Path, label: str) -> None:
    """Refuses ``path`` (a folder, created if missing) when nothing can be written there."""
    probe = path.absolute()
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise PreflightError(f"{label}: {probe} is a file, so nothing can be created below it")
    _probe_write(probe, label)


def _probe_write(probe: Path, label: str) -> None:
    # Trying is the only honest test: access() says yes to root on a read-only file system.
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".testbed-check-", dir=probe))
    except OSError as exc:
        raise PreflightError(
            f"{label}: cannot write in {probe} ({exc.strerror or exc}); give a folder you can write to"
        ) from None


def claim_out(out: Path, force: bool = False) -> Path:
    """Claims ``out`` for this run (after :func:`check_out`): created, or with ``force`` emptied of a
    finished run's files; atomically, so two runs never share it (testbed/results/folder.py)."""
    try:
        outfolder.claim(out, force, label=f"--out {out}")
    except outfolder.FolderError as exc:
        raise PreflightError(str(exc)) from None
    return out


def new_out(scn: Scenario, backend: str, parent: Path | None = None) -> Path:
    """A fresh default results folder, claimed now: ``results/NAME-BACKEND-YYYYmmdd-HHMMSS``, then ``-2``,
    ``-3`` ... when another run took that name in the same second (mkdir is atomic: two runs never
    share a folder)."""
    name = re.sub(r"[^A-Za-z0-9._+=-]+", "_", scn.name).strip("._") or "scenario"
    stem = f"{name}-{backend}-{time.strftime('%Y%m%d-%H%M%S')}"
    parent = DEFAULT_PARENT if parent is None else parent
    parent.mkdir(parents=True, exist_ok=True)
    for k in itertools.count(1):
        p = parent / (stem if k == 1 else f"{stem}-{k}")
        try:
            p.mkdir()
        except FileExistsError:
            continue
        return claim_out(p)
    raise AssertionError("unreachable")


def _refuse_used(run_dir: Path) -> None:
    # The lowest level of "never mixed": whoever calls run_once, an earlier run's events stay its own.
    if ev.find_log(run_dir) is not None or any((run_dir / "events").glob("*.jsonl")):
        raise PreflightError(
            f"{run_dir}: already holds a run's events; results are never mixed: give a new folder "
            "(testbed run --force replaces one)"
        )


# --------------------------------------------------------------------------------------------------------
# One run


def run_once(
    scn: Scenario, backend: str, run_dir: Path, on_status=None, on_phase=None, prometheus=False, notice=None
) -> dict:
    """One repetition of ``scn`` on ``backend`` into ``run_dir``; returns its summary. ``prometheus``: run
    a local Prometheus on the run's exporters meanwhile (stopped on every exit path); ``notice(text)``
    receives lines for the user (where to look). Whatever ends the run, its results are written first;
    then Ctrl-C goes on up, and :class:`RunFailed` is raised when an error ended it."""
    if backend not in BACKENDS:
        raise PreflightError(f"--backend: unknown backend '{backend}'; known: {', '.join(BACKENDS)}")
    # Agents and workers run in other working directories: every path handed to them is absolute.
    run_dir = Path(run_dir).absolute()
    _refuse_used(run_dir)
    # Ctrl-C is held for the whole repetition and let through only where the backend says the run may be
    # stopped (core/interrupts.py interruptible): one that lands in the teardown, in the results, or
    # between the two waits for them (it used to leave a run without jobs.csv and summary.json).
    with _claimed(run_dir), interrupts_deferred():
        (run_dir / "scenario.yaml").write_text(yaml.safe_dump(scn.model_dump(mode="json"), sort_keys=False))
        jobs = _workload(scn)
        hooks = Hooks(on_status, on_phase, notice)
        outcome = _backend(backend, prometheus, scn).run_scenario(scn, jobs, run_dir, hooks)
        # The results come from the event log only, with how the run ended.
        summary = results.write(
            run_dir,
            ev.read_jsonl(ev.log_file(run_dir, scn.results.events)),
            results.facts_of(scn, backend, outcome.tdf, outcome.envelope),
            {
                **outcome.summary_fields(),
                results.JOBS_PLANNED: len(jobs),
                results.WORKLOAD_SEED: scn.workload.seed,  # a repetition's own: stated in its results
            },
            Dedicated(scn, jobs, outcome.host_speed_s),
        )
        if outcome.cause is not None and not isinstance(outcome.cause, Exception):
            raise outcome.cause  # Ctrl-C: on up, the results written
        if outcome.error is not None:
            raise RunFailed(outcome.error, run_dir, outcome.exit_code) from outcome.cause
        return summary


def _backend(name: str, prometheus: bool, scn: Scenario) -> Backend:
    """The backend named ``name`` (one of :data:`BACKENDS`)."""
    if name == "sim":
        return Simulation  # the class itself: it builds the simulation of each scenario it is given
    if scn.cluster.ray_address is None:
        ray_auth.enable_for_local_run()  # before Ray is imported: it reads the token once
    from testbed.emulator.backend import RayBackend  # Ray and the mechanism: only for real runs

    return RayBackend(prometheus=prometheus)


@contextlib.contextmanager
def _claimed(path: Path):
    """``path`` claimed for the block: a caller that claimed it already (the CLI, a sweep) keeps it;
    otherwise it is claimed here and freed when the block ends."""
    if outfolder.held(path):
        yield
        return
    claim = outfolder.held(claim_out(path))
    try:
        yield
    finally:
        claim.release()


def run(
    scn: Scenario, backend: str, out: Path, on_status=None, on_phase=None, prometheus=False, notice=None
) -> list[dict]:
    """Runs the scenario's repetitions into ``out`` (``out/rep-k`` when more than one) and returns their
    summaries. With a ``sweep``, runs every variant into ``out/<variant>`` instead and returns the
    comparison rows (:func:`testbed.results.comparison.comparison_rows`), also written to
    ``out/comparison.csv`` and
    plotted in ``out/plots/``."""
    if scn.sweep:
        with _claimed(out):
            return _run_sweep(scn, backend, out, on_status, on_phase, prometheus, notice)
    if scn.repetitions == 1:
        return [run_once(scn, backend, out, on_status, on_phase, prometheus, notice)]
    summaries = []
    with _claimed(out):
        for rep in range(scn.repetitions):
            one = sweep.repetition(scn, rep, backend)
            summaries.append(
                run_once(one, backend, out / f"rep-{rep + 1}", on_status, on_phase, prometheus, notice)
            )
        (out / "summaries.json").write_text(json.dumps(summaries, indent=2) + "\n")
        _write_repetitions(out, summaries, notice)
    return summaries


def _write_repetitions(folder: Path, summaries: list[dict], notice=None) -> None:
    """``folder/repetitions.json``: each repetition's seed and each metric's mean, stdev and 95 % interval;
    repetitions that all ended with the same jobs.csv are said to be identical, there and to the user."""
    reps = [folder / f"rep-{k + 1}" for k in range(len(summaries))]
    same = stats.identical(reps)
    seeds = [s.get(results.WORKLOAD_SEED) for s in summaries]
    doc = stats.repetitions_doc(summaries, seeds, same, [*comparison.METRICS, *comparison.OPTIONAL_METRICS])
    stats.write_repetitions(folder, doc)
    if same and notice is not None:
        notice(
            f"warning: {folder}: the {len(summaries)} repetitions ended with identical jobs.csv files "
            f"(workload seeds {sorted(set(seeds))}): their spread is 0 by construction, not a measurement"
        )


def _run_sweep(scn, backend, out, on_status, on_phase, prometheus, notice) -> list[dict]:
    """Each variant (and repetition) in turn. A variant that raises is recorded with its error and the
    sweep goes on; Ctrl-C stops the sweep (each run cleans up after itself) and the comparison of what
    finished is still written before the interrupt goes on up."""

    if backend not in BACKENDS:
        raise PreflightError(f"--backend: unknown backend '{backend}'; known: {', '.join(BACKENDS)}")
    say = notice or (lambda text: None)
    variants = sweep.variants(scn)  # all checked before anything runs
    for v in variants:
        for note in v.notes:
            say(f"note: {note}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.yaml").write_text(yaml.safe_dump(scn.model_dump(mode="json"), sort_keys=False))
    done = [comparison.VariantResult(v) for v in variants]
    try:
        for i, res in enumerate(done):
            v = res.variant
            tag = f"{v.name} ({i + 1}/{len(variants)})"
            if on_phase:
                on_phase(f"variant {tag}")
            phase = (lambda text, tag=tag: on_phase(f"{tag}: {text}")) if on_phase else None
            vdir = out / v.name
            reps = v.scenario.repetitions
            res.status = comparison.VariantStatus.INTERRUPTED
            try:
                # The variant's folder is a run's, marked, even when its repetitions are folders below it.
                claim_out(vdir)
                for rep in range(reps):
                    run_dir = vdir if reps == 1 else vdir / f"rep-{rep + 1}"
                    one = sweep.repetition(v.scenario, rep, backend)
                    res.summaries.append(run_once(one, backend, run_dir, on_status, phase, prometheus, say))
                res.status = comparison.VariantStatus.OK
            except Exception as exc:  # noqa: BLE001 - recorded with the variant; the sweep goes on
                res.status = comparison.VariantStatus.FAILED
                where = f" (repetition {len(res.summaries) + 1})" if reps > 1 else ""
                what = str(exc) if isinstance(exc, RunFailed) else f"{type(exc).__name__}: {exc}"
                res.error = f"{what}{where}"
                vdir.mkdir(parents=True, exist_ok=True)
                (vdir / "error.txt").write_text(traceback.format_exc())
                say(f"variant {v.name} failed: {res.error}; the sweep goes on")
            if reps > 1 and res.summaries:
                (vdir / "summaries.json").write_text(json.dumps(res.summaries, indent=2) + "\n")
                _write_repetitions(vdir, res.summaries, say)
    finally:
        rows = comparison.write(out, done, title=scn.name)
    return rows
