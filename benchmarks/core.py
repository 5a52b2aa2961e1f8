"""Core figures of the testbed on this host: gang switch skew, control overhead, CPU-rate error, tbcomm
latency, start-up time and memory per emulated node (16 nodes).

``python benchmarks/core.py [--quick] [--reps N] [--only PARTS] [--per-process 1,2,4,8,16]``

Every run brings up a local Ray instance with 16 NodeAgents, runs a few compute-bound size-16 jobs of the
synthetic app and tears everything down; figures are read from the run's ``events.jsonl`` and
``summary.json`` (docs/architecture.md, "The event log is the truth"). Times are emulated unless marked real.
Every run-based figure is taken over ``--reps`` runs (default 3). The last line printed is one JSON object
with the figures; a figure that could not be measured is an ``"error: ..."`` string there, never a guess.

* gang_skew_p99_ms: per gang slot, latest minus earliest node's switch *effect* (CLOCK_MONOTONIC after
  the node's last kill() of the switch), p99 over every slot of a steady gang run (mpl 2, 100 ms quanta,
  two 16-rank jobs of 3 s CPU each); nothing ignored. The worst of the runs (each must hold).
* min_quantum_ms: smallest swept quantum whose gang makespan (median of the runs) is within 5 % of the
  same jobs' batch makespan (median of the runs, measured in the same invocation). The batch baseline
  must itself be within 5 % of ideal (2.0 s): ``batch_baseline_ratio`` says how close it is.
* control_cpu_share: CPU of the agents' processes + the coordinator's (every thread) over host CPU in
  the 100 ms gang runs (median).
* cpu_rate_error_max(_none): worst node's |delivered - configured| / configured in the 3 s full-load probe
  (all 16 nodes flat out at once), with the cgroup envelope (worst of the skew runs) and with none.
* tbcomm_latency_ratio: tbcomm one-way latency / raw loopback TCP (benchmarks/tbcomm_latency.py, raw
  and tbcomm interleaved in one run).
* startup_s: wall time from spawning ``testbed run`` to the first job_started event (real s), median.
* mem_per_node_mb: PSS of every descendant of this process except worker processes, per node.

``--envelope docker`` (part ``envelopes``, not in the default set) compares that envelope with cgroup on
the same runs, interleaved (cgroup, docker, cgroup, ...): per run of a 100 ms gang scenario with a 3 s
probe, the CPU-rate error (worst node), gang skew p99, start-up (driver start to first job running,
real s, the run's own ``startup_s``) and memory per node: PSS of the control processes (as
mem_per_node_mb) plus, for docker, of each container's containerd shim and resident process (children of
the daemon, not of this process). Medians over ``--reps``; the JSON line gets ``envelopes``.

``--only per_process`` (not in the default set) measures control share, skew and start-up for each
``cluster.nodes_per_process`` of ``--per-process``: how its default was chosen.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import yaml

NODES = 16
OVERHEAD_LIMIT = 0.05
SWEEP_MS = (200, 100, 50, 20, 10)
SWEEP_QUICK_MS = (100, 20)
#: Real-seconds guard for one run (a 16-node run here takes 30-90 s).
WALL_LIMIT_S = 900.0

# The targets (16 nodes, 2-core host), of issues 2 and 9. Each: (comparison, value, where it comes from).
TARGETS: dict[str, tuple[str, float | None, str]] = {
    "gang_skew_p99_ms": ("<=", 1.0, "issue 2; paper 000 assumes 1 ms"),
    "min_quantum_ms": ("<=", 20.0, "issue 2: smallest quantum with control overhead <= 5 %"),
    "control_cpu_share": ("<=", 0.05, "issue 2: agents + coordinator CPU / host CPU"),
    "cpu_rate_error_max": ("<=", 0.05, "issue 2: cgroup envelope at full load"),
    "cpu_rate_error_max_none": ("", None, "issue 2: reported for comparison, no target"),
    "tbcomm_latency_ratio": ("<=", 3.0, "issue 2: tbcomm / raw loopback TCP one-way"),
    "startup_s": ("<=", 10.0, "issue 2: testbed start to first job running"),
    "mem_per_node_mb": ("<=", 150.0, "issue 2: PSS per node, agent + its share of Ray"),
    "batch_baseline_ratio": ("<=", 1.05, "issue 9: the batch baseline's makespan / ideal"),
}
KEYS = list(TARGETS)


def say(text: str = "") -> None:
    print(text, flush=True)


def pct(vals: list[float], q: float) -> float | None:
    """Nearest-rank percentile (as testbed.results.summary)."""
    if not vals:
        return None
    s = sorted(vals)
    return s[max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))]


def err_str(exc: BaseException) -> str:
    """One line: the exception's first line, and its last where they differ (a Ray task error carries
    the remote traceback, whose last line names the real cause)."""
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if ln.strip()]
    text = type(exc).__name__
    if lines:
        text += f": {lines[0][:150]}" + (f" ... {lines[-1][:200]}" if len(lines) > 1 else "")
    return f"error: {text}"


# --------------------------------------------------------------------------------------------------------
# Scenarios and runs


def compute_jobs(n: int, iterations: int, gcomp: float, size: int = NODES) -> list[dict]:
    return [
        {"id": f"cpu-{i}", "submit_s": 0.0, "size": size, "app": {"iterations": iterations, "gcomp": gcomp}}
        for i in range(n)
    ]


def scenario_doc(
    name: str,
    scheduler: str,
    params: dict,
    jobs: list[dict],
    rate_probe_s: float = 0.5,
    envelope: str = "auto",
    per_process: int | None = None,
) -> dict:
    cluster = {"nodes": NODES, "envelope": envelope}
    if per_process is not None:
        cluster["nodes_per_process"] = per_process
    return {
        "name": name,
        "cluster": cluster,
        "clock": {"rate_probe_s": rate_probe_s},
        "scheduler": {"name": scheduler, "params": params},
        "workload": {"seed": 1, "jobs": jobs},
        "wall_limit_s": WALL_LIMIT_S,
    }


def gang_params(quantum_ms: float) -> dict:
    return {"mpl": 2, "quantum_ms": quantum_ms, "lead_ms": min(25.0, quantum_ms / 2)}


class Run:
    """One run_once on Ray into ``base/label``; keeps whatever results exist even if it failed."""

    def __init__(self, base: Path, label: str, doc: dict, on_status=None) -> None:
        from testbed.core import events as ev
        from testbed.runner import run_once
        from testbed.scenario import load

        self.label = label
        self.dir = base / label
        self.summary: dict | None = None
        self.events: list[dict] | None = None
        self.error: str | None = None
        if hasattr(on_status, "run_dir"):
            on_status.run_dir = self.dir
        t = time.monotonic()
        try:
            self.summary = run_once(load(doc=doc), "ray", self.dir, on_status=on_status)
        except BaseException as exc:  # noqa: BLE001 - one failed run must not end the benchmark
            if isinstance(exc, KeyboardInterrupt):
                raise
            self.error = err_str(exc)
            say(f"  [{label}] run failed: {self.error}")
        self.real_s = time.monotonic() - t
        merged = self.dir / "events.jsonl"
        if merged.exists():
            self.events = list(ev.read_jsonl(merged))
        if self.summary is None and (self.dir / "summary.json").exists():
            self.summary = json.loads((self.dir / "summary.json").read_text())
        if self.summary is not None:
            s = self.summary
            say(
                f"  [{label}] {self.real_s:.0f} s real; ended: {s.get('ended')};"
                f" jobs {s.get('jobs_by_state')};"
                f" makespan {fmt(s.get('makespan_s'), ' s', 3)};"
                f" utilisation {fmt(s.get('utilization'), '', 3)};"
                f" TDF {fmt(s.get('tdf'), '', 2)};"
                f" envelope {s.get('envelope')}"
            )
        for why in failures(self.events or []):
            say(f"  [{label}] {why}")

    def need(self) -> list[dict]:
        if self.events is None:
            raise RuntimeError(f"{self.label}: no event log ({self.error or 'run produced none'})")
        return self.events

    def completed_makespan(self) -> float:
        from testbed.results.summary import COMPLETED

        s = self.summary
        if self.error is not None or s is None:
            raise RuntimeError(f"{self.label}: run failed ({self.error or 'no summary'})")
        done = s["jobs_by_state"].get(COMPLETED, 0)
        if s["jobs"] == 0 or done != s["jobs"]:
            raise RuntimeError(f"{self.label}: only {done}/{s['jobs']} jobs completed ({s.get('ended')})")
        return float(s["makespan_s"])


def failures(events: list[dict]) -> list[str]:
    """Why jobs failed or were killed, as recorded in the event log."""
    from testbed.core import events as ev

    kinds = (ev.JOB_FAILED, ev.JOB_KILLED, ev.JOB_REJECTED)
    return [f"{e['kind']} {e.get('job')}: {e.get('reason', '')}" for e in events if e["kind"] in kinds]


def run(base: Path, label: str, doc: dict, on_status=None) -> Run:
    """A run, retried once if it failed (a loaded shared host, or another user's cleanup, can kill one);
    the retry is printed."""
    r = Run(base, label, doc, on_status)
    if r.error is not None:
        say(f"  [{label}] retrying once")
        r = Run(base, f"{label}-retry", doc, on_status)
    return r


def fmt(v, unit: str = "", nd: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:.{nd}f}{unit}"


# --------------------------------------------------------------------------------------------------------
# Figures from event logs


def skew_figures(events: list[dict]) -> dict:
    from testbed.core import events as ev
    from testbed.results.summary import slot_skews_ms

    skews = slot_skews_ms(events)
    if not skews:
        raise RuntimeError("no slot seen by 2+ nodes")
    sw = [e for e in events if e["kind"] == ev.SLOT_SWITCH]
    late = [e["late_ms"] for e in sw if e.get("late_ms") is not None]
    notice = [e["notice_ms"] for e in sw if e.get("notice_ms") is not None]
    per_slot: dict[int, int] = {}
    for e in sw:
        per_slot[e["slot"]] = per_slot.get(e["slot"], 0) + 1
    return {
        "slots": len(skews),
        "p50": pct(skews, 50),
        "p99": pct(skews, 99),
        "max": max(skews),
        "late_p50": pct(late, 50),
        "late_p99": pct(late, 99),
        "late_max": max(late) if late else None,
        "notice_min": min(notice) if notice else None,
        "incomplete_slots": sum(1 for c in per_slot.values() if c != NODES),
    }


def rate_error(events: list[dict]) -> tuple[float, list[dict]]:
    from testbed.core import events as ev

    probes = [e for e in events if e["kind"] == ev.RATE_PROBE]
    if not probes:
        raise RuntimeError("no rate_probe events")
    if len(probes) != NODES:
        raise RuntimeError(f"{len(probes)} rate_probe events for {NODES} nodes")
    errs = [abs(p["delivered"] - p["configured"]) / p["configured"] for p in probes]
    return max(errs), probes


def control_share(events: list[dict], cores: int) -> dict:
    """CPU of the agents' processes and the coordinator's over host CPU. Agents sharing a process
    (cluster.nodes_per_process) each report that process's CPU: counted once per pid."""
    from testbed.core import events as ev

    infos = [e for e in events if e["kind"] == ev.RUN_INFO and e.get("control_cpu_s") is not None]
    agents = [e for e in infos if str(e.get("src", "")).startswith("node")]
    coord = [e for e in infos if e.get("src") == "coordinator"]
    if len(agents) != NODES or len(coord) != 1:
        raise RuntimeError(f"control run_info from {len(agents)} agents and {len(coord)} coordinators")
    per_pid: dict = {}
    for e in agents:
        key = e.get("pid", e["node"])
        per_pid[key] = max(per_pid.get(key, 0.0), e["control_cpu_s"])
    agents_cpu = sum(per_pid.values())
    cpu = agents_cpu + coord[0]["control_cpu_s"]
    wall = max(e["control_wall_s"] for e in infos)
    return {
        "share": cpu / (wall * cores),
        "cpu_s": cpu,
        "agents_cpu_s": agents_cpu,
        "agent_processes": len(per_pid),
        "coordinator_cpu_s": coord[0]["control_cpu_s"],
        "wall_s": wall,
    }


# --------------------------------------------------------------------------------------------------------
# Memory: sampled once while jobs run


class MemorySampler:
    def __init__(self) -> None:
        self.result: dict | None = None
        self.error: str | None = None
        self.run_dir: Path | None = None

    def __call__(self, st: dict) -> None:
        if self.result is not None or self.error is not None or self.run_dir is None:
            return
        if not st["counts"].get("running"):
            return
        try:
            self._sample(st)
        except Exception as exc:  # noqa: BLE001 - reported as the figure's error
            self.error = err_str(exc)

    def _agent_pids(self) -> list[int]:
        pids = []
        for f in sorted((self.run_dir / "events").glob("node*.jsonl")):
            from testbed.core import events as ev

            for e in ev.read_jsonl(f):
                if e["kind"] == ev.RUN_INFO and e.get("pid"):
                    pids.append(int(e["pid"]))
                    break
        return pids

    def _sample(self, st: dict) -> None:
        import psutil

        from testbed.emulator.mechanism.accounting import rss_pss_mb

        me = psutil.Process(os.getpid())
        procs = me.children(recursive=True)
        workers, control = [], []
        for p in procs:
            try:
                cmd = " ".join(p.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            (workers if "testbed.apps." in cmd else control).append(p)
        if len(workers) < NODES and st["now"] < 1.5:
            return  # ranks still starting: sample at a later status call
        total_pss = total_rss = 0.0
        by_pid: dict[int, float] = {}
        for p in control:
            try:
                rss, pss = rss_pss_mb(p.pid)
            except ProcessLookupError:
                continue
            total_pss += pss
            total_rss += rss
            by_pid[p.pid] = pss
        agents = [by_pid[p] for p in self._agent_pids() if p in by_pid]
        self.result = {
            "at_emulated_s": st["now"],
            "processes": len(by_pid),
            "workers_excluded": len(workers),
            "pss_mb": total_pss,
            "rss_mb": total_rss,
            "per_node_mb": total_pss / NODES,
            "agents_found": len(agents),
            "agent_mean_pss_mb": statistics.mean(agents) if agents else None,
        }


# --------------------------------------------------------------------------------------------------------
# The measurements


def measure_skew_and_rate(base: Path, out: dict, reps: int) -> None:
    say(
        f"\n== gang switch skew (16 nodes, mpl 2, quantum 100 ms, 2 x 16 ranks x 3 s CPU), "
        f"CPU rate with the cgroup envelope (3 s probe); {reps} runs =="
    )
    doc = scenario_doc("bench-skew", "gang", gang_params(100), compute_jobs(2, 60, 50), rate_probe_s=3.0)
    p99s, errs = [], []
    for i in range(reps):
        r = run(base, f"skew-{i + 1}", doc)
        try:
            f = skew_figures(r.need())
            p99s.append(f["p99"])
            say(
                f"  run {i + 1}: skew over {f['slots']} slots: p50 {f['p50']:.3f} ms, p99 {f['p99']:.3f} ms,"
                f" max {f['max']:.3f} ms (emulated); slots not seen by all {NODES} nodes: "
                f"{f['incomplete_slots']}; lateness p99 {fmt(f['late_p99'], ' ms', 3)}"
            )
        except Exception as exc:  # noqa: BLE001
            say(f"  run {i + 1}: gang_skew_p99_ms: {err_str(exc)}")
        try:
            e, probes = rate_error(r.need())
            errs.append(e)
            dl = [p["delivered"] for p in probes]
            say(
                f"  run {i + 1}: CPU rate (cgroup): configured {probes[0]['configured']:.4f} core/node, "
                f"delivered {min(dl):.4f}-{max(dl):.4f}; worst error {e * 100:.2f} %"
            )
        except Exception as exc:  # noqa: BLE001
            say(f"  run {i + 1}: cpu_rate_error_max: {err_str(exc)}")
    out["gang_skew_p99_ms"] = round(max(p99s), 3) if len(p99s) == reps else "error: not every run measured"
    out["gang_skew_p99_ms_runs"] = [round(x, 3) for x in p99s]
    out["cpu_rate_error_max"] = round(max(errs), 4) if errs else "error: no probe measured"


def measure_rate_none(base: Path, out: dict) -> None:
    say("\n== CPU rate without an envelope (envelope none, 3 s probe) ==")
    doc = scenario_doc(
        "bench-rate-none", "batch", {}, compute_jobs(1, 2, 10), rate_probe_s=3.0, envelope="none"
    )
    r = run(base, "rate-none", doc)
    try:
        e, probes = rate_error(r.need())
        out["cpu_rate_error_max_none"] = round(e, 4)
        cfg = probes[0]["configured"]
        dl = [p["delivered"] for p in probes]
        say(
            f"  CPU rate (none): configured {cfg:.4f} core/node, delivered {min(dl):.4f}-{max(dl):.4f}; "
            f"worst error {e * 100:.2f} %"
        )
    except Exception as exc:  # noqa: BLE001
        out["cpu_rate_error_max_none"] = err_str(exc)
        say(f"  cpu_rate_error_max_none: {out['cpu_rate_error_max_none']}")


def measure_sweep(base: Path, out: dict, quanta: tuple[int, ...], reps: int) -> None:
    from testbed.core.clock import host_cores

    say(
        f"\n== control overhead: 2 x 16 ranks x 1 s CPU; batch vs gang, quantum {quanta} ms; {reps} runs "
        "each, interleaved (batch, then each quantum, then again) =="
    )
    jobs = compute_jobs(2, 20, 50)
    ideal = 2.0  # two 1 s jobs back to back on the whole cluster
    mem = MemorySampler()
    batch: list[float] = []
    gang: dict[int, list[float]] = {q: [] for q in quanta}
    skews: dict[int, list[float]] = {q: [] for q in quanta}
    controls: list[dict] = []
    errors: list[str] = []
    for i in range(reps):
        # Interleaved: a shared host's load drifts over minutes, and each figure is a ratio to batch.
        r = run(base, f"batch-{i + 1}", scenario_doc("bench-batch", "batch", {}, jobs), on_status=mem)
        try:
            batch.append(r.completed_makespan())
            say(f"  batch run {i + 1}: makespan {batch[-1]:.3f} s (ideal {ideal:.3f} s)")
        except Exception as exc:  # noqa: BLE001
            errors.append(err_str(exc))
            say(f"  batch run {i + 1} failed: {errors[-1]}")
        for q in quanta:
            r = run(
                base, f"gang-q{q}-{i + 1}", scenario_doc(f"bench-gang-q{q}", "gang", gang_params(q), jobs)
            )
            try:
                gang[q].append(r.completed_makespan())
                skews[q].append(skew_figures(r.need())["p99"])
                say(
                    f"  Q {q:>3} ms run {i + 1}: makespan {gang[q][-1]:.3f} s, skew p99 {skews[q][-1]:.3f} ms"
                )
            except Exception as exc:  # noqa: BLE001
                say(f"  Q {q:>3} ms run {i + 1}: {err_str(exc)}")
            if q == 100:
                try:
                    controls.append(control_share(r.need(), host_cores()))
                except Exception as exc:  # noqa: BLE001
                    say(f"  control share, run {i + 1}: {err_str(exc)}")
    if mem.result is not None:
        m = mem.result
        out["mem_per_node_mb"] = round(m["per_node_mb"], 1)
        say(
            f"  memory at t={m['at_emulated_s']:.2f} s: {m['processes']} processes (workers excluded: "
            f"{m['workers_excluded']}), PSS {m['pss_mb']:.0f} MB (RSS {m['rss_mb']:.0f} MB) -> "
            f"{m['per_node_mb']:.1f} MB PSS per node; agents' own PSS mean "
            f"{fmt(m['agent_mean_pss_mb'], ' MB', 1)} ({m['agents_found']} agents)"
        )
    else:
        out["mem_per_node_mb"] = mem.error or "error: no sample taken while jobs ran"
    if not batch:
        out["min_quantum_ms"] = f"error: no batch baseline: {'; '.join(errors)}"
        out["batch_baseline_ratio"] = out["min_quantum_ms"]
    else:
        base_ms = statistics.median(batch)
        out["batch_baseline_ratio"] = round(base_ms / ideal, 3)
        say(
            f"  batch baseline: median {base_ms:.3f} s of {len(batch)} runs "
            f"({', '.join(f'{x:.3f}' for x in batch)}), {base_ms / ideal:.3f} x ideal"
        )
        say("\n  Q (ms) | makespans (s)           | median | overhead | skew p99 (ms, worst)")
        ok, measured = [], []
        for q in quanta:
            if not gang[q]:
                say(f"  {q:>6} | no completed run")
                continue
            med = statistics.median(gang[q])
            over = med / base_ms - 1.0
            measured.append(q)
            if over <= OVERHEAD_LIMIT:
                ok.append(q)
            runs = ", ".join(f"{x:.3f}" for x in gang[q])
            say(f"  {q:>6} | {runs:<23} | {med:6.3f} | {over * 100:+7.1f} % | {fmt(max(skews[q] or [None]))}")
        out["quantum_overhead"] = {
            str(q): round(statistics.median(gang[q]) / base_ms - 1, 4) for q in quanta if gang[q]
        }
        if ok:
            out["min_quantum_ms"] = min(ok)
            bad_above = [q for q in measured if q > min(ok) and q not in ok]
            if bad_above:
                say(f"  note: overhead not monotone: {bad_above} ms exceeded 5 % while {min(ok)} ms met it")
        elif measured:
            swept = ", ".join(map(str, measured))
            out["min_quantum_ms"] = f"above {max(measured)}: none of the swept quanta ({swept} ms) met 5 %"
        else:
            out["min_quantum_ms"] = "error: no gang run of the sweep completed"
    if controls:
        c = sorted(controls, key=lambda c: c["share"])[len(controls) // 2]
        runs = ", ".join(f"{x['share'] * 100:.1f} %" for x in controls)
        out["control_cpu_share"] = round(c["share"], 4)
        out["control_cpu_share_runs"] = [round(x["share"], 4) for x in controls]
        say(
            f"  control CPU (Q 100 ms, median run): agents {c['agents_cpu_s']:.2f} s in "
            f"{c['agent_processes']} processes + coordinator {c['coordinator_cpu_s']:.2f} s over "
            f"{c['wall_s']:.1f} s real x {host_cores()} cores = {c['share'] * 100:.1f} % of the host "
            f"(runs: {runs})"
        )
    else:
        out["control_cpu_share"] = (
            "error: no 100 ms gang run measured it" if 100 in quanta else "not measured"
        )


def startup_once(base: Path, label: str, per_process: int | None = None) -> tuple[float, dict]:
    """(real s from spawning `testbed run` to its first job_started, the run's summary)."""
    from testbed.core import events as ev

    d = base / label
    d.mkdir(parents=True, exist_ok=True)
    cluster = {"nodes": NODES}
    if per_process is not None:
        cluster["nodes_per_process"] = per_process
    doc = {
        "name": "bench-startup",
        "cluster": cluster,
        "scheduler": {"name": "batch", "params": {}},
        "workload": {"seed": 1, "jobs": compute_jobs(1, 2, 10)},
        "wall_limit_s": WALL_LIMIT_S,
    }
    path = d / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = d / "out"
    exe = Path(sys.executable).with_name("testbed")
    argv = [str(exe) if exe.exists() else "testbed", "run", str(path), "--out", str(res), "-q"]
    t_spawn = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=WALL_LIMIT_S)
    if not (res / "events.jsonl").exists():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"testbed run exited {proc.returncode} without events: {tail[0]}")
    started = [e for e in ev.read_jsonl(res / "events.jsonl") if e["kind"] == ev.JOB_STARTED]
    if not started:
        raise RuntimeError(f"no job_started event (testbed run exited {proc.returncode})")
    s = json.loads((res / "summary.json").read_text()) if (res / "summary.json").exists() else {}
    return min(e["wall"] for e in started) - t_spawn, s


def measure_startup(base: Path, out: dict, reps: int) -> None:
    say(
        "\n== start-up: `testbed run` to the first job running (16 nodes, default clock: 1 s probe); "
        f"{reps} runs =="
    )
    got = []
    for i in range(reps):
        try:
            t, s = startup_once(base, f"startup-{i + 1}")
            got.append(t)
            phases = ", ".join(f"{k} {v:.2f}" for k, v in (s.get("phases_s") or {}).items())
            say(f"  run {i + 1}: first job running {t:.2f} s after spawn; phases (s): {phases}")
        except Exception as exc:  # noqa: BLE001
            say(f"  run {i + 1}: {err_str(exc)}")
    out["startup_s"] = round(statistics.median(got), 2) if got else "error: no run started a job"
    out["startup_s_runs"] = [round(x, 2) for x in got]


def measure_per_process(base: Path, out: dict, values: list[int]) -> None:
    """For each nodes_per_process: control share and skew of one 100 ms gang run, and one start-up."""
    from testbed.core.clock import host_cores

    say(f"\n== nodes per actor process: {values} (one gang run, Q 100 ms, and one start-up each) ==")
    jobs = compute_jobs(2, 20, 50)
    rows = {}
    for k in values:
        row: dict = {}
        r = run(base, f"pp{k}", scenario_doc(f"bench-pp{k}", "gang", gang_params(100), jobs, per_process=k))
        try:
            row["control_cpu_share"] = round(control_share(r.need(), host_cores())["share"], 4)
            row["gang_skew_p99_ms"] = round(skew_figures(r.need())["p99"], 3)
            row["makespan_s"] = round(r.completed_makespan(), 3)
        except Exception as exc:  # noqa: BLE001
            row["error"] = err_str(exc)
        try:
            row["startup_s"] = round(startup_once(base, f"pp{k}-startup", k)[0], 2)
        except Exception as exc:  # noqa: BLE001
            row["startup_error"] = err_str(exc)
        rows[str(k)] = row
        say(f"  {k:>2} per process: {row}")
    out["per_process"] = rows


class ContainerMemory:
    """Once jobs run: PSS of the docker envelope's per-node processes outside this process's tree (each
    container's resident and its containerd-shim), found by the run id label."""

    def __init__(self) -> None:
        self.result: dict | None = None
        self.error: str | None = None
        self.run_dir: Path | None = None

    def __call__(self, st: dict) -> None:
        if self.result is not None or self.error is not None or not st["counts"].get("running"):
            return
        try:
            import psutil

            from testbed.emulator.mechanism import docker_envelope as de
            from testbed.emulator.mechanism.accounting import rss_pss_mb

            run_id = next(
                json.loads(ln)["run_id"]
                for ln in (self.run_dir / "events" / "node0.jsonl").read_text().splitlines()
                if '"run_id"' in ln
            )
            c = de.client()
            try:
                cts = c.containers.list(filters={"label": f"{de.LABEL_RUN}={run_id}"})
            finally:
                c.close()
            pids = set()
            for ct in cts:
                pid = int(ct.attrs["State"]["Pid"])
                pids |= {pid, psutil.Process(pid).ppid()}  # the resident and its shim
            pss = sum(rss_pss_mb(p)[1] for p in pids)
            self.result = {"containers": len(cts), "processes": len(pids), "pss_mb": pss}
        except Exception as exc:  # noqa: BLE001 - reported as the figure's error
            self.error = err_str(exc)


class Samplers:
    """Several status callbacks as one (Run sets ``run_dir`` on it before the run)."""

    def __init__(self, *samplers) -> None:
        self.samplers = samplers
        self.run_dir: Path | None = None

    def __call__(self, st: dict) -> None:
        for sm in self.samplers:
            sm.run_dir = self.run_dir
            sm(st)


def measure_envelopes(base: Path, out: dict, envelopes: list[str], reps: int) -> None:
    say(
        f"\n== envelopes {', '.join(envelopes)}: 16 nodes, gang mpl 2, quantum 100 ms, 2 x 16 ranks x 1.5 s "
        f"CPU, 3 s probe; {reps} runs each, interleaved =="
    )
    figs: dict[str, dict[str, list[float]]] = {
        e: {"cpu_rate_error_max": [], "gang_skew_p99_ms": [], "startup_s": [], "mem_per_node_mb": []}
        for e in envelopes
    }
    for i in range(reps):
        for env in envelopes:
            doc = scenario_doc(f"bench-env-{env}", "gang", gang_params(100), compute_jobs(2, 30, 50),
                               rate_probe_s=3.0, envelope=env)  # fmt: skip
            mem, extra = MemorySampler(), ContainerMemory()
            r = run(base, f"env-{env}-{i + 1}", doc, on_status=Samplers(mem, extra))
            f = figs[env]
            line = [f"  {env} run {i + 1}:"]
            try:
                e, _ = rate_error(r.need())
                f["cpu_rate_error_max"].append(e)
                line.append(f"rate error {e * 100:.2f} %")
                sk = skew_figures(r.need())["p99"]
                f["gang_skew_p99_ms"].append(sk)
                line.append(f"skew p99 {sk:.3f} ms")
            except Exception as exc:  # noqa: BLE001
                line.append(err_str(exc))
            if r.summary and r.summary.get("startup_s") is not None:
                f["startup_s"].append(r.summary["startup_s"])
                line.append(f"start-up {r.summary['startup_s']:.2f} s")
            if mem.result is not None:
                per = mem.result["pss_mb"]
                if env == "docker":
                    if extra.result is None:
                        line.append(f"container memory: {extra.error or 'not sampled'}")
                        per = None
                    else:
                        per += extra.result["pss_mb"]
                        line.append(f"shims+residents {extra.result['pss_mb']:.0f} MB PSS")
                if per is not None:
                    f["mem_per_node_mb"].append(per / NODES)
                    line.append(f"memory {per / NODES:.1f} MB PSS/node")
            else:
                line.append(f"memory: {mem.error or 'not sampled'}")
            say(" ".join(line))
    res = {}
    for env, f in figs.items():
        res[env] = {k: round(statistics.median(v), 4) if v else "error: not measured" for k, v in f.items()}
        res[env]["runs"] = {k: [round(x, 4) for x in v] for k, v in f.items()}
    out["envelopes"] = res
    say("  medians: " + "; ".join(f"{e}: {json.dumps({k: v for k, v in r.items() if k != 'runs'})}"
                                   for e, r in res.items()))  # fmt: skip


def measure_tbcomm(out: dict) -> None:
    say("\n== tbcomm one-way latency vs raw loopback TCP (interleaved, median of 9 rounds) ==")
    spec = importlib.util.spec_from_file_location(
        "tbcomm_latency", Path(__file__).with_name("tbcomm_latency.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        r = mod.measure()
        out["tbcomm_latency_ratio"] = r["ratio"]
        say(
            f"  raw {r['raw_one_way_us']:.1f} us, tbcomm {r['tbcomm_one_way_us']:.1f} us one way, ratio "
            f"{r['ratio']:.2f} (per round {r['ratio_range'][0]}-{r['ratio_range'][1]}); reporting "
            f"{r['tbcomm_reporting_one_way_us']:.1f} us (x{r['ratio_reporting']:.2f})"
        )
        p = mod.measure(one_cpu=True)
        out["tbcomm_latency_ratio_one_cpu"] = p["ratio"]
        say(f"  all on one CPU: raw {p['raw_one_way_us']:.1f} us, tbcomm {p['tbcomm_one_way_us']:.1f} us, "
            f"ratio {p['ratio']:.2f}")  # fmt: skip
    except Exception as exc:  # noqa: BLE001
        out["tbcomm_latency_ratio"] = err_str(exc)
        say(f"  tbcomm_latency_ratio: {out['tbcomm_latency_ratio']}")


# --------------------------------------------------------------------------------------------------------


def verdict(key: str, value) -> str:
    op, target, _ = TARGETS[key]
    if target is None:
        return "(no target)"
    if isinstance(value, str) and value.startswith("above "):
        return "MISSED"
    if not isinstance(value, int | float):
        return "NOT MEASURED"
    ok = value <= target if op == "<=" else value >= target
    return "met" if ok else "MISSED"


def leftovers() -> list[str]:
    import psutil

    left = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            left.append(f"pid {p.pid}: {' '.join(p.cmdline())[:100]}")
        except psutil.NoSuchProcess:
            continue
    return left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"sweep only {SWEEP_QUICK_MS} ms")
    parser.add_argument("--reps", type=int, default=3, help="runs per run-based figure (median / worst)")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated subset: skew (with cpu_rate_error_max), none, sweep (overhead, control share, "
        "memory), startup, tbcomm, per_process (not in the default set)",
    )
    parser.add_argument("--per-process", default="1,2,4,8,16", help="nodes_per_process values (per_process)")
    parser.add_argument("--keep", type=Path, help="keep the run folders here instead of a temporary folder")
    parser.add_argument(
        "--envelope", default="", help="compare this envelope (docker) with cgroup (adds part envelopes)"
    )
    args = parser.parse_args()
    default = ["skew", "none", "sweep", "startup", "tbcomm"]
    parts = [p for p in args.only.split(",") if p] or default
    if args.envelope and "envelopes" not in parts:
        parts.append("envelopes")
    unknown = set(parts) - {*default, "per_process", "envelopes"}
    if unknown:
        parser.error(f"--only: unknown part(s) {', '.join(sorted(unknown))}")
    from testbed.core.clock import host_cores
    from testbed.scenario.model import ClusterConfig

    t_start = time.monotonic()
    idle0 = _idle()
    cdef = ClusterConfig()
    say(
        f"core benchmark: {NODES} nodes ({cdef.nodes_per_process} per process, CFS period "
        f"{cdef.cfs_period_ms:g} ms), {host_cores()} host cores, load average {os.getloadavg()[0]:.2f}, "
        f"{time.strftime('%Y-%m-%dT%H:%M:%S')}{' (quick)' if args.quick else ''}, {args.reps} runs per figure"
    )
    out: dict = {k: "not measured (--only)" for k in KEYS}
    tmp = None
    if args.keep:
        base = args.keep
        base.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="tb-core-bench-")
        base = Path(tmp.name)
    steps = {
        "skew": lambda: measure_skew_and_rate(base, out, args.reps),
        "none": lambda: measure_rate_none(base, out),
        "sweep": lambda: measure_sweep(base, out, SWEEP_QUICK_MS if args.quick else SWEEP_MS, args.reps),
        "startup": lambda: measure_startup(base, out, args.reps),
        "tbcomm": lambda: measure_tbcomm(out),
        "per_process": lambda: measure_per_process(base, out, [int(x) for x in args.per_process.split(",")]),
        "envelopes": lambda: measure_envelopes(base, out, ["cgroup", args.envelope or "docker"], args.reps),
    }
    owned = {
        "skew": ["gang_skew_p99_ms", "cpu_rate_error_max"],
        "none": ["cpu_rate_error_max_none"],
        "sweep": ["min_quantum_ms", "control_cpu_share", "mem_per_node_mb", "batch_baseline_ratio"],
        "startup": ["startup_s"],
        "tbcomm": ["tbcomm_latency_ratio"],
        "per_process": [],
        "envelopes": [],
    }
    try:
        for part in [*default, "per_process", "envelopes"]:
            if part not in parts:
                continue
            for k in owned[part]:
                out[k] = "error: measurement did not finish"
            try:
                steps[part]()
            except Exception as exc:  # noqa: BLE001 - the other measurements still run
                traceback.print_exc(file=sys.stdout)
                for k in owned[part]:
                    if out[k] == "error: measurement did not finish":
                        out[k] = err_str(exc)
    finally:
        if tmp is not None:
            tmp.cleanup()
    out["host_idle_share"] = round(_idle(idle0), 3)
    say(
        f"\n== summary ({time.monotonic() - t_start:.0f} s real, load average now {os.getloadavg()[0]:.2f}, "
        f"host CPU idle over the benchmark {out['host_idle_share'] * 100:.1f} %) =="
    )
    for k in KEYS:
        op, target, basis = TARGETS[k]
        tgt = f"{op} {target:g}" if target is not None else "-"
        v = out[k]
        shown = f"{v:.4g}" if isinstance(v, float) else str(v)
        say(f"  {k:<24} {shown:>10}  target {tgt:<7} {verdict(k, v):<12} [{basis}]")
    left = leftovers()
    if left:
        say(f"  warning: {len(left)} child process(es) still alive: " + "; ".join(left[:5]))
    print(json.dumps(out), flush=True)


def _idle(since: tuple[int, int] | None = None):
    """/proc/stat (idle + iowait, total) now; with ``since``, the idle share since then."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    now = (v[3] + v[4], sum(v))
    if since is None:
        return now
    return (now[0] - since[0]) / max(1, now[1] - since[1])


if __name__ == "__main__":
    main()
