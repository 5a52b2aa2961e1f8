"""The simulator at scale, beside a peer: the NASA trace on 1,000 nodes (also run by AccaSim), and 100,000
generated jobs on 10,000 nodes.

Each testbed figure is one `testbed run ... --backend sim` in a child process, timed from launch to exit
(so it includes start-up, the workload build, the simulation, writing the event log and the results),
with that child's own peak resident memory (wait4). The parts (``--only``, comma-separated):

- ``easy``: scenarios/trace-nasa.yaml as shipped, 10,000 jobs on 1,000 nodes, batch with EASY
  backfilling; ``gang``: strict gang scheduling, MPL 3, 10-minute quanta; ``fcfs``: batch without
  backfilling. Their jobs have a barrier every 10 emulated minutes: one piece each under batch (two
  lanes, docs/architecture.md, "The simulator's job-level fast path"), rank by rank under gang;
- ``easy-1p``, ``gang-1p``: the same with each trace job one compute phase
  (``workload.trace.app.barrier=false``), the jobs the simulator runs as one piece each
  (docs/architecture.md, "The simulator's job-level fast path");
- ``peer-fcfs``, ``peer-easy``: AccaSim 1.1.3 (PyPI ``accasim``, the benchmark-only ``peer`` extra:
  ``python3 -m pip install -e '.[peer]'``; benchmarks/sim_peer.py applies the 2-line shim it needs on
  Python >= 3.10, ``collections.Mapping``) on exactly the jobs the testbed runs (built by the testbed,
  written as SWF, times x125 so AccaSim's integer times hold them exactly), one child process each,
  timed the same way; they add ``fcfs`` and ``easy``. Printed: the time ratio and each mean wait. FCFS
  must agree with the peer (MISMATCH is printed above 0.1 %). EASY is held to a count-based EASY
  reference (benchmarks/sim_peer.py, ``easy``), not to the peer: **AccaSim's EASY never enforces the
  head job's reservation** (it backfills with ``reserved_nodes=[]``, so every later job that fits starts,
  whatever its length); its waits are those of a greedy reference (every queued job that fits starts),
  also printed;
- ``gang-many``: many small jobs side by side under gang (MPL 3, 10-minute quanta), the shape of issue 23's
  unpublished trace: four interleaved copies of the first 2,500 NASA jobs as the testbed maps them (10,000
  jobs on 1,000 nodes; copy k's arrivals k ms later), so four times as many jobs run or wait at once as in
  the NASA run and the offered load is four times its 0.48 (the queue grows: the matrix stays full). The
  trace is written as SWF to the run's folder;
- ``scale-easy``, ``scale-gang`` (``scale``: both): 100,000 jobs of the Lublin-Feitelson model
  (testbed/scenario/lublin.py, the paper's parameters, seed 0, ``job_types: all``) on 10,000 nodes, its
  arrivals stretched x1.4 (``arrival_scale``: an offered load about 0.7 instead of the model's 0.99 at
  this size), each job one compute phase of its drawn run time (``app: {barrier: false}``), estimates
  the run times; EASY, and gang with MPL 3 and 10-minute quanta. The scenario is written to a temporary
  folder.

Targets (issue 23; medians of ``--reps`` runs, default 3; ratios from the same run): NASA EASY at least
4x faster than AccaSim, its mean wait within 0.1 % of the count-based reference's; NASA EASY <= 15 s,
gang <= 30 s, peak memory <= 500 MB; 100,000 jobs on 10,000 nodes, EASY <= 60 s and <= 2 GB (gang
reported, no target). Every figure is printed with its target and ``met`` or ``MISSED``. A run past
``--timeout`` is killed and reported as such. A baseline measured in the same run, a fixed pure-Python
workload of the simulator's kind (a heap of timed events, small dicts, JSON lines), gives each time as a
ratio too (``*_per_baseline``), to compare hosts or runs on a noisy machine.

Every child, the testbed's and AccaSim's alike, runs from compiled bytecode, as an installed package
does: a bytecode cache of the benchmark's own (``PYTHONPYCACHEPREFIX``, a temporary folder) is filled
before the runs, the testbed's modules by ``compileall`` and the libraries both import by importing them
once, and every child reads it. A host that sets ``PYTHONDONTWRITEBYTECODE`` (this one does) otherwise had
each testbed run compile its 100-odd modules from source, 0.1-0.2 s of its 2 s of CPU, where AccaSim,
installed by pip with its bytecode, compiled nothing (docs/measurements.md, "The simulator at trace
scale").

    python benchmarks/sim_scale.py [--jobs 10000] [--reps 3] [--only easy,gang,peer-easy,scale,...]

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import sim_peer

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "trace-nasa.yaml"
GANG = ["--set", "scheduler.name=gang", "--set", "scheduler.params={mpl: 3, quantum_ms: 600000}"]
FCFS = ["--set", "scheduler.params={backfill: false}"]
ONE_PHASE = ["--set", "workload.trace.app.barrier=false"]
VARIANTS = {"easy": [], "gang": GANG, "fcfs": FCFS, "easy-1p": ONE_PHASE, "gang-1p": [*GANG, *ONE_PHASE]}
PEERS = {"peer-fcfs": "fcfs", "peer-easy": "easy"}  # each peer run and the testbed run it is set beside
SCALE = {"scale-easy": [], "scale-gang": GANG}
MANY = {"gang-many": GANG}
PARTS = [*VARIANTS, *PEERS, *MANY, *SCALE]
DEFAULT = [
    *("easy", "gang", "easy-1p", "gang-1p", "peer-fcfs", "peer-easy", "gang-many", "scale-easy", "scale-gang")
]
#: The 100,000-job workload: the Lublin-Feitelson model on 10,000 nodes, arrivals stretched to a load ~0.7.
SCALE_NODES, SCALE_JOBS, SCALE_ARRIVAL = 10_000, 100_000, 1.4
MB = 1024.0  # ru_maxrss is in KiB on Linux

#: name: (target, "<=" or ">="). Times in s, memory in MB, relative differences as fractions.
TARGETS = {
    "sim_easy_s": (15, "<="),
    "sim_gang_s": (30, "<="),
    "sim_nasa_peak_rss_mb": (500, "<="),
    "peer_easy_speedup": (4, ">="),
    "easy_wait_vs_reference": (0.001, "<="),
    "fcfs_wait_vs_peer": (0.001, "<="),
    "sim_gang_many_s": (30, "<="),
    "scale_easy_s": (60, "<="),
    "scale_easy_rss_mb": (2048, "<="),
}
PERCENT = ("_vs_reference", "_vs_peer")  # the targets that are relative differences, shown as percentages


def verdict(name: str, value) -> str:
    target, way = TARGETS[name]
    shown = f"{target:.1%}" if name.endswith(PERCENT) else f"{target:g}"
    if not isinstance(value, (int, float)):
        return f"target {way} {shown}: MISSED"
    ok = value <= target if way == "<=" else value >= target
    return f"target {way} {shown}: {'met' if ok else 'MISSED'}"


def baseline() -> float:
    """Seconds for 300,000 timed events through a heap, each making a small record written as JSON."""
    t = time.perf_counter()
    heap: list[tuple] = []
    out = []
    for i in range(300_000):
        heapq.heappush(heap, ((i * 7919) % 100_003 * 1e-3, i, "k", (i,)))
        if len(heap) > 1000:
            when, seq, kind, payload = heapq.heappop(heap)
            rec = {"t": round(when, 9), "wall": when, "src": "node1", "kind": kind, "job": payload[0]}
            out.append(json.dumps(rec, separators=(",", ":")))
    return time.perf_counter() - t


class Child:
    """One child process's wall seconds, CPU seconds (user + system), peak RSS (MB) and output."""

    #: The children's environment (:func:`bytecode_env`); None: this process's.
    env: dict[str, str] | None = None

    def __init__(self, cmd: list[str], timeout: float, workdir: Path) -> None:
        out, err = workdir / "child.out", workdir / "child.err"
        t = time.perf_counter()
        with open(out, "w") as o, open(err, "w") as e:
            proc = subprocess.Popen(cmd, stdout=o, stderr=e, cwd=ROOT, env=Child.env)
        deadline = t + timeout
        status = None
        while status is None:
            pid, status_, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                status = status_
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.05)
        self.wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        self.timed_out = self.wall > timeout
        self.cpu = usage.ru_utime + usage.ru_stime
        self.rss_mb = usage.ru_maxrss / MB
        self.out = out.read_text()
        if proc.returncode != 0 and not self.timed_out:
            raise SystemExit(f"{' '.join(cmd[:6])} ... failed ({proc.returncode}): {err.read_text().strip()}")


#: What the children import, imported once into the bytecode cache before any is timed (AccaSim's with
#: its shim, where it is installed).
WARM = """
import numpy, testbed.cli, testbed.runner, testbed.sim.engine, testbed.results.summary
import sim_peer
sim_peer.shim()
try:
    import accasim.base.allocator_class, accasim.base.scheduler_class, accasim.base.simulator_class
except ImportError:
    pass
"""


def bytecode_env(cache: Path) -> dict[str, str]:
    """The children's environment: bytecode read from (and written to) ``cache``, filled now, so that no
    timed run compiles a module (see the module's docstring)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(cache)
    sources = [str(ROOT / d) for d in ("testbed", "schedulers", "apps", "monitoring") if (ROOT / d).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *sources], env=env, cwd=ROOT, check=True)
    here = Path(__file__).resolve().parent
    subprocess.run([sys.executable, "-c", WARM], env=env, cwd=here, check=True, stdout=subprocess.DEVNULL)
    return env


def testbed_run(scenario: Path, args: list[str], out: Path, timeout: float) -> Child:
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(scenario), "--backend", "sim", "-q"]
    out.mkdir(parents=True)
    return Child([*cmd, "--out", str(out / "run"), *args], timeout, out)


def scale_scenario(folder: Path, jobs: int, nodes: int) -> Path:
    path = folder / "lublin-scale.yaml"
    path.write_text(
        f"""# benchmarks/sim_scale.py's scale part: the Lublin-Feitelson model, {jobs} jobs on {nodes} nodes.
name: lublin-scale
cluster: {{nodes: {nodes}}}
scheduler: {{name: batch, params: {{backfill: true}}}}
workload:
  seed: 0
  generator:
    kind: lublin
    count: {jobs}
    arrival_scale: {SCALE_ARRIVAL}
    step_s: 172800  # at most two days a step: one step for every job (its run time is at most that)
    app: {{barrier: false}}
"""
    )
    return path


def many_scenario(folder: Path, copies: int = 4, each: int = 2500) -> Path:
    """``gang-many``'s scenario: ``copies`` interleaved copies of the first ``each`` NASA jobs (as the
    testbed maps them: sizes, run times, estimates and arrivals), copy k's arrivals k ms later, as SWF."""
    jobs, _ = sim_peer.testbed_jobs(SCENARIO, [f"workload.trace.count={each}"])
    many = sorted(
        (
            sim_peer.TraceJob(round(j.submit + k * 1e-3, 6), j.size, j.run, j.estimate)
            for j in jobs
            for k in range(copies)
        ),
        key=lambda j: j.submit,
    )
    ticks = sim_peer.ticks_for(many)
    swf = folder / "nasa-many.swf"
    sim_peer.write_swf(many, swf, ticks)
    path = folder / "nasa-many.yaml"
    path.write_text(
        f"""# benchmarks/sim_scale.py's gang-many part: {copies} interleaved copies of {each} NASA jobs.
name: nasa-many
cluster: {{nodes: 1000}}
scheduler: {{name: batch, params: {{backfill: true}}}}
workload:
  trace:
    path: {swf.name}
    time_scale: {1 / ticks!r}  # the SWF's times are in 1/{ticks} s
    step_s: 600
    estimate: requested
"""
    )
    return path


def offered_load(jobs: int, nodes: int) -> tuple[float, float]:
    """The scale workload's offered load (node-seconds asked over nodes x the arrivals' span) and the last
    arrival's time (emulated s)."""
    from testbed.scenario import lublin

    drawn = lublin.draw(jobs, nodes, 0)
    span = (drawn[-1].submit_s - drawn[0].submit_s) * SCALE_ARRIVAL
    return sum(d.size * d.run_s for d in drawn) / (nodes * span), span


def last_time(events: Path) -> float:
    """The emulated time of the last whole record of a run's event log (0 if none)."""
    try:
        with open(events, "rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - 65536))
            lines = fh.read().splitlines()
    except OSError:
        return 0.0
    for line in reversed(lines[1:] if len(lines) > 1 else lines):
        try:
            return float(json.loads(line)["t"])
        except (ValueError, KeyError):
            continue
    return 0.0


def rel(a: float, b: float) -> float:
    return (a - b) / b if b else float("inf") if a else 0.0


@dataclass
class Peer:
    """The peer's input, the testbed's own NASA jobs (the SWF is written later, to the runs' folder), and
    the references' mean waits on them; ``why``: why the peer cannot run (None: it can, or none was asked
    for)."""

    jobs: list[sim_peer.TraceJob] = field(default_factory=list)
    nodes: int = 0
    ticks: int = 0
    refs: dict[str, float] = field(default_factory=dict)
    why: str | None = None

    @property
    def ready(self) -> bool:
        """A peer part was asked for and AccaSim, its jobs and the references are there."""
        return self.why is None and bool(self.refs)


@dataclass
class Inputs:
    """What the runs read: the runs' folder, the NASA runs' ``--set``s and the scenarios written there."""

    folder: Path
    common: list[str]
    scale: Path | None = None
    span: float = 0.0  # the scale workload's last arrival (emulated s)
    many: Path | None = None
    swf: Path | None = None  # the peer's jobs


@dataclass
class Runs:
    """Each part's figures over the repetitions."""

    walls: dict[str, list[float]]
    cpus: dict[str, list[float]]
    rss: dict[str, float] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)
    timeouts: set[str] = field(default_factory=set)
    #: A killed scale run: emulated time reached, its share.
    progress: dict[str, tuple[float, float]] = field(default_factory=dict)


def _parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """The arguments and the parts to run, in order, each once."""
    doc = __doc__.split("\n")[0]
    parser = argparse.ArgumentParser(prog="python benchmarks/sim_scale.py", description=doc)
    parser.add_argument("--jobs", type=int, default=10_000, help="NASA trace jobs replayed (default 10000)")
    parser.add_argument("--reps", type=int, default=3, help="runs of each figure; the median is reported")
    parser.add_argument(
        "--only", default=",".join(DEFAULT), help=f"parts, comma-separated, of: {', '.join(PARTS)}, scale"
    )
    parser.add_argument("--scale-jobs", type=int, default=SCALE_JOBS, help="jobs of the scale part")
    parser.add_argument("--scale-nodes", type=int, default=SCALE_NODES, help="nodes of the scale part")
    parser.add_argument(
        "--timeout", type=float, default=900, help="seconds a run may take before it is killed"
    )
    parser.add_argument("--keep", type=Path, help="keep the runs' folders here (default: a temporary folder)")
    args = parser.parse_args(argv)
    names = [n for part in args.only.split(",") if part for n in (list(SCALE) if part == "scale" else [part])]
    if unknown := [n for n in names if n not in PARTS]:
        parser.error(f"--only: unknown {', '.join(unknown)}; known: {', '.join(PARTS)}, scale")
    for peer, own in PEERS.items():  # a peer's figure is set beside the testbed's own run of the same policy
        if peer in names and own not in names:
            names.insert(names.index(peer), own)
    return args, list(dict.fromkeys(names))


def _peer(names: list[str], common: list[str]) -> Peer:
    """The peer's jobs and the references' mean waits, printed, where a peer part is asked for."""
    peer = Peer()
    if not any(n in PEERS for n in names):
        return peer
    try:
        sim_peer.shim()
        import accasim  # noqa: F401

        peer.jobs, peer.nodes = sim_peer.testbed_jobs(SCENARIO, common[1::2])  # the KEY=VALUE of each --set
    except ImportError:
        peer.why = "accasim is not installed: python3 -m pip install -e '.[peer]'"
        print(f"peer: {peer.why}", flush=True)
        return peer
    peer.ticks = sim_peer.ticks_for(peer.jobs)
    for ref in (sim_peer.fcfs, sim_peer.easy, sim_peer.greedy):
        waits = ref(peer.jobs, peer.nodes)
        peer.refs[ref.__name__] = sum(waits) / len(waits)
    refs = peer.refs
    print(
        f"references on the same {len(peer.jobs)} jobs: mean wait FCFS {refs['fcfs']:.5f} s, count-based "
        f"EASY {refs['easy']:.5f} s, greedy {refs['greedy']:.5f} s",
        flush=True,
    )
    return peer


def _inputs(
    args: argparse.Namespace, names: list[str], folder: Path, common: list[str], peer: Peer
) -> Inputs:
    """The scenarios the asked-for parts need, written to ``folder`` (the generated ones printed)."""
    inputs = Inputs(folder, common)
    if any(n in SCALE for n in names):
        inputs.scale = scale_scenario(folder, args.scale_jobs, args.scale_nodes)
        load, inputs.span = offered_load(args.scale_jobs, args.scale_nodes)
        print(
            f"scale: {inputs.scale} (offered load {load:.2f}, last arrival at {inputs.span:.4g} s)",
            flush=True,
        )
    if any(n in MANY for n in names):
        inputs.many = many_scenario(folder)
        print(f"gang-many: {inputs.many}", flush=True)
    if peer.ready:
        inputs.swf = folder / "nasa-jobs.swf"
        sim_peer.write_swf(peer.jobs, inputs.swf, peer.ticks)
    return inputs


def _runs(args: argparse.Namespace, names: list[str], common: list[str], peer: Peer) -> Runs:
    """Every part ``--reps`` times, round by round; a part once killed, or a peer that cannot run, is not
    run again."""
    runs = Runs(walls={n: [] for n in names}, cpus={n: [] for n in names})
    with tempfile.TemporaryDirectory(prefix="sim-scale-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        Child.env = bytecode_env(Path(tmp) / "pycache")
        inputs = _inputs(args, names, folder, common, peer)
        for rep in range(args.reps):
            for name in names:
                if name in runs.timeouts or (name in PEERS and peer.why is not None):
                    continue
                _run(name, rep, args.timeout, inputs, peer, runs)
    return runs


def _launch(name: str, out: Path, timeout: float, inputs: Inputs, peer: Peer) -> Child:
    if name in PEERS:
        cmd = [sys.executable, str(Path(__file__).with_name("sim_peer.py"))]
        out.mkdir(parents=True)
        return Child(
            [*cmd, str(inputs.swf), str(peer.nodes), PEERS[name], str(peer.ticks), str(out)], timeout, out
        )
    if name in SCALE:
        return testbed_run(inputs.scale, SCALE[name], out, timeout)
    if name in MANY:
        return testbed_run(inputs.many, MANY[name], out, timeout)
    return testbed_run(SCENARIO, [*inputs.common, *VARIANTS[name]], out, timeout)


def _run(name: str, rep: int, timeout: float, inputs: Inputs, peer: Peer, runs: Runs) -> None:
    """Part ``name``'s run ``rep``: its figures added to ``runs`` and printed."""
    out = inputs.folder / f"{name}-{rep}"
    run = _launch(name, out, timeout, inputs, peer)
    if run.timed_out:
        runs.timeouts.add(name)
        what = f"killed at --timeout {timeout:g} s"
        if name in SCALE:
            reached = last_time(out / "run" / "events.jsonl")
            share = reached / inputs.span
            runs.progress[name] = (reached, share)
            what += (
                f", its log up to {reached:.4g} s of emulated time, {share:.1%} of the last "
                f"arrival's {inputs.span:.4g} s"
            )
    elif name in PEERS:
        got = json.loads(run.out.strip().splitlines()[-1])
        runs.waits[name] = got["mean_wait_s"]
        what = f"{got['jobs']} jobs, mean wait {got['mean_wait_s']:.5f} s"
    else:
        summary = json.loads((out / "run" / "summary.json").read_text())
        runs.waits[name] = summary["mean_waiting_time_s"]
        what = (
            f"{summary['jobs']} jobs, {summary['jobs_by_state']}, makespan "
            f"{summary['makespan_s']:.0f} s, mean wait {summary['mean_waiting_time_s']:.5f} s"
        )
    runs.walls[name].append(run.wall)
    runs.cpus[name].append(run.cpu)
    runs.rss[name] = max(runs.rss.get(name, 0.0), run.rss_mb)
    print(
        f"{name:>10} #{rep + 1}: {run.wall:6.1f} s ({run.cpu:.1f} s CPU, {run.rss_mb:.0f} MB)  {what}",
        flush=True,
    )


def _result(names: list[str], timeout: float, base: float, runs: Runs, peer: Peer) -> dict:
    """Each part's figures (medians), the NASA runs' peak memory and the references' mean waits."""
    result: dict = {}
    for name in names:
        key = name.replace("-", "_")
        if name in PEERS and peer.why is not None:
            result[f"{key}_s"] = peer.why
            continue
        if name in runs.timeouts:
            result[f"{key}_s"] = f"killed at --timeout {timeout:g} s"
            result[f"{key}_rss_mb"] = round(runs.rss[name], 1)  # when it was killed
            if name in runs.progress:
                result[f"{key}_progress"] = round(runs.progress[name][1], 4)
            continue
        wall = statistics.median(runs.walls[name])
        prefix = "" if name.startswith(("peer", "scale")) else "sim_"
        result[f"{prefix}{key}_s"] = round(wall, 2)
        result[f"{prefix}{key}_cpu_s"] = round(statistics.median(runs.cpus[name]), 2)
        result[f"{prefix}{key}_per_baseline"] = round(wall / base, 1)
        result[f"{prefix}{key}_rss_mb"] = round(runs.rss[name], 1)
        result[f"{prefix}{key}_mean_wait_s"] = round(runs.waits[name], 6)
    nasa = [n for n in names if n in VARIANTS and n not in runs.timeouts]
    if nasa:
        result["sim_nasa_peak_rss_mb"] = round(max(runs.rss[n] for n in nasa), 1)
    if peer.ready:
        result |= {f"reference_{k}_mean_wait_s": round(v, 6) for k, v in peer.refs.items()}
    return result


def _nasa_lines(names: list[str], result: dict) -> list[str]:
    lines = []
    for name, label in (
        ("easy", "NASA EASY"),
        ("gang", "NASA gang, 10-minute quanta"),
        ("gang-many", "four interleaved copies of 2,500 NASA jobs, gang, 10-minute quanta"),
    ):
        if name in names:
            key = "sim_" + name.replace("-", "_") + "_s"
            value = result.get(key)
            lines.append(f"{label}: {value} s ({verdict(key, value)})")
    if "sim_nasa_peak_rss_mb" in result:
        value = result["sim_nasa_peak_rss_mb"]
        lines.append(f"NASA peak memory: {value} MB ({verdict('sim_nasa_peak_rss_mb', value)})")
    for name in ("easy-1p", "gang-1p"):
        key = "sim_" + name.replace("-", "_") + "_s"
        if name in names and key in result:
            lines.append(f"NASA {name} (one compute phase a job): {result[key]} s")
    return lines


def _peer_fcfs_lines(names: list[str], runs: Runs, peer: Peer, result: dict) -> list[str]:
    """FCFS beside the peer, whose mean wait it must equal; adds the comparison to ``result``."""
    timeouts, waits = runs.timeouts, runs.waits
    if not (
        "peer-fcfs" in names and "peer-fcfs" not in timeouts and peer.why is None and "fcfs" not in timeouts
    ):
        return []
    ours, theirs = result["sim_fcfs_s"], result["peer_fcfs_s"]
    diff = rel(waits["fcfs"], waits["peer-fcfs"])
    result["fcfs_wait_vs_peer"] = diff
    result["peer_fcfs_speedup"] = round(theirs / ours, 2)
    cpu = result["peer_fcfs_cpu_s"] / result["sim_fcfs_cpu_s"]
    lines = [
        f"NASA FCFS: testbed {ours} s, AccaSim {theirs} s: testbed/peer time {ours / theirs:.2f}, "
        f"speed-up {theirs / ours:.2f}x; by CPU time {cpu:.2f}x",
        f"  mean wait: testbed {waits['fcfs']:.5f} s, AccaSim {waits['peer-fcfs']:.5f} s, FCFS "
        f"reference {peer.refs['fcfs']:.5f} s; testbed vs AccaSim {diff:+.4%} "
        f"({verdict('fcfs_wait_vs_peer', abs(diff))})",
    ]
    if abs(diff) > TARGETS["fcfs_wait_vs_peer"][0]:
        lines.append(
            "  *** MISMATCH: FCFS mean waits of the testbed and AccaSim differ by more than 0.1 % ***"
        )
    return lines


def _peer_easy_lines(names: list[str], runs: Runs, peer: Peer, result: dict) -> list[str]:
    """EASY beside the peer for time, and beside the count-based reference for the mean wait (the peer's
    EASY is not EASY); adds the comparison to ``result``."""
    timeouts, waits, refs = runs.timeouts, runs.waits, peer.refs
    if not (
        "peer-easy" in names and "peer-easy" not in timeouts and peer.why is None and "easy" not in timeouts
    ):
        return []
    ours, theirs = result["sim_easy_s"], result["peer_easy_s"]
    speedup = theirs / ours
    diff = rel(waits["easy"], refs["easy"])
    result["peer_easy_speedup"] = round(speedup, 2)
    result["easy_wait_vs_reference"] = diff
    cpu = result["peer_easy_cpu_s"] / result["sim_easy_cpu_s"]
    result["peer_easy_cpu_speedup"] = round(cpu, 2)
    lines = [
        f"NASA EASY: testbed {ours} s, AccaSim {theirs} s: testbed/peer time {ours / theirs:.2f}, "
        f"speed-up {speedup:.2f}x ({verdict('peer_easy_speedup', speedup)}); by CPU time {cpu:.2f}x"
    ]
    if "easy-1p" in names and "sim_easy_1p_s" in result:
        one = result["sim_easy_1p_s"]
        result["peer_easy_1p_speedup"] = round(theirs / one, 2)
        cpu1 = result["peer_easy_cpu_s"] / result["sim_easy_1p_cpu_s"]
        lines.append(
            f"  (easy-1p, the fast path: {one} s, speed-up {theirs / one:.2f}x; by CPU time {cpu1:.2f}x)"
        )
    lines.append(
        f"  mean wait: testbed {waits['easy']:.5f} s, count-based EASY reference {refs['easy']:.5f} s: "
        f"{diff:+.4%} ({verdict('easy_wait_vs_reference', abs(diff))})"
    )
    lines.append(
        f"  AccaSim {waits['peer-easy']:.5f} s, greedy reference {refs['greedy']:.5f} s "
        f"({rel(waits['peer-easy'], refs['greedy']):+.4%}): AccaSim's EASY never enforces the head job's "
        "reservation (it backfills with an empty reserved-node list), so it is greedy, not EASY"
    )
    return lines


def _scale_lines(names: list[str], args: argparse.Namespace, runs: Runs, result: dict) -> list[str]:
    lines = []
    for name, label in (("scale-easy", "EASY"), ("scale-gang", "gang, 10-minute quanta")):
        if name not in names:
            continue
        key = name.replace("-", "_")
        value, mem = result.get(f"{key}_s"), result.get(f"{key}_rss_mb", "-")
        head = f"{args.scale_jobs} jobs on {args.scale_nodes} nodes, {label}: {value}"
        if name in runs.progress:
            reached, share = runs.progress[name]
            head += (
                f" ({share:.1%} of the arrivals' span simulated by then: at that pace about "
                f"{args.timeout / share if share else float('inf'):.0f} s in all)"
            )
            mem = f"{mem} MB when killed"
        elif name not in runs.timeouts:
            head += " s"
            mem = f"{mem} MB"
        if name == "scale-easy":
            got = verdict("scale_easy_rss_mb", result.get(f"{key}_rss_mb"))
            if name in runs.timeouts and got.endswith("met"):
                got = got.replace("met", "not settled: killed before the end")
            lines.append(f"{head} ({verdict('scale_easy_s', value)}); {mem} ({got})")
        else:
            lines.append(f"{head}; {mem} (no target)")
    return lines


def main(argv: list[str] | None = None) -> int:
    args, names = _parse(argv)
    common = ["--set", f"workload.trace.count={args.jobs}"]
    base = statistics.median(baseline() for _ in range(3))
    print(f"load average at start: {os.getloadavg()[0]:.2f}; baseline {base:.3f} s", flush=True)
    peer = _peer(names, common)
    runs = _runs(args, names, common, peer)

    result = _result(names, args.timeout, base, runs, peer)
    reps = f"median of {args.reps}" if args.reps > 1 else "1 run"
    print(f"\nfigures ({reps}; host load average now {os.getloadavg()[0]:.2f}):")
    # In this order: each adds its own keys to the result, and the JSON line keeps their order.
    lines = [
        *_nasa_lines(names, result),
        *_peer_fcfs_lines(names, runs, peer, result),
        *_peer_easy_lines(names, runs, peer, result),
        *_scale_lines(names, args, runs, result),
    ]
    print("\n".join(lines))
    result |= {
        "jobs": args.jobs,
        "nodes": 1000,
        "scale_jobs": args.scale_jobs,
        "scale_nodes": args.scale_nodes,
        "reps": args.reps,
        "baseline_s": round(base, 3),
        "targets": {k: f"{way} {t}" for k, (t, way) in TARGETS.items()},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
