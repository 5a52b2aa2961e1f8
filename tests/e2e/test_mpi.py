"""Users' own mpi4py programs on the emulated cluster (the ``mpi`` kind, apps/mpi.py; issue 20): the
unmodified ring + allreduce program of tests/programs under gang and under HYBRID on real processes,
each rank the node agent's own worker inside its node's cgroup; and bad input and faults, each ending
its job with one ``error:`` line naming the job and leaving no process or cgroup."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from testbed.apps.speed import stamp_of

from .conftest import kill_tree, run_ids, run_marked_pids, start_cli, wait_clean, wait_for_event

pytestmark = pytest.mark.slow

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"
RING = PROGRAMS / "ring_allreduce.py"


def _cli(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def _scenario(tmp_path: Path, name: str, scheduler: dict, jobs: list[dict], **extra) -> Path:
    doc = {
        "name": name,
        "cluster": {"nodes": 4},
        "clock": {"rate_probe_s": 0.3},
        "scheduler": scheduler,
        "workload": {"jobs": jobs},
        **extra,
    }
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


def _mpi(job: str, size: int, program: Path | str, *args, **app) -> dict:
    app = {"kind": "mpi", "program": str(program), "args": list(args), "estimate_s": 5, **app}
    return {"id": job, "size": size, "app": app}


def _jobs(out: Path) -> dict[str, dict]:
    with open(out / "jobs.csv") as fh:
        return {r["job_id"]: r for r in csv.DictReader(fh)}


def _events(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "scheduler",
    [
        {"name": "gang", "params": {"mpl": 2, "quantum_ms": 50}},
        {"name": "hybrid", "params": {"mpl": 2}},
    ],
    ids=["gang", "hybrid"],
)
def test_unmodified_mpi4py_program_runs_to_completion_on_real_processes(tmp_path, scheduler):
    # Two ring+allreduce jobs share nodes 0-1 (gang: in alternate slots; HYBRID: side by side), and a
    # third program reports where each rank runs.
    jobs = [
        _mpi("ring4", 4, RING, 6, 10),
        _mpi("ring2", 2, RING, 6, 10),
        _mpi("where", 2, PROGRAMS / "where.py"),
    ]
    out = tmp_path / "out"
    p = _cli(["run", str(_scenario(tmp_path, "mpi", scheduler, jobs)), "--out", str(out)])
    assert p.returncode == 0, p.stdout + p.stderr
    rows = _jobs(out)
    assert {j: r["final_state"] for j, r in rows.items()} == dict.fromkeys(rows, "COMPLETED_SUCCESSFULLY")
    # The program's own check passed and rank 0 said so.
    assert "ring_allreduce: 4 ranks, 6 iterations" in (out / "logs" / "ring4.0.out").read_text()
    assert "ring_allreduce: 2 ranks, 6 iterations" in (out / "logs" / "ring2.0.out").read_text()
    evs = _events(out)
    started = {(e["job"], e["rank"]): e for e in evs if e["kind"] == "proc_started"}
    exited = {(e["job"], e["rank"]): e for e in evs if e["kind"] == "proc_exited"}
    run_id = next(e["run_id"] for e in evs if e.get("run_id"))
    for rank in range(2):
        where = json.loads((out / "logs" / f"where.{rank}.out").read_text())
        assert where["rank"] == rank and where["size"] == 2
        # The process the agent started, signals and accounts is the MPI rank itself (no proxy between)...
        assert where["pid"] == started[("where", rank)]["pid"]
        # ... inside its node's cgroup (the envelope) while it runs the program.
        node = started[("where", rank)]["node"]
        assert any(f"/testbed/{run_id}/node{node}" in c for c in where["cgroups"]), where["cgroups"]
    # Each rank's CPU time comes from the kernel (the program computes 2 x 6 x 10 ms at least).
    for rank in range(4):
        assert exited[("ring4", rank)]["code"] == 0
        assert exited[("ring4", rank)]["cpu_s"] >= 0.12
    # Every rank reported MPI_Init's end (the job's start-up, apps/mpi.py).
    inits = {(e["job"], e["rank"]) for e in evs if e["kind"] == "progress" and e["unit"] == "collectives"}
    assert {(j, r) for j, r in started if r < {"ring4": 4, "ring2": 2, "where": 2}[j]} <= inits
    # The host's speed, measured before the run's jobs and after them (their simulator models are measured
    # ones): the run's figure is the mean of the two.
    summary = json.loads((out / "summary.json").read_text())
    before, after = summary["host_speeds_s"]
    assert before > 0 and after > 0
    assert summary["host_speed_s"] == pytest.approx((before + after) / 2, abs=1e-6)
    assert wait_clean(out) == ([], [])


@pytest.mark.parametrize("scheduler", ["gang", "hybrid"])
def test_unmodified_mpi4py_program_runs_in_the_simulator_from_a_recorded_trace(tmp_path, scheduler):
    jobs = [_mpi("ring4", 4, RING, 6, 10), _mpi("ring2", 2, RING, 6, 10)]
    scn = _scenario(tmp_path, "mpisim", {"name": scheduler, "params": {"mpl": 2}}, jobs)
    env = {**os.environ, "TESTBED_MPI_TRACES": str(tmp_path / "traces")}
    runs = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        cmd = [sys.executable, "-m", "testbed.cli", "run", str(scn), "--backend", "sim", "--out", str(out)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        rows = _jobs(out)
        assert {r["final_state"] for r in rows.values()} == {"COMPLETED_SUCCESSFULLY"}, rows
        runs.append((p.stderr, rows))
    # The first run recorded one trace per job shape on real processes, and said so; the second used them.
    recorded = [ln for ln in runs[0][0].splitlines() if ln.startswith("mpi: recording ring_allreduce.py")]
    assert len(recorded) == 2, runs[0][0]
    assert "recording" not in runs[1][0]
    assert len(list((tmp_path / "traces").glob("ring_allreduce-*.json"))) == 2
    # Same trace, same policy: the same simulated run.
    assert [r["finish_time"] for r in runs[0][1].values()] == [r["finish_time"] for r in runs[1][1].values()]
    # The replay computes what the program computed: 2 x 6 x 10 ms per rank at least.
    assert all(float(r["finish_time"]) - float(r["starting_time"]) >= 0.12 for r in runs[0][1].values())
    # Each trace is stamped with the host's speed around its recording (apps/speed.py); told a host
    # twice as slow as the slower recording, the simulator replays every job's CPU at least twice as
    # long, and so the job nearly so: its messages and its turns under gang do not scale (ring4 under
    # gang took 1.885x once; 1.6 leaves room, and the unscaled replay would be 1.0).
    stamps = [stamp_of(json.loads(t.read_text())) for t in (tmp_path / "traces").glob("*.json")]
    assert all(s > 0 for s in stamps), stamps
    out = tmp_path / "slow"
    cmd = [sys.executable, "-m", "testbed.cli", "run", str(scn), "--backend", "sim", "--out", str(out),
           "--set", f"cluster.host_speed_s={2 * max(stamps)}"]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    slow = _jobs(out)
    for job, r in runs[0][1].items():
        was = float(r["finish_time"]) - float(r["starting_time"])
        got = float(slow[job]["finish_time"]) - float(slow[job]["starting_time"])
        assert got >= 1.6 * was, (job, was, got)


@pytest.mark.extended  # about 3 minutes: run in CI when it fits (.ci/run)
def test_every_registered_scheduler_runs_mpi_jobs_as_it_runs_synthetic_ones(tmp_path):
    from testbed.schedulers import registry

    names = registry.names()
    jobs = [_mpi("mpi", 2, RING, 4, 5), {"id": "syn", "size": 2, "app": {"iterations": 5, "gcomp": 5}}]
    scn = _scenario(
        tmp_path, "every", {"name": "batch"}, jobs, cluster={"nodes": 2}, sweep={"scheduler.name": names}
    )
    out = tmp_path / "out"
    p = _cli(["run", str(scn), "--out", str(out), "-q"], timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    for name in names:
        rows = _jobs(out / name)
        # The MPI job ends as the synthetic one does: both completed, or both refused by a policy made for
        # another kind of job (the divisible-load ones).
        assert rows["mpi"]["final_state"] == rows["syn"]["final_state"], (name, rows)
        assert rows["mpi"]["final_state"] in ("COMPLETED_SUCCESSFULLY", "REJECTED"), (name, rows)
    ok = [n for n in names if _jobs(out / n)["mpi"]["final_state"] == "COMPLETED_SUCCESSFULLY"]
    assert {
        "batch",
        "local",
        "gang",
        "paired",
        "spin",
        "dcs",
        "sb",
        "sy",
        "pb",
        "pbsb",
        "cc",
        "hybrid",
        "1gs",
    } <= set(ok)


def test_each_rank_reports_its_compute_between_mpi_calls_not_its_waits(tmp_path):
    # Rank 0 computes 0.3 s of CPU before a Barrier that ranks 1 and 2 enter at once and wait in: a
    # waiting rank's compute is its start (imports, MPI_Init) alone, as a recording's first compute is.
    jobs = [_mpi("busy", 3, PROGRAMS / "busy_barrier.py", 0.3)]
    out = tmp_path / "out"
    p = _cli(["run", str(_scenario(tmp_path, "busy", {"name": "batch"}, jobs)), "--out", str(out)])
    assert p.returncode == 0, p.stdout + p.stderr
    compute = {
        e["rank"]: e["value"] for e in _events(out) if e["kind"] == "progress" and e["unit"] == "compute_s"
    }
    assert sorted(compute) == [0, 1, 2]
    exited = {e["rank"]: e for e in _events(out) if e["kind"] == "proc_exited" and e["job"] == "busy"}
    for waiting in (1, 2):
        # Its Barrier lasted as long as rank 0's 0.3 s of CPU at the node's rate, and counts for none of it.
        assert 0.27 <= compute[0] - compute[waiting] <= 0.35, compute
        assert compute[waiting] < exited[waiting]["cpu_s"]  # MPI's and the mirror's CPU is not compute
    # That CPU is reported apart (mpi_cpu_s), the spinning in a receive left out: the mirror's relay.
    mpi = {
        e["rank"]: e["value"] for e in _events(out) if e["kind"] == "progress" and e["unit"] == "mpi_cpu_s"
    }
    spun = {
        e["rank"]: e["value"] for e in _events(out) if e["kind"] == "progress" and e["unit"] == "spin_cpu_s"
    }
    assert sorted(mpi) == sorted(spun) == [0, 1, 2]
    for rank, cpu in mpi.items():
        whole = compute[rank] + cpu + spun[rank]
        assert 0 < cpu and 0 <= spun[rank] and whole <= exited[rank]["cpu_s"], (rank, cpu, spun, exited[rank])
    # No rate is made of it: it is a time, not work done.
    summary = json.loads((out / "summary.json").read_text())
    assert "collectives_per_s.mpi" in summary
    assert not [k for k in summary if k.startswith(("compute_s", "mpi_cpu_s", "spin_cpu_s"))], summary
    assert wait_clean(out) == ([], [])


def test_a_program_that_fails_while_recorded_for_the_simulator_ends_the_run_with_its_line(tmp_path):
    scn = _scenario(tmp_path, "simfail", {"name": "batch"}, [_mpi("bad", 2, PROGRAMS / "raises.py")])
    env = {**os.environ, "TESTBED_MPI_TRACES": str(tmp_path / "traces")}
    cmd = [
        sys.executable,
        "-m",
        "testbed.cli",
        "run",
        str(scn),
        "--backend",
        "sim",
        "--out",
        str(tmp_path / "o"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 1, p.stdout + p.stderr
    errors = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "rank 1: ValueError: rank 1 found bad input" in errors[0], errors
    assert not list((tmp_path / "traces").glob("*.json"))  # nothing cached from a failed recording


def test_missing_program_is_refused_by_validate(tmp_path):
    scn = _scenario(tmp_path, "nofile", {"name": "batch"}, [_mpi("j", 2, "no/such/prog.py")])
    p = _cli(["validate", str(scn)])
    assert p.returncode == 2, p.stdout + p.stderr
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "workload.jobs.0.app.program" in lines[0] and "no/such/prog.py" in lines[0]
    # Relative to the scenario's folder, as a trace path is.
    assert str(tmp_path / "no/such/prog.py") in lines[0]


def test_faults_each_end_their_job_with_one_error_line_and_leave_nothing(tmp_path):
    jobs = [
        _mpi("raises", 2, PROGRAMS / "raises.py"),
        _mpi("aborts", 2, PROGRAMS / "aborts.py"),
        _mpi("late", 2, PROGRAMS / "late_init.py", init_timeout_s=1.0),
    ]
    scn = _scenario(tmp_path, "faults", {"name": "batch"}, jobs, cluster={"nodes": 6})
    out = tmp_path / "out"
    shm_before = set(Path("/dev/shm").glob("mpich_shm_*"))
    p = _cli(["run", str(scn), "--out", str(out)])
    assert p.returncode == 3, p.stdout + p.stderr
    # MPICH unlinks a rank's /dev/shm segment only in MPI_Finalize, which these ranks never reach: each
    # left 1 MiB of memory there until the wrapper unlinked it after MPI_Init (apps/mpi_wrap.py).
    assert set(Path("/dev/shm").glob("mpich_shm_*")) - shm_before == set()
    errors = [ln for ln in p.stdout.splitlines() + p.stderr.splitlines() if ln.startswith("error:")]
    by_job = {j: [e for e in errors if f"job {j} " in e] for j in ("raises", "aborts", "late")}
    assert all(len(v) == 1 for v in by_job.values()), errors
    assert "ValueError: rank 1 found bad input" in by_job["raises"][0]
    assert "MPI_Abort" in by_job["aborts"][0] and "7" in by_job["aborts"][0]
    assert "rank(s) 1 did not reach MPI_Init" in by_job["late"][0]
    assert {r["final_state"] for r in _jobs(out).values()} == {"COMPLETED_FAILED"}
    assert wait_clean(out) == ([], [])


def test_a_call_not_carried_over_an_emulated_link_is_refused_with_one_line(tmp_path):
    # A nonblocking receive, and a nonblocking collective (any call that moves data unmirrored).
    jobs = [_mpi("irecv", 2, PROGRAMS / "irecv.py"), _mpi("ibarrier", 2, PROGRAMS / "irecv.py", "ibarrier")]
    for latency, code in ((100, 3), (0, 0)):
        scn = _scenario(
            tmp_path,
            f"irecv{latency}",
            {"name": "batch"},
            jobs,
            cluster={"nodes": 2, "network": {"latency_us": latency}},
        )
        out = tmp_path / f"out{latency}"
        p = _cli(["run", str(scn), "--out", str(out)])
        assert p.returncode == code, p.stdout + p.stderr
        errors = [ln for ln in p.stdout.splitlines() + p.stderr.splitlines() if ln.startswith("error:")]
        if latency:
            # Never silently on the host's ideal network.
            assert len(errors) == 2, errors
            for job, call in (("irecv", "Irecv"), ("ibarrier", "Ibarrier")):
                (line,) = [e for e in errors if f"job {job} " in e]
                assert f"{call} is not carried over the emulated link" in line, errors
        else:
            assert errors == []  # on an ideal network it runs
        assert wait_clean(out) == ([], [])


def test_node_killed_under_a_running_mpi_job_fails_it_and_leaves_nothing(tmp_path):
    jobs = [_mpi("long", 4, RING, 2000, 10)]
    faults = {"script": [{"at_s": 1.0, "node": 2, "kind": "down"}]}
    scn = _scenario(tmp_path, "down", {"name": "batch"}, jobs, faults=faults)
    out = tmp_path / "out"
    p = _cli(["run", str(scn), "--out", str(out)])
    # A job failed by a fault the scenario scripted ended as planned (exit 0, as tests/e2e/test_node_faults
    # has it); its one reason names the node.
    assert p.returncode == 0, p.stdout + p.stderr
    row = _jobs(out)["long"]
    assert row["final_state"] == "COMPLETED_FAILED"
    assert row["reason"] == "node 2 went down (scripted fault)", row
    # The rank there really was killed (and MPI's other ranks with the job).
    evs = _events(out)
    exits = [e for e in evs if e["kind"] == "proc_exited" and e["job"] == "long"]
    assert len(exits) == 5 and all(e["reason"] for e in exits), exits
    assert wait_clean(out) == ([], [])


def test_kill_9_of_a_node_agent_under_a_running_mpi_job_fails_it_with_one_line(tmp_path):
    # Nodes 2 and 3 share an agent process (nodes_per_process 2), killed while the job's ranks are past
    # MPI_Init: their ranks die with it (PR_SET_PDEATHSIG), the job fails naming one of those nodes, and
    # the run exits 3 with one line, leaving no rank and no process manager.
    jobs = [_mpi("long", 4, RING, 5000, 10)]
    scn = _scenario(tmp_path, "agentkill", {"name": "gang", "params": {"mpl": 2}}, jobs,
                    cluster={"nodes": 4, "nodes_per_process": 2})  # fmt: skip
    out = tmp_path / "out"
    p = start_cli(["run", str(scn), "--out", str(out), "-q"])
    try:
        info = wait_for_event(out, lambda e: e["kind"] == "run_info" and e.get("node") == 3 and "pid" in e)
        for rank in range(4):
            wait_for_event(
                out, lambda e, r=rank: e["kind"] == "progress" and e["job"] == "long" and e["rank"] == r
            )
        os.kill(info["pid"], signal.SIGKILL)
        text, _ = p.communicate(timeout=180)
    finally:
        kill_tree(p)
    assert p.returncode == 3, text
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "job long failed" in errors[0], text
    assert "node 2" in errors[0] or "node 3" in errors[0], text
    assert wait_clean(out) == ([], [])


def test_kill_9_of_the_driver_leaves_no_rank_and_no_process_manager(tmp_path):
    # The janitor finds MPI ranks and the job's process manager (the head) by the run id in their
    # environment, as every worker: there is no mpiexec or proxy (docs/architecture.md, "MPI programs").
    scn = _scenario(
        tmp_path, "driver", {"name": "gang", "params": {"mpl": 2}}, [_mpi("long", 4, RING, 5000, 10)]
    )
    out = tmp_path / "out"
    p = start_cli(["run", str(scn), "--out", str(out), "-q"])
    try:
        # Every rank is past MPI_Init (its first report) and the head serves the job.
        for rank in range(4):
            wait_for_event(
                out, lambda e, r=rank: e["kind"] == "progress" and e["job"] == "long" and e["rank"] == r
            )
        pids = {e["pid"] for e in _node_events(out) if e["kind"] == "proc_started" and e["job"] == "long"}
        assert len(pids) == 5 and pids <= set(run_marked_pids(run_ids(out)))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        kill_tree(p)
    assert wait_clean(out) == ([], [])


def _node_events(out: Path) -> list[dict]:
    evs = []
    for f in (out / "events").glob("node*.jsonl"):
        evs += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return evs
