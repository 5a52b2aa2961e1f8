"""The ``testbed`` command."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import traceback
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Cluster CPU-scheduling emulation testbed."
)
err = Console(stderr=True, soft_wrap=True)  # error lines stay whole: people grep them
out = Console()


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"testbed {version('testbed')}")
        except PackageNotFoundError:  # run from a checkout that was never installed
            typer.echo("testbed (not installed: no version)")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print the version and exit")
    ] = False,
) -> None:
    """Cluster CPU-scheduling emulation testbed."""


def _print_json(doc) -> None:
    """``doc`` as indented JSON on stdout, for machines (``--json``): nothing else is printed there."""
    typer.echo(json.dumps(doc, indent=2, default=str))


def _print_table(table) -> None:
    """A table whole: to a terminal at its width (rich wraps the cells), elsewhere (a file, CI's log) at the
    table's natural width, which rich would otherwise squeeze into 80 columns and cut with '…'."""
    if out.is_terminal:
        out.print(table)
        return

    natural = Measurement.get(out, out.options.update(width=10_000), table).maximum
    width = out.width
    out.width = max(width, natural)  # print(width=...) is capped at the console's width
    try:
        out.print(table)
    finally:
        out.width = width


def _sigterm_to_interrupt(signum, frame):
    # SIGTERM takes the same teardown path as Ctrl-C: no worker, cgroup or actor is left behind.
    raise KeyboardInterrupt


def _load(scenario: Path, overrides: list[str] | None):
    """The validated scenario, or exit 2 with the message that names the field and the fix."""
    from testbed.scenario import ScenarioError, load

    try:
        return load(scenario, overrides or [])
    except ScenarioError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)


#: Exit statuses of `testbed run`: 0 every job ended as the scenario planned; 1 an error ended the run (a
#: policy raised); 2 bad input, or a host that cannot run it (nothing was run, or Ray could not start);
#: 3 some job did not end as planned (failed by an error, or killed by anything but duration_s);
#: 130 interrupted.
EXIT_RUN_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_JOBS_FAILED = 3
EXIT_INTERRUPTED = 130


def _fail(message: str, code: int):
    err.print(f"[red]error:[/red] {message}", highlight=False)
    raise typer.Exit(code)


def _preflight(scn, backend: str, out_dir: Path | None, force: bool) -> list[str]:
    """runner.preflight, its refusal as one line and exit 2."""
    from testbed import runner

    try:
        return runner.preflight(scn, backend, out_dir, force)
    except runner.PreflightError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML file")],
    backend: Annotated[
        str, typer.Option(help="ray (real processes) or sim (discrete-event simulator)")
    ] = "ray",
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="override a field: --set scheduler.name=batch (repeatable)"),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="results folder, new or empty (default: a new results/NAME-...)"),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="replace the results folder --out names if it holds a run")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
    prometheus: Annotated[
        bool,
        typer.Option(
            "--prometheus", help="run a local Prometheus on the run's exporters (needs it installed)"
        ),
    ] = False,
) -> None:
    """Run a scenario and write a results folder (events.jsonl, jobs.csv, summary.json).

    Exit status: 0 every job ended as planned; 1 an error ended the run; 2 bad input (nothing run) or
    Ray could not start; 3 some job failed or was killed; 130 interrupted."""
    scn, dest = _checked_run(scenario, backend, set_, out_dir, force, prometheus)
    signal.signal(signal.SIGTERM, _sigterm_to_interrupt)
    # A background job of a script starts with SIGINT ignored (the shell's rule), and Python keeps an
    # inherited ignore: `kill -INT` would be lost and the run go on to its end. A run always stops on it.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    summaries = _run_showing_progress(scn, backend, dest, quiet, prometheus)
    try:
        if scn.sweep:
            _report_sweep(scn, backend, dest, summaries)
        else:
            _report_runs(scn, dest, summaries)
    except KeyboardInterrupt:  # the results are written: Ctrl-C cut only their table short
        _interrupted(scn, dest)


def _checked_run(scenario: Path, backend: str, set_, out_dir: Path | None, force: bool, prometheus: bool):
    """The scenario loaded and checked, and its results folder claimed: (scenario, folder). Exit 2 with
    one line for anything that would stop it."""
    from testbed import runner

    if prometheus:
        from testbed.monitoring.prometheus import INSTALL_HINT, binary

        if binary() is None:
            _fail(f"--prometheus: {INSTALL_HINT}", EXIT_BAD_INPUT)
        set_ = [*(set_ or []), "monitoring.enabled=true"]
    scn = _load(scenario, set_)
    if backend not in runner.BACKENDS:
        _fail(f"--backend: unknown backend '{backend}'; known: {', '.join(runner.BACKENDS)}", EXIT_BAD_INPUT)
    if prometheus and backend != "ray":
        _fail("--prometheus: the simulator has no exporters; use --backend ray", EXIT_BAD_INPUT)
    for note in _preflight(scn, backend, out_dir, force):
        err.print(f"[yellow]note:[/yellow] {note}", highlight=False)
    # Only now, with every check passed, does a results folder appear.
    # Claimed atomically (testbed/results/folder.py): a run that lost the race to another gets one line,
    # exit 2.
    try:
        dest = runner.claim_out(out_dir, force) if out_dir is not None else runner.new_out(scn, backend)
    except runner.PreflightError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    return scn, dest


def _run_showing_progress(scn, backend: str, dest: Path, quiet: bool, prometheus: bool) -> list[dict]:
    """runner.run with a progress bar; how it ended, when not as a whole, as one line and the exit
    status."""

    from testbed import runner

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs  t={task.fields[now]:.1f} s emulated  {task.fields[counts]}"),
        TimeElapsedColumn(),
        console=err,
        disable=quiet,
        transient=False,
    )
    task = progress.add_task(scn.name, total=None, now=0.0, counts="")

    def on_phase(text: str) -> None:
        progress.update(task, description=f"{scn.name}: {text}")

    def on_status(st: dict) -> None:
        counts = " ".join(f"{k}={v}" for k, v in sorted(st["counts"].items()) if k != "pending")
        progress.update(task, total=st["total"], completed=st["final"], now=st["now"], counts=counts)

    try:
        with progress:
            return runner.run(
                scn,
                backend,
                dest,
                on_status=on_status,
                on_phase=on_phase,
                prometheus=prometheus,
                notice=lambda text: progress.console.print(text, highlight=False),
            )
    except KeyboardInterrupt:
        _interrupted(scn, dest)
    except runner.RunFailed as exc:
        out.print(f"results: {dest}", highlight=False)
        _fail(
            str(exc) if exc.exit_code == EXIT_BAD_INPUT else f"the run ended with an error: {exc}",
            exc.exit_code,
        )
    except runner.PreflightError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except Exception as exc:  # noqa: BLE001 - a bug of ours: one line here, the traceback in the folder
        (dest / "error.txt").write_text(traceback.format_exc())
        from testbed.core.events import describe_error

        _fail(f"internal error: {describe_error(exc)} (traceback in {dest / 'error.txt'})", EXIT_RUN_FAILED)


def _interrupted(scn, dest: Path):
    """Ctrl-C: what finished (a sweep's comparison so far), where the partial results are; exit 130."""
    if scn.sweep and (dest / "comparison.csv").exists():
        from testbed.results import comparison

        rows = comparison.read_csv(dest / "comparison.csv")
        _print_table(comparison.table(rows, title=f"{scn.name}: sweep (interrupted)"))
        err.print(f"[yellow]interrupted[/yellow]: the comparison of what finished: {dest / 'comparison.csv'}")
    err.print(f"[yellow]interrupted[/yellow]: cleaned up; partial results in {dest}")
    # All that is left is to exit: a further Ctrl-C would only turn exit 130 into a traceback, or into
    # death by SIGINT while the interpreter finalises.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise typer.Exit(EXIT_INTERRUPTED) from None


def _report_sweep(scn, backend: str, dest: Path, rows: list[dict]) -> None:
    """A sweep's comparison table; exit 3 for each variant that failed or whose jobs did not end as
    planned."""
    from testbed.results import comparison

    title = f"{scn.name}: sweep of {len(rows)} variants, {backend}"
    _print_table(comparison.table(rows, title=title))
    # The report's page has the paper-style figures (a line per group, error bars, units); plots/*.png
    # are one-colour bars per variant. Whole on one line, so the command can be copied.
    figures = f"testbed report {shlex.quote(str(dest))}"
    out.print(f"comparison: {dest / 'comparison.csv'}; figures: {figures}", highlight=False, soft_wrap=True)
    out.print(f"results: {dest}")
    bad = [
        f"variant {r['variant']}: " + (r["error"] or r["not_as_planned"])
        for r in rows
        if r["status"] != comparison.VariantStatus.OK or r.get("not_as_planned")
    ]
    _exit_on(bad)


def _report_runs(scn, dest: Path, summaries: list[dict]) -> None:
    """The run's (or its repetitions') table; exit 3 for each job that did not end as planned."""
    from testbed.results import summary as results

    out.print(results.table(summaries, title=f"{scn.name}: {scn.scheduler.name}, {scn.cluster.nodes} nodes"))
    if len(summaries) > 1:
        _print_repetitions(dest)
    for s in summaries:
        for key in ("envelope_note", "host_memory_note"):
            if s.get(key):
                err.print(f"[yellow]warning:[/yellow] {s[key]}")
        rate = results.rate_warning(s)
        if rate:
            err.print(f"[yellow]warning:[/yellow] {rate}")
        paged = results.paging_warning(s)
        if paged:
            err.print(f"[yellow]warning:[/yellow] {paged}")
    out.print(f"results: {dest}")
    _exit_on([results.unplanned_line(b) for s in summaries for b in s.get("jobs_not_as_planned") or ()])


def _print_repetitions(folder: Path) -> None:
    """The repetitions' seeds and the headline metrics' means with their 95 % confidence intervals."""
    from testbed.results import stats

    try:
        doc = json.loads((folder / stats.REPETITIONS_FILE).read_text())
    except (OSError, ValueError):
        return
    seeds = doc.get("workload_seeds") or []
    seed_text = f"workload seed {seeds[0]} for all" if len(set(seeds)) == 1 else f"workload seeds {seeds}"
    head = f"{doc['repetitions']} repetitions, {seed_text}; mean ± 95 % confidence half-width:"
    out.print(head, highlight=False)
    for m in ("mean_response_time_s", "mean_slowdown", "utilization", "makespan_s"):
        d = doc["metrics"].get(m)
        if d and d.get("ci95_low") is not None:
            half = (d["ci95_high"] - d["ci95_low"]) / 2
            out.print(f"  {m}: {d['mean']:.4g} ± {half:.3g} (stdev {d['stdev']:.3g})", highlight=False)


def _exit_on(problems: list[str]) -> None:
    """Exit 3 with one line per job (or variant) that did not end as planned; nothing when all did."""
    if not problems:
        return
    for line in problems:
        err.print(f"[red]error:[/red] {line}", highlight=False)
    raise typer.Exit(EXIT_JOBS_FAILED)


@app.command("results")
def results_cmd(
    run_dir: Annotated[
        Path, typer.Argument(help="results folder of a run (or of its repetitions or variants)")
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help="print {run folder: summary} as JSON instead of the table")
    ] = False,
) -> None:
    """Rebuild jobs.csv and summary.json from a run's events: any run, real or simulated, including one
    whose driver was killed (its events/*.jsonl are merged into events.jsonl first)."""
    from testbed.core import events
    from testbed.results import summary as results

    if not run_dir.is_dir():
        _fail(f"{run_dir}: no such folder; give a run's results folder", EXIT_BAD_INPUT)
    runs = results.run_folders(run_dir)
    if not runs:
        _fail(f"{run_dir}: holds no run (no events.jsonl or events/*.jsonl below it)", EXIT_BAD_INPUT)
    summaries = []
    for d in runs:
        try:
            summaries.append(results.rebuild(d))
        except (results.ResultsError, events.EventLogError, OSError) as exc:
            _fail(str(exc), EXIT_BAD_INPUT)
        if not as_json:
            out.print(f"rebuilt: {d / 'jobs.csv'}, {d / 'summary.json'}", highlight=False)
    if as_json:
        _print_json({str(d): s for d, s in zip(runs, summaries, strict=True)})
        _exit_on([results.unplanned_line(b) for s in summaries for b in s.get("jobs_not_as_planned") or ()])
        return
    out.print(results.table(summaries, title=f"{run_dir}"))
    for d, s in zip(runs, summaries, strict=True):
        where = "" if d == run_dir else f"{d.relative_to(run_dir)}: "
        out.print(f"{where}ended: {s.get('ended')}", highlight=False)
        if s.get("error"):
            err.print(f"[red]error:[/red] {where}the run ended with an error: {s['error']}", highlight=False)
    _exit_on([results.unplanned_line(b) for s in summaries for b in s.get("jobs_not_as_planned") or ()])


@app.command("report")
def report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="results folder: a run, its repetitions, or a sweep")],
    out_file: Annotated[
        Path | None, typer.Option("--out", help="HTML file to write (default: DIR/report.html)")
    ] = None,
) -> None:
    """Write one self-contained HTML page of a results folder (works offline): a run's Gantt chart per
    node, gang matrix, utilisation, power and queue over time, per-class tables and settings; a sweep's
    metrics against its swept values."""
    from testbed.core.events import EventLogError
    from testbed.results import report

    try:
        path = report.write(run_dir, out_file)
    except (report.ReportError, EventLogError) as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except OSError as exc:
        _fail(f"--out: cannot write {exc.filename}: {exc.strerror}", EXIT_BAD_INPUT)
    out.print(f"report: {path}", highlight=False)


@app.command("compare")
def compare_cmd(
    dirs: Annotated[list[Path], typer.Argument(help="results folders: runs, repetitions or sweeps")],
    out_dir: Annotated[
        Path | None,
        typer.Option("--out", help="new folder for its CSV and report (default: results/compare-DATE)"),
    ] = None,
) -> None:
    """Compare runs across results folders: one table (printed), comparison.csv and report.html, a row per
    run labelled by its folder and sweep variant (repetitions: mean and standard deviation)."""
    import time

    from testbed.results import compare, comparison, report

    try:
        es = compare.entries(dirs)
    except compare.CompareError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    target = out_dir or Path("results") / time.strftime("compare-%Y%m%d-%H%M%S")
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        _fail(f"--out: {target} exists and is not an empty folder; name a new one", EXIT_BAD_INPUT)
    target.mkdir(parents=True, exist_ok=True)
    rows = compare.rows(es)
    comparison.write_csv(target / "comparison.csv", rows)
    page = report.compare_page(rows, f"comparison of {len(rows)} runs", report.compare_warnings(es))
    (target / report.REPORT_FILE).write_text(page)
    # The folder is in the CSV; the terminal's table names each run by its label.
    shown = [{k: v for k, v in r.items() if k != "folder"} for r in rows]
    _print_table(comparison.table(shown, title=f"comparison of {len(rows)} runs"))
    where = f"comparison: {target / 'comparison.csv'}; report: {target / report.REPORT_FILE}"
    out.print(where, highlight=False)


@app.command()
def schedulers(
    name: Annotated[str | None, typer.Argument(help="one scheduler: each parameter in detail")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="as JSON: name, summary, parameters")] = False,
) -> None:
    """List the registered scheduling policies, or one policy's parameters."""
    from testbed.schedulers import registry

    if as_json:
        _schedulers_json(name)
        return
    if name is not None:
        _scheduler_detail(name)
        return
    for sched in registry.all_schedulers():
        params = ", ".join(f"{k}={v}" for k, v in sched.all_defaults().items())
        out.print(f"[bold]{sched.name:<10}[/bold] {sched.summary}  [dim]({params})[/dim]", highlight=False)
    out.print("[dim]testbed schedulers NAME: what each parameter means and accepts[/dim]", highlight=False)


def _schedulers_json(name: str | None) -> None:
    from testbed.schedulers import registry
    from testbed.schedulers.params import describe

    try:
        scheds = [registry.get(name)] if name is not None else registry.all_schedulers()
    except registry.UnknownScheduler as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    docs = [
        {
            "name": sc.name,
            "summary": sc.summary,
            "params": {p: {"default": d, "accepts": a, "meaning": m} for p, d, a, m in describe(sc.Params)},
        }
        for sc in scheds
    ]
    _print_json(docs[0] if name is not None else docs)


def _scheduler_detail(name: str) -> None:
    from testbed.schedulers import registry
    from testbed.schedulers.params import describe

    try:
        sched = registry.get(name)
    except registry.UnknownScheduler as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    out.print(f"[bold]{sched.name}[/bold]: {sched.summary}", highlight=False, soft_wrap=True)
    rows = [("parameter", "default", "accepts", "meaning"), *describe(sched.Params)]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for i, row in enumerate(rows):  # one line per parameter, however narrow the terminal: people grep them
        line = "  ".join([*(row[c].ljust(widths[c]) for c in range(3)), row[3]])
        out.print(f"  [bold]{line}[/bold]" if i == 0 else f"  {line}", highlight=False, soft_wrap=True)


@app.command()
def apps(
    as_json: Annotated[bool, typer.Option("--json", help="as JSON: name, summary, units, fields")] = False,
) -> None:
    """List the registered program kinds (a job's `app: {kind: ...}`) and their fields."""
    from testbed.apps import registry as kinds

    if as_json:
        _print_json(
            [
                {
                    "name": k.name,
                    "summary": k.summary,
                    "reports": list(k.reports.units),
                    "fields": {f: {"default": d, "meaning": h} for f, (d, h) in k.fields().items()},
                }
                for k in kinds.all_kinds()
            ]
        )
        return
    for kind in kinds.all_kinds():
        units = ", ".join(kind.reports.units) or "-"
        line = f"[bold]{kind.name:<10}[/bold] {kind.summary}  [dim](reports: {units})[/dim]"
        out.print(line, highlight=False)
        for name, (default, help_) in kind.fields().items():
            out.print(f"    {name:<14} {default!r:<10} {help_}", highlight=False)


@app.command()
def validate(
    scenario: Path,
    set_: Annotated[list[str] | None, typer.Option("--set")] = None,
    backend: Annotated[str, typer.Option(help="the backend it would run on")] = "ray",
    out_dir: Annotated[Path | None, typer.Option("--out", help="the results folder it would use")] = None,
    force: Annotated[bool, typer.Option("--force", help="as testbed run --force")] = False,
) -> None:
    """Check a scenario file, and everything `testbed run` checks before starting (parameter values, the
    envelope, the CFS quota, the results folder); print the scenario with every default filled in."""

    scn = _load(scenario, set_)
    notes = _preflight(scn, backend, out_dir, force)
    out.print(yaml.safe_dump(scn.model_dump(mode="json"), sort_keys=False), highlight=False)
    for note in notes:
        out.print(f"note: {note}", highlight=False)
    if scn.sweep:
        from testbed.scenario import sweep

        vs = sweep.variants(scn)
        out.print(f"sweep: {len(vs)} variants: {', '.join(v.name for v in vs)}", highlight=False)
        for v in vs:
            for note in v.notes:
                out.print(f"note: {note}", highlight=False)
    # On stderr: stdout stays the effective scenario, a YAML document a program can read back.
    err.print(_validate_summary(scenario, scn, backend), highlight=False, soft_wrap=True)


def _validate_summary(path: Path, scn, backend: str) -> str:
    """validate's last line: it is valid, what it runs, and the envelope and TDF a run would use here."""
    from testbed.scenario import effective_tdf
    from testbed.scenario import sweep as sw
    from testbed.scenario.workload import build

    c = scn.cluster
    variants = sw.variants(scn)
    what = f"{len(variants)} sweep variants" if scn.sweep else f"{len(build(scn))} jobs"
    head = f"ok: {path} is valid: {what} on {c.nodes} nodes, scheduler {scn.scheduler.name}"
    if backend == "sim":
        return f"{head}; in the simulator (envelope modelled, no dilation)"
    from testbed.core.clock import host_cores
    from testbed.emulator.mechanism.envelope import probe_envelopes

    envelope = c.envelope
    if envelope in ("auto", "cgroup"):
        usable = probe_envelopes()
        envelope = next((k for k in ("cgroup-v1", "cgroup-v2") if usable[k] is None), "none")
        if c.envelope == "auto" and envelope == "none":
            envelope = "none (no usable cgroup: the CPU rate is NOT fixed)"
    cpus = c.nodes * c.cores_per_node
    # A variant may have a TDF of its own: its scheduler decides the control plane's reserve.
    tdfs = sorted({effective_tdf(v.scenario) for v in variants} or {effective_tdf(scn)})
    tdf = f"{tdfs[0]:.4g}" if len(tdfs) == 1 else f"{tdfs[0]:.4g}-{tdfs[-1]:.4g} (by variant)"
    return (
        f"{head}; on real processes it would use envelope {envelope} and TDF {tdf} ({cpus} emulated "
        f"CPUs, {host_cores()} host cores)"
    )


dashboards_app = typer.Typer(no_args_is_help=True, help="Grafana dashboards (generated from Python).")
app.add_typer(dashboards_app, name="dashboards")


@dashboards_app.command("generate")
def dashboards_generate(
    out_dir: Annotated[
        Path, typer.Option("--out", help="folder to write them to (default: the current folder)")
    ] = Path("."),
) -> None:
    """Write every dashboard's Grafana JSON (overview.json, node.json, ...) to the current folder or --out;
    the installed package's copies are never touched. The repository's monitoring/dashboards/ is
    regenerated with --out monitoring/dashboards."""
    from testbed.monitoring import dashboards

    for path in dashboards.write_all(out_dir):
        out.print(str(path), highlight=False)


@dashboards_app.command("push")
def dashboards_push(
    url: Annotated[str, typer.Option(help="Grafana base URL, e.g. http://127.0.0.1:3000")],
    token: Annotated[str, typer.Option(help="Grafana service-account token (Editor or Admin)")],
    folder: Annotated[str, typer.Option(help="Grafana folder to put them in")] = "testbed",
) -> None:
    """Upload the dashboards to a Grafana (overwrites earlier versions: dashboard uids are stable)."""
    from testbed.monitoring.grafana import push

    try:
        answers = push(url, token, folder)
    except Exception as exc:  # noqa: BLE001 - one line that says what Grafana answered
        err.print(f"[red]error:[/red] dashboards push to {url}: {type(exc).__name__}: {exc}", highlight=False)
        raise typer.Exit(1) from None
    for a in answers:
        out.print(f"{a.get('status', 'ok')}: {url.rstrip('/')}{a.get('url', '')}", highlight=False)


k8s_app = typer.Typer(no_args_is_help=True, help="Kubernetes manifests (KubeRay) for a scenario.")
app.add_typer(k8s_app, name="k8s")


@k8s_app.command("render")
def k8s_render(
    scenario: Annotated[Path, typer.Argument(help="scenario YAML file")],
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="folder to write (default: k8s-<scenario name>)")
    ] = None,
    image: Annotated[str, typer.Option(help="image every pod runs (k8s/image/Dockerfile)")] = "testbed:0.1.0",
    force: Annotated[bool, typer.Option("--force", help="overwrite a non-empty --out folder")] = False,
) -> None:
    """Write a kustomize folder that runs SCENARIO on KubeRay: `kubectl apply -k FOLDER`."""
    from testbed.deploy import k8s
    from testbed.scenario import ScenarioError

    try:
        files = k8s.render(scenario, image=image)
        target = out_dir or Path(f"k8s-{scenario.stem}")
        paths = k8s.write(files, target, force=force)
    except (ScenarioError, k8s.RenderError) as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    for p in paths:
        out.print(str(p), highlight=False, soft_wrap=True)
    out.print(f"apply with: kubectl apply -k {target}", highlight=False, soft_wrap=True)


@app.command()
def watch(
    run_dir: Annotated[
        Path | None,
        typer.Argument(help="results folder of a running run (default: the newest live one under results/)"),
    ] = None,
    once: Annotated[bool, typer.Option("--once", help="print one snapshot and exit")] = False,
) -> None:
    """Show a running scenario's headline figures live (scrapes its exporters; no Prometheus needed)."""
    from testbed.monitoring import watch as w

    if run_dir is None:
        run_dir, with_targets = w.newest_live_run()
        if run_dir is None:
            plural = "s" if with_targets > 1 else ""
            finished = f" ({with_targets} finished run{plural} there with exporters)" if with_targets else ""
            _fail(
                f"no run is live under results/{finished}: start one on real processes (`testbed run "
                "SCENARIO`, monitoring is on by default), or give a live run's results folder",
                EXIT_RUN_FAILED,
            )
        err.print(f"watching the newest live run: {run_dir}", highlight=False)
    elif w.is_simulated(run_dir):
        _fail(
            f"{run_dir} is a simulator run: the simulator has no live exporters (its events.jsonl and "
            "summary.json are the record); watch follows runs on real processes (--backend ray)",
            EXIT_BAD_INPUT,
        )
    elif not (run_dir / "prometheus" / "targets.json").exists():
        _fail(
            f"no {run_dir}/prometheus/targets.json: give the results folder of a run on real processes with "
            "monitoring enabled",
            EXIT_BAD_INPUT,
        )
    raise typer.Exit(w.watch(run_dir, out, once=once))


@app.command()
def cleanup(
    run_id: Annotated[
        str | None, typer.Option("--run", help="only this run (its id: the cgroup folder's name)")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="say what would be removed; remove nothing")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="the report as JSON")] = False,
) -> None:
    """Remove the worker processes, cgroups and containers that runs whose driver is gone left behind
    (after kill -9, say). A live run (its driver alive) is never touched.

    Exit status: 0 done (or nothing to do); 1 something could not be removed; 2 --run names a live run."""
    from testbed import janitor

    try:
        report = janitor.cleanup_leftovers(run_id, dry_run)
    except janitor.LiveRun as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    if as_json:
        _print_json(report.as_json())
    else:
        out.print(report.sentence(), highlight=False, soft_wrap=True)
        for line in report.errors:
            err.print(f"[red]error:[/red] {line}", highlight=False)
    if report.errors:
        raise typer.Exit(EXIT_RUN_FAILED)


def main() -> None:  # pragma: no cover
    sys.exit(app())


if __name__ == "__main__":  # pragma: no cover
    main()
