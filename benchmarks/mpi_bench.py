"""MPI programs on the testbed (the ``mpi`` kind), each figure beside a baseline measured in the same run.

``python benchmarks/mpi_bench.py [--only latency,link,start,fidelity,msgcpu,collcpu] [--rounds 1000]
[--keep DIR]``

* latency: tests/programs/pingpong.py (1-byte Send/Recv ping-pong, median one-way of ``--rounds``; and
  the median Barrier) on 2 ranks, direct (the job spins: MPI's own calls) and mirrored (it blocks, the
  default: each message through tbcomm), inside the testbed (2 nodes, ``latency_us: 0``, TDF 1, NLS: every
  process runs) against plain ``mpiexec -n 2`` on the same host. Target: one-way <= 2x plain mpiexec's.
* link: the same ping-pong across two nodes with ``latency_us: 100`` (TDF 1: emulated = real).
  Target: 100 us +- 10 % one way.
* start: a 16-rank MPI job (tests/programs/where.py) and a 16-rank synthetic job, each alone on 16 nodes:
  emulated ms from the policy's decision (job_started) to every rank's HELLO at its NIC (started), and
  for MPI to every rank past MPI_Init (its first report); max over ranks, median over ``--reps`` jobs.
* fidelity: tests/programs/ring_allreduce.py (4 ranks, 20 iterations of 2 x 50 ms of compute, a ring
  and an allreduce) alone on 4 nodes, real response time / simulated (the simulator replays its trace,
  recorded here the first time), beside a synthetic job of the same shape (20 iterations x 100 units,
  a barrier each) in the same two runs. Target: within 10 %.
* msgcpu (not in the default list): the CPU a rank spends per mirrored message beyond what the simulator
  charges (its trace's CPU and apps/mpi.py's message_cpu_s, which was set from this figure), by message
  size: tests/programs/pingpong.py on 2 nodes (TDF 1, NLS, the default wait mode:
  mirrored), ``latency_us`` 0 and 100, nbytes 1, 24000 (NAS CG.A's messages) and 160000 (MG.A's),
  ``--rounds`` rounds (2000 is the figure's). Per rank, its CPU at exit (proc_exited cpu_s) against the
  CPU its trace records between MPI calls (the simulator's model, recorded by ``--backend sim`` of the
  same scenario), differenced against a job of the same scenario with 1 round (start-up, imports and
  MPI_Init cancel out), per message sent or received (the mirror's barriers count one each way).
* collcpu (not in the default list): the CPU a rank spends inside MPI's Alltoall and Allreduce per byte
  of the data it hands them, as a testbed rank spends it (tests/programs/collcpu.py as an MPI job alone on
  2 and on 4 nodes, 8, 16 and 32 MB, median over the sizes and ``--reps`` runs), beside a plain copy of
  the same bytes in the same runs and the figures the simulator charges (apps/mpi.py, collective_cpu_s),
  which were set from the same program on plain ``mpiexec -n 2`` (MPICH's shared memory, 1-16 MB).

The last line printed is one JSON object. Note the host's other load (the run prints its idle share).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from testbed.apps.mpi_trace import TRACES_ENV

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "programs"
BIN = Path(sys.executable).parent


def _idle() -> tuple[float, float]:
    with open("/proc/stat") as fh:
        f = [float(x) for x in fh.readline().split()[1:]]
    return f[3] + f[4], sum(f)


def _run(tmp: Path, name: str, doc: dict, backend: str = "ray") -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(yaml.safe_dump({"name": name, **doc}))
    out = tmp / f"{name}-{backend}"
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(p), "--out", str(out), "--backend", backend, "-q"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"{name} ({backend}): exit {r.returncode}: {(r.stdout + r.stderr).strip()[-500:]}")
    return out


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def _jobs(out: Path) -> dict[str, dict]:
    with open(out / "jobs.csv") as fh:
        return {r["job_id"]: r for r in csv.DictReader(fh)}


def _mpi(job: str, size: int, program: str, *args, submit: float = 0.0) -> dict:
    app = {"kind": "mpi", "program": str(PROGRAMS / program), "args": [str(a) for a in args], "estimate_s": 5}
    return {"id": job, "size": size, "submit_s": submit, "app": app}


def _pingpong(latency_us: float, rounds: int, wait_mode: str = "block") -> dict:
    """2 nodes, TDF 1 (emulated = real), NLS (every process runs), the ping-pong program; a job that
    spins on an ideal network runs MPI direct, any other mirrored (apps/mpi_wrap.py)."""
    job = _mpi("pp", 2, "pingpong.py", rounds, 1)
    job["app"]["wait_mode"] = wait_mode
    return {
        "cluster": {"nodes": 2, "network": {"latency_us": latency_us}},
        "clock": {"tdf": 1, "rate_probe_s": 0.3},
        "scheduler": {"name": "local"},
        "workload": {"jobs": [job]},
    }


def bench_latency(tmp: Path, rounds: int) -> dict:
    cmd = [str(BIN / "mpiexec"), "-n", "2", sys.executable, str(PROGRAMS / "pingpong.py"), str(rounds), "1"]
    plain = json.loads(subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout)
    fig = {
        "plain_mpiexec_one_way_us": plain["one_way_us_median"],
        "plain_mpiexec_barrier_us": plain["barrier_us_median"],
    }
    # "direct": a job that spins (MPI's own calls); "mirrored": one that blocks, the default.
    for name, mode in (("direct", "spin"), ("mirrored", "block")):
        out = _run(tmp, f"latency-{name}", _pingpong(0, rounds, mode))
        tb = json.loads((out / "logs" / "pp.0.out").read_text())
        fig[f"testbed_{name}_one_way_us"] = tb["one_way_us_median"]
        fig[f"{name}_one_way_ratio"] = tb["one_way_us_median"] / plain["one_way_us_median"]
        fig[f"testbed_{name}_barrier_us"] = tb["barrier_us_median"]
        fig[f"{name}_barrier_ratio"] = tb["barrier_us_median"] / plain["barrier_us_median"]
    return fig


def bench_link(tmp: Path, rounds: int) -> dict:
    doc = _pingpong(100, rounds)
    out = _run(tmp, "link", doc)
    tb = json.loads((out / "logs" / "pp.0.out").read_text())
    return {
        "link_100us_one_way_us": tb["one_way_us_median"],
        "link_100us_error": tb["one_way_us_median"] / 100 - 1,
    }


def bench_start(tmp: Path, reps: int) -> dict:
    jobs = []
    for i in range(reps):
        jobs.append(_mpi(f"mpi{i}", 16, "where.py", submit=2.0 * i))
        jobs.append(
            {"id": f"syn{i}", "size": 16, "submit_s": 2.0 * i + 1.0, "app": {"iterations": 2, "gcomp": 5}}
        )
    doc = {"cluster": {"nodes": 16}, "clock": {"rate_probe_s": 0.5}, "scheduler": {"name": "batch"},
           "workload": {"jobs": jobs}}  # fmt: skip
    out = _run(tmp, "start", doc)
    evs = _events(out)
    start = {e["job"]: e["t"] for e in evs if e["kind"] == "job_started"}
    ready: dict[str, float] = {}
    init: dict[str, float] = {}
    for e in evs:
        if e["kind"] == "proc_ready" and e["rank"] < 16:
            ready[e["job"]] = max(ready.get(e["job"], 0.0), e["t"])
        elif e["kind"] == "progress" and e.get("unit") == "collectives" and e["value"] == 0:
            init[e["job"]] = max(init.get(e["job"], 0.0), e["t"])
    tdf = json.loads((out / "summary.json").read_text()).get("tdf")

    def med(d: dict, prefix: str) -> float:
        return statistics.median((d[j] - start[j]) * 1000 for j in d if j.startswith(prefix))

    return {
        "start_tdf": tdf,
        "mpi16_started_ms": med(ready, "mpi"),
        "mpi16_past_mpi_init_ms": med(init, "mpi"),
        "synthetic16_started_ms": med(ready, "syn"),
    }


#: msgcpu's message sizes: 1 byte, NAS CG.A's messages (23,744 B at 4 ranks) and MG.A's (157,866 B).
MSGCPU_SIZES = (1, 24000, 160000)


def _trace_ops(program: str, args: list[str], size: int) -> list[tuple[float, int]]:
    """Per rank of a recorded trace: (the CPU the simulator charges it, s: the kind's model's computes,
    its CPU between MPI calls and each message's; its mirrored messages: sends and receives, and one each
    way per collective, which the mirror carries as a tbcomm barrier)."""
    from testbed.apps.base import Compute, SimContext
    from testbed.apps.mpi import Mpi, MpiConfig
    from testbed.apps.mpi_trace import trace_path

    cfg = MpiConfig(program=program, args=tuple(args))
    ranks = json.loads(trace_path(program, tuple(args), size).read_text())["ranks"]
    out = []
    for rank, ops in enumerate(ranks):
        model = Mpi.model(cfg, SimContext(rank, size + 1, lambda: 0.0))  # size ranks and the head
        cpu = sum(op.cpu_s for op in model if isinstance(op, Compute))
        msgs = sum(1 for op in ops if op[0] in ("s", "r")) + 2 * sum(1 for op in ops if op[0] == "k")
        out.append((cpu, msgs))
    return out


def bench_msgcpu(tmp: Path, rounds: int) -> dict:
    fig: dict = {}
    program = str(PROGRAMS / "pingpong.py")
    for latency in (0, 100):
        for nbytes in MSGCPU_SIZES:
            # The 1-round job first, the measured one once it is surely done: NLS would run them together.
            base, job = _mpi("pp1", 2, "pingpong.py", 1, nbytes), _mpi("pp", 2, "pingpong.py", rounds, nbytes)
            job["submit_s"] = 2.0
            doc = _pingpong(latency, rounds)
            doc["workload"]["jobs"] = [base, job]
            name = f"msgcpu-{latency}us-{nbytes}B"
            _run(tmp, name, doc, "sim")  # records the two traces (cached: once per size)
            out = _run(tmp, name, doc)
            cpu = {(e["job"], e["rank"]): e["cpu_s"] for e in _events(out) if e["kind"] == "proc_exited"}
            times = {j: (float(r["starting_time"]), float(r["finish_time"])) for j, r in _jobs(out).items()}
            if times["pp1"][1] > times["pp"][0]:
                raise RuntimeError(f"{name}: the 1-round job was still running when the measured one started")
            t_job = _trace_ops(program, job["app"]["args"], 2)
            t_base = _trace_ops(program, base["app"]["args"], 2)
            extra = []
            for rank in range(2):
                real = cpu[("pp", rank)] - cpu[("pp1", rank)]
                model = t_job[rank][0] - t_base[rank][0]
                msgs = t_job[rank][1] - t_base[rank][1]
                extra.append((real - model) / msgs * 1e6)
            one_way = json.loads((out / "logs" / "pp.0.out").read_text())["one_way_us_median"]
            key = f"msgcpu_{latency}us_{nbytes}B"
            fig[f"{key}_extra_cpu_us_per_msg"] = statistics.mean(extra)
            fig[f"{key}_real_cpu_s_per_rank"] = statistics.mean(cpu[("pp", r)] for r in range(2))
            fig[f"{key}_model_cpu_s_per_rank"] = statistics.mean(t[0] for t in t_job)
            fig[f"{key}_one_way_us"] = one_way
    return fig


#: The sizes collcpu hands each collective, MB: NAS FT.A on 4 ranks hands its Alltoalls 32 MB a rank.
COLLCPU_MB = (8, 16, 32)
#: The rank counts collcpu runs on.
COLLCPU_RANKS = (2, 4)


def bench_collcpu(tmp: Path, reps: int) -> dict:
    """MPI's CPU inside Alltoall and Allreduce per byte handed, as a testbed rank spends it
    (tests/programs/collcpu.py as an MPI job alone on 2 and on 4 nodes: MPICH's network module between
    the nodes, the mirror's barrier and the node's quota, as a NAS kernel's ranks have them), median over
    COLLCPU_MB and ``reps`` runs, beside a plain copy of the same bytes in the same runs and the figures
    the simulator charges (apps/mpi.py, collective_cpu_s)."""
    from testbed.apps.mpi import COLLECTIVE_CPU_PER_BYTE_S, REDUCTION_CPU_PER_BYTE_S

    fig: dict = {}
    for ranks in COLLCPU_RANKS:
        got: dict[str, list[float]] = {}
        for rep in range(reps):
            doc = {"cluster": {"nodes": ranks}, "scheduler": {"name": "batch"},
                   "workload": {"jobs": [_mpi("cc", ranks, "collcpu.py", *COLLCPU_MB)]}}  # fmt: skip
            out = _run(tmp, f"collcpu-{ranks}-{rep}", doc)
            for op, by_size in json.loads((out / "logs" / "cc.0.out").read_text()).items():
                got.setdefault(op, []).extend(by_size.values())
        for op, values in got.items():
            fig[f"collcpu_{op}_{ranks}_ranks_ns_per_byte"] = statistics.median(values)
    fig["collcpu_charged_alltoall_ns_per_byte"] = COLLECTIVE_CPU_PER_BYTE_S * 1e9
    fig["collcpu_charged_allreduce_ns_per_byte"] = REDUCTION_CPU_PER_BYTE_S * 1e9
    return fig


def bench_fidelity(tmp: Path) -> dict:
    jobs = [
        _mpi("mpi", 4, "ring_allreduce.py", 20, 50),
        {"id": "syn", "size": 4, "submit_s": 0.0, "app": {"iterations": 20, "gcomp": 100}},
    ]
    # Batch, one job at a time on the 4 nodes: each runs alone.
    doc = {"cluster": {"nodes": 4}, "clock": {"rate_probe_s": 0.5}, "scheduler": {"name": "batch"},
           "workload": {"jobs": jobs}}  # fmt: skip
    t0 = time.monotonic()
    sim = _jobs(_run(tmp, "fidelity", doc, "sim"))
    sim_s = time.monotonic() - t0
    real = _jobs(_run(tmp, "fidelity", doc, "ray"))

    def ratio(j: str) -> float:
        def took(r):
            return float(r["finish_time"]) - float(r["starting_time"])

        return took(real[j]) / took(sim[j])

    return {
        "fidelity_sim_wall_s": sim_s,
        "mpi_real_over_sim": ratio("mpi"),
        "synthetic_real_over_sim": ratio("syn"),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="latency,link,start,fidelity")
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", default=None, help="keep the runs' folders here")
    args = ap.parse_args()
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        return _bench(args, Path(args.keep))
    with tempfile.TemporaryDirectory(prefix="tb-mpi-bench-") as tmp:  # each run left its folder before
        return _bench(args, Path(tmp))


def _bench(args: argparse.Namespace, tmp: Path) -> int:
    os.environ.setdefault(TRACES_ENV, str(tmp / "traces"))
    idle0 = _idle()
    out: dict = {}
    for part in args.only.split(","):
        try:
            if part == "latency":
                out.update(bench_latency(tmp, args.rounds))
            elif part == "link":
                out.update(bench_link(tmp, args.rounds))
            elif part == "start":
                out.update(bench_start(tmp, args.reps))
            elif part == "fidelity":
                out.update(bench_fidelity(tmp))
            elif part == "msgcpu":
                out.update(bench_msgcpu(tmp, args.rounds))
            elif part == "collcpu":
                out.update(bench_collcpu(tmp, args.reps))
            else:
                raise ValueError(f"unknown part {part!r}")
        except Exception as exc:  # noqa: BLE001 - the figure says why it is missing
            out[part] = f"error: {exc}"
        print(json.dumps({k: v for k, v in out.items()}), flush=True)
    idle1 = _idle()
    out["host_idle_share"] = (idle1[0] - idle0[0]) / max(1e-9, idle1[1] - idle0[1])
    for k, v in out.items():
        print(f"{k:32} {v:.3f}" if isinstance(v, float) else f"{k:32} {v}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
