"""Paired gang's gains on real processes, on a quiet host and beside busy processes (issue 25, deliverable 2).

A busy host must change neither the nodes' rates nor the policies' decisions. This runs a scenario whose
sweep has a strict ``gang`` and a ``paired`` variant (per mix), alternately quiet and beside ``--busy``
busy loops at nice 19 that it starts itself, in a session of their own as other users' work would be
(``--same-session`` puts them in this run's session instead), and kills after each run. For each run it
prints the gains (paired barriers/s over gang's, per job type), the fraction of quanta paired, the worst
rate window (summary ``rate_window_error_max``), what the host's load average was, and where the run's
processes waited for a CPU: ``/proc/<tid>/schedstat`` run-queue wait of every thread of the run's
processes (those carrying ``TESTBED_RUN_ID``), by class (nodes' workers, agents, coordinator, Ray's
gcs_server / raylet / other Ray processes), sampled every 0.5 s, in ms of wait per second of wall time.

    python benchmarks/busy_host.py                                   # busy-host-mix.yaml, 3 pairs of runs
    python benchmarks/busy_host.py --scenario scenarios/paper002-mix.yaml \\
        --variants mix1-gang,mix1-paired,mix2-gang,mix2-paired --repeat 2

The last line is one JSON object: per condition (quiet, busy), the median gain per job type and each
run's figures. Target: the medians quiet and busy within 15 % of each other.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent.parent
NEEDLE = b"TESTBED_RUN_ID="
BUSY = "import os\nwhile True: pass"


def busy_loops(n: int, same_session: bool) -> list[subprocess.Popen]:
    """``n`` busy loops at nice 19; each in a session of its own unless ``same_session``."""
    return [
        subprocess.Popen(
            ["nice", "-n", "19", sys.executable, "-c", BUSY],
            start_new_session=not same_session,
            stdin=subprocess.DEVNULL,
        )
        for _ in range(n)
    ]


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def _classify(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if NEEDLE not in f.read():
                return None
        with open(f"/proc/{pid}/cgroup") as f:
            cg = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if "/testbed/" in cg and "/node" in cg:
        return "nodes"
    for key, cls in (
        ("AgentHost", "agents"),
        ("CoordinatorActor", "coordinator"),
        ("gcs_server", "gcs"),
        ("raylet", "raylet"),
        ("forkserver", "agents"),  # an agent's fork servers, before they fork a node's worker
    ):
        if key in cmd:
            return cls
    return "ray-other"


class Sampler(threading.Thread):
    """Sums every thread's schedstat run and wait deltas by class, over the run's processes."""

    def __init__(self, extra: dict[int, str]) -> None:
        super().__init__(daemon=True)
        self.extra = extra  # pid -> class, for processes without the mark (the busy loops, the driver)
        self.last: dict[int, tuple[int, int]] = {}
        self.cls: dict[int, str | None] = {}
        self.cpu: dict[str, float] = {}
        self.waited: dict[str, float] = {}
        self.done = threading.Event()
        self.t0 = time.monotonic()

    def sample(self) -> None:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid not in self.cls or self.cls[pid] is None and pid in self.extra:
                self.cls[pid] = self.extra.get(pid) or _classify(pid)
            c = self.cls[pid]
            if c is None:
                continue
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for t in tids:
                try:
                    with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                        run, wait, _ = (int(x) for x in f.read().split())
                except (OSError, ValueError):
                    continue
                key = int(t)
                r0, w0 = self.last.get(key, (run, wait))  # a new thread counts from its first sample
                self.last[key] = (run, wait)
                self.cpu[c] = self.cpu.get(c, 0.0) + (run - r0) / 1e9
                self.waited[c] = self.waited.get(c, 0.0) + (wait - w0) / 1e9

    def run(self) -> None:
        while not self.done.wait(0.5):
            self.sample()

    def result(self) -> dict:
        wall = time.monotonic() - self.t0
        return {
            c: {
                "cpu_ms_per_s": round(1000 * self.cpu[c] / wall, 1),
                "wait_ms_per_s": round(1000 * self.waited[c] / wall, 1),
            }
            for c in sorted(self.cpu)
        }


def gains(out: Path, pairs: list[tuple[str, str]]) -> dict:
    rows = {r["variant"]: r for r in csv.DictReader(open(out / "comparison.csv"))}
    res = {}
    for g, p in pairs:
        mix = g.rsplit("-", 1)[0] if "-" in g else "mix"
        for col in rows[g]:
            if col.startswith("barriers_per_s.") and rows[g][col] and rows[p].get(col):
                res[f"{mix}:{col.split('.', 1)[1]}"] = float(rows[p][col]) / float(rows[g][col])
        res[f"{mix}:paired_fraction"] = float(rows[p]["quanta_paired_fraction"] or 0)
    rate = []
    for v in rows:
        s = json.load(open(out / v / "summary.json"))
        rate.append(s.get("rate_window_error_max"))
    res["rate_window_error_max"] = max((r for r in rate if r is not None), default=None)
    return res


def one_run(cmd: list[str], scenario: Path, out: Path, pairs, busy: int, same_session: bool) -> dict:
    load = os.getloadavg()
    loops = busy_loops(busy, same_session) if busy else []
    extra = {p.pid: "busy-loops" for p in loops}
    sampler = Sampler(extra)
    sampler.start()
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(
            [*cmd, "run", str(scenario), "--out", str(out), "-q"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        extra[proc.pid] = "driver"
        stdout, _ = proc.communicate()
    finally:
        sampler.done.set()
        sampler.join()
        stop(loops)
    if proc.returncode not in (0, 3):
        raise SystemExit(f"testbed run failed ({proc.returncode}):\n{stdout[-3000:]}")
    res = gains(out, pairs)
    res["load_before"] = [round(x, 2) for x in load]
    res["wall_s"] = round(time.monotonic() - t0, 1)
    res["schedstat"] = sampler.result()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", default=str(HERE / "scenarios" / "busy-host-mix.yaml"))
    ap.add_argument("--variants", default="", help="sweep points to keep, comma-separated (default: all)")
    ap.add_argument("--repeat", type=int, default=3, help="pairs of runs (quiet, then busy)")
    ap.add_argument("--busy", type=int, default=2, help="busy loops at nice 19 in the busy runs")
    ap.add_argument("--same-session", action="store_true", help="start the busy loops in this session")
    ap.add_argument("--out", default="", help="where the runs go (default: a temporary folder)")
    ap.add_argument("--cmd", default="testbed", help="the testbed command (e.g. another checkout's)")
    a = ap.parse_args()

    scn = yaml.safe_load(open(a.scenario))
    keep = [v for v in a.variants.split(",") if v]
    if keep:
        scn["sweep"] = [v for v in scn["sweep"] if v["name"] in keep]
    names = [v["name"] for v in scn["sweep"]]
    pairs = [(g, g[: -len("gang")] + "paired") for g in names if g.endswith("gang")]
    pairs = [(g, p) for g, p in pairs if p in names]
    if not pairs:
        raise SystemExit(f"no gang/paired pair among the sweep's points {names}")
    base = Path(a.out or tempfile.mkdtemp(prefix="busy-host-"))
    base.mkdir(parents=True, exist_ok=True)
    scen = base / "scenario.yaml"
    scen.write_text(yaml.safe_dump(scn, sort_keys=False))

    runs: dict[str, list[dict]] = {"quiet": [], "busy": []}
    for i in range(a.repeat):
        for cond in ("quiet", "busy"):
            busy = a.busy if cond == "busy" else 0
            res = one_run(a.cmd.split(), scen, base / f"{cond}{i}", pairs, busy, a.same_session)
            runs[cond].append(res)
            figs = {k: round(v, 3) for k, v in res.items() if isinstance(v, float)}
            print(f"{cond} {i}: load {res['load_before']} {figs}", flush=True)
            for c, v in res["schedstat"].items():
                print(f"    {c:12s} cpu {v['cpu_ms_per_s']:7.1f} ms/s  wait {v['wait_ms_per_s']:7.1f} ms/s")
    keys = [k for k in runs["quiet"][0] if isinstance(runs["quiet"][0][k], float)]
    med = {
        c: {k: statistics.median(r[k] for r in rs if r.get(k) is not None) for k in keys}
        for c, rs in runs.items()
    }
    print(f"\n{'figure':32s} {'quiet':>8s} {'busy':>8s} {'busy/quiet':>10s}")
    for k in keys:
        q, b = med["quiet"][k], med["busy"][k]
        ratio = f"{b / q:10.3f}" if q else f"{'-':>10s}"
        print(f"{k:32s} {q:8.3f} {b:8.3f} {ratio}")
    print(
        json.dumps(
            {
                "scenario": a.scenario,
                "busy": a.busy,
                "same_session": a.same_session,
                "median": med,
                "runs": runs,
            }
        )
    )


if __name__ == "__main__":
    main()
