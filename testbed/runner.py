"""Scenario -> results folder, on real processes (``ray``) or in the simulator (``sim``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml

from testbed import events as ev
from testbed import results
from testbed.clock import host_cores
from testbed.scenario import Scenario, ScenarioError, effective_tdf
from testbed.workload import build

BACKENDS = ("ray", "sim")


def default_out(scn: Scenario, backend: str) -> Path:
    return Path("results") / f"{scn.name}-{backend}-{time.strftime('%Y%m%d-%H%M%S')}"


def _facts(scn: Scenario, backend: str, tdf: float, envelope: str) -> results.RunFacts:
    c = scn.cluster
    return results.RunFacts(
        nodes=c.nodes,
        cpu_rate=c.cpu_rate,
        cores_per_node=c.cores_per_node,
        idle_watts=c.power.idle_watts,
        busy_watts=c.power.busy_watts,
        tdf=tdf,
        envelope=envelope,
        backend=backend,
        scheduler=scn.scheduler.name,
    )


def run_once(
    scn: Scenario, backend: str, run_dir: Path, on_status=None, on_phase=None, prometheus=False, notice=None
) -> dict:
    """``prometheus``: run a local Prometheus on the run's exporters meanwhile (stopped on every exit
    path); ``notice(text)`` receives lines for the user (where to look)."""
    if backend not in BACKENDS:
        raise ValueError(f"--backend: unknown backend '{backend}'; known: {', '.join(BACKENDS)}")
    # Agents and workers run in other working directories: every path handed to them is absolute.
    run_dir = Path(run_dir).absolute()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "scenario.yaml").write_text(yaml.safe_dump(scn.model_dump(mode="json"), sort_keys=False))
    jobs = build(scn)
    if backend == "sim":
        from testbed.schedulers import registry
        from testbed.sim import simulate

        events = simulate(
            jobs,
            registry.get(scn.scheduler.name),
            scn.scheduler.params,
            nodes=scn.cluster.nodes,
            cpu_rate=scn.cluster.cpu_rate,
            seed=scn.workload.seed,
            duration=scn.duration_s,
            latency_s=scn.cluster.network.latency_us * 1e-6,
            node_memory_mb=scn.cluster.memory_mb,
            bandwidth_Bps=(
                scn.cluster.network.bandwidth_mbps * 1e6 / 8 if scn.cluster.network.bandwidth_mbps else None
            ),
        )
        ev.write_all(events, run_dir / "events.jsonl")
        return results.write(run_dir, events, _facts(scn, "sim", 1.0, "modelled"), {"ended": "simulated"})

    from testbed.cluster import run_ray

    tdf = effective_tdf(scn)
    if scn.cluster.envelope != "none":
        from testbed.mechanism.envelope import quota_us

        c = scn.cluster
        try:
            quota_us(round(c.cfs_period_ms * 1000), c.cpu_rate, c.cores_per_node, tdf)
        except ValueError as exc:
            raise ScenarioError(f"cluster.cfs_period_ms: {exc}") from None
    local_prom = None
    say = notice or (lambda text: None)
    try:
        if scn.monitoring.enabled:
            from testbed.monitoring import prometheus as prom

            d = prom.write_targets(run_dir, None, scrape_interval_s=scn.monitoring.scrape_interval_s)
            if prometheus:
                local_prom = prom.LocalPrometheus(run_dir)
                say(
                    f"Prometheus: {local_prom.start()} (scrapes this run until it ends; data in {d / 'data'})"
                )
            else:
                say(f"metrics: Prometheus config {d / 'prometheus.yml'}; live view: testbed watch {run_dir}")
        facts = run_ray(scn, jobs, run_dir, tdf, on_status=on_status, on_phase=on_phase)
    finally:
        if local_prom is not None:
            local_prom.stop()
        # Whatever happened, the results so far are written from the merged event log.
        merged = run_dir / "events.jsonl"
        if merged.exists():
            evs = list(ev.read_jsonl(merged))
            info = next((e for e in evs if e["kind"] == ev.RUN_INFO and "envelope" in e), {})
            results.write(run_dir, evs, _facts(scn, "ray", tdf, info.get("envelope", "unknown")))
    events = list(ev.read_jsonl(run_dir / "events.jsonl"))
    extra = {
        "ended": facts.get("ended"),
        "run_id": facts.get("run_id"),
        "startup_s": facts.get("startup_s"),
        "phases_s": facts.get("phases_s"),
        "agent_priority": facts.get("agent_priority"),
        "session_priority": facts.get("session_priority"),
        "envelope_note": facts.get("envelope_note"),
        "nodes_down": facts.get("nodes_down"),
        "host_cores": host_cores(),
    }
    return results.write(run_dir, events, _facts(scn, "ray", tdf, facts.get("envelope", "unknown")), extra)


def run(
    scn: Scenario, backend: str, out: Path, on_status=None, on_phase=None, prometheus=False, notice=None
) -> list[dict]:
    """Runs the scenario's repetitions into ``out`` (``out/rep-k`` when more than one) and returns their
    summaries. With a ``sweep``, runs every variant into ``out/<variant>`` instead and returns the
    comparison rows (:func:`testbed.sweep.comparison_rows`), also written to ``out/comparison.csv`` and
    plotted in ``out/plots/``."""
    if scn.sweep:
        return _run_sweep(scn, backend, out, on_status, on_phase, prometheus, notice)
    summaries = []
    for rep in range(scn.repetitions):
        run_dir = out if scn.repetitions == 1 else out / f"rep-{rep + 1}"
        summaries.append(run_once(scn, backend, run_dir, on_status, on_phase, prometheus, notice))
    if scn.repetitions > 1:
        (out / "summaries.json").write_text(json.dumps(summaries, indent=2) + "\n")
    return summaries


def _run_sweep(scn, backend, out, on_status, on_phase, prometheus, notice) -> list[dict]:
    """Each variant (and repetition) in turn. A variant that raises is recorded with its error and the
    sweep goes on; Ctrl-C stops the sweep (each run cleans up after itself) and the comparison of what
    finished is still written before the interrupt goes on up."""
    import traceback

    from testbed import sweep

    if backend not in BACKENDS:
        raise ValueError(f"--backend: unknown backend '{backend}'; known: {', '.join(BACKENDS)}")
    say = notice or (lambda text: None)
    variants = sweep.variants(scn)  # all checked before anything runs
    for v in variants:
        for note in v.notes:
            say(f"note: {note}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "scenario.yaml").write_text(yaml.safe_dump(scn.model_dump(mode="json"), sort_keys=False))
    done = [sweep.VariantResult(v) for v in variants]
    try:
        for i, res in enumerate(done):
            v = res.variant
            tag = f"{v.name} ({i + 1}/{len(variants)})"
            if on_phase:
                on_phase(f"variant {tag}")
            phase = (lambda text, tag=tag: on_phase(f"{tag}: {text}")) if on_phase else None
            vdir = out / v.name
            reps = v.scenario.repetitions
            res.status = sweep.INTERRUPTED
            try:
                for rep in range(reps):
                    run_dir = vdir if reps == 1 else vdir / f"rep-{rep + 1}"
                    res.summaries.append(
                        run_once(v.scenario, backend, run_dir, on_status, phase, prometheus, say)
                    )
                res.status = sweep.OK
            except Exception as exc:  # noqa: BLE001 - recorded with the variant; the sweep goes on
                res.status = sweep.FAILED
                where = f" (repetition {len(res.summaries) + 1})" if reps > 1 else ""
                res.error = f"{type(exc).__name__}: {exc}{where}"
                vdir.mkdir(parents=True, exist_ok=True)
                (vdir / "error.txt").write_text(traceback.format_exc())
                say(f"variant {v.name} failed: {res.error}; the sweep goes on")
            if reps > 1 and res.summaries:
                (vdir / "summaries.json").write_text(json.dumps(res.summaries, indent=2) + "\n")
    finally:
        rows = sweep.write(out, done, title=scn.name)
    return rows
