"""The parallel jobs' slowdown against a dedicated cluster (issue 22, deliverable 6; paper 004): each
completed parallel job's execution time over the same job's alone on nodes at the rates of those it ran
on, simulated under batch (testbed/results/dedicated.py); in jobs.csv, summary.json, comparison.csv and
the report only for runs with local users."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from testbed.apps.speed import stamp

from testbed import runner
from testbed.results import comparison, report
from testbed.results import summary as results
from testbed.results.dedicated import Dedicated
from testbed.scenario import ScenarioError, load
from testbed.scenario.model import ResultsConfig, from_file_or_doc
from testbed.scenario.workload import build

ROOT = Path(__file__).resolve().parents[2]

HETERO = {"groups": [{"count": 2, "cpu_rate": 0.43}, {"count": 2, "cpu_rate": 1.0}]}
#: 8 iterations of 200 ms of CPU at rate 1.0 (1.6 s), a barrier after each.
PARALLEL = {"id": "par", "size": 4, "app": {"iterations": 8, "gcomp": 200.0, "barrier": True}}
#: The same work with no communication: alone, it runs at its nodes' rate and nothing else.
COMPUTE = {"iterations": 8, "gcomp": 200.0, "barrier": False}


def _user(node: int, at: float, session_s: float = 30.0) -> dict:
    app = {"kind": "localuser", "profile": "cpu", "session_s": session_s, "node": node}
    return {"id": f"user{node}", "size": 1, "submit_s": at, "app": app}


def _scn(jobs, cluster=None, scheduler="local"):
    doc = {
        "cluster": cluster or HETERO,
        "scheduler": {"name": scheduler},
        "monitoring": {"enabled": False},
        "workload": {"seed": 3, "jobs": list(jobs)},
    }
    return from_file_or_doc(doc=doc)


def _run(scn, tmp_path):
    out = tmp_path / "run"
    summary = runner.run_once(scn, "sim", out)
    with open(out / "jobs.csv") as fh:
        reader = csv.DictReader(fh)
        return out, summary, reader.fieldnames, {r["job_id"]: r for r in reader}


NAS = {"id": "par", "size": 4, "app": {"kind": "nas", "kernel": "is", "class": "A"}}
#: Paper 004's network (Fast Ethernet), so that the messages count.
NETWORKED = dict(HETERO, network={"latency_us": 100, "bandwidth_mbps": 100})


@pytest.mark.parametrize("scheduler", ["local", "dynamic", "ccs"])
@pytest.mark.parametrize("job", [PARALLEL, NAS], ids=["synthetic", "nas-is-a"])
def test_a_job_alone_on_its_nodes_has_slowdown_1(job, scheduler, tmp_path):
    # The local user arrives after the job has ended: the job ran alone on the cluster (rank by rank, as
    # beside local users), its reference alone under batch. Measured: exactly 1.0 in all six.
    scn = _scn([job, _user(0, at=60.0, session_s=1.0)], cluster=NETWORKED, scheduler=scheduler)
    _, summary, columns, rows = _run(scn, tmp_path)
    assert columns[-2:] == [results.LOCAL_SLOWDOWN, results.PARALLEL_SLOWDOWN]
    assert float(rows["par"][results.PARALLEL_SLOWDOWN]) == pytest.approx(1.0, abs=1e-6)  # 6 decimals
    assert summary[results.PARALLEL_SLOWDOWN_MEAN] == pytest.approx(1.0, abs=1e-9)
    assert summary[results.PARALLEL_SLOWDOWN_MAX] == pytest.approx(1.0, abs=1e-9)
    assert rows["user0"][results.PARALLEL_SLOWDOWN] == ""  # a session has its own slowdown


def test_the_reference_runs_at_the_nodes_rates_not_the_clusters_fastest(tmp_path):
    scn = _scn([PARALLEL, _user(0, at=60.0, session_s=1.0)])
    _, _, _, rows = _run(scn, tmp_path)
    assert float(rows["par"]["execution_time"]) == pytest.approx(1.6 / 0.43, rel=1e-5)  # paced by 0.43
    assert float(rows["par"][results.PARALLEL_SLOWDOWN]) == pytest.approx(1.0, abs=1e-6)


def test_a_job_beside_a_cpu_user_under_plain_linux_is_slowed(tmp_path):
    # From t = 0 a CPU user (65 % duty) shares slow node 0 with rank 0, equal nice: while computing, the
    # rank gets half of it, and the barriers make the whole job wait for it.
    scn = _scn([PARALLEL, _user(0, at=0.0)])
    _, summary, _, rows = _run(scn, tmp_path)
    slowdown = float(rows["par"][results.PARALLEL_SLOWDOWN])
    assert 1.2 < slowdown < 2.0
    assert summary[results.PARALLEL_SLOWDOWN_MEAN] == pytest.approx(slowdown, rel=1e-5)
    # Its reference is the first test's run time, however the run went.
    alone = float(rows["par"]["execution_time"]) / slowdown
    assert alone == pytest.approx(Dedicated(scn).time("par", (0, 1, 2, 3)), rel=1e-5)


def test_each_node_runs_at_its_own_rate_in_the_reference():
    jobs = [
        {"id": "c", "size": 2, "app": COMPUTE},
        {"id": "b", "size": 2, "app": dict(COMPUTE, barrier=True)},
    ]
    d = Dedicated(_scn(jobs))
    work = 8 * 0.2  # CPU seconds at rate 1.0
    # Compute only: a rank takes its work over its node's rate (the log's times are rounded to 1 ns).
    assert d.time("c", (0, 1)) == pytest.approx(work / 0.43, rel=1e-9)
    assert d.time("c", (2, 3)) == pytest.approx(work, rel=1e-9)
    assert d.time("c", (0, 2)) == pytest.approx(work / 0.43, rel=1e-9)  # the job ends with its slowest rank
    # With a barrier per iteration, the fast rank waits for the slow one each time: the slow rate's time
    # plus 8 barriers' messages (latency 0 here).
    assert d.time("b", (0, 2)) == pytest.approx(work / 0.43, rel=1e-9)


def test_a_generated_job_sized_for_the_slowest_node_takes_its_duration_there():
    # A generated job's length is for the cluster's slowest node (0.43): alone on slow nodes its reference
    # is its work over 0.43, about the drawn duration (the kind rounds its steps' work), on fast nodes
    # 0.43 of that.
    gen = {
        "kind": "poisson",
        "count": 1,
        "mean_interarrival_s": 1.0,
        "duration": {"dist": "fixed", "mean_s": 5.0},
        "size": {"min": 2, "max": 2},
        "classes": [{"name": "c", "app": {"kind": "synthetic", "barrier": False}}],
    }
    doc = {"cluster": HETERO, "scheduler": {"name": "local"}, "workload": {"seed": 1, "generator": gen}}
    scn = from_file_or_doc(doc=doc)
    [job] = build(scn)
    d = Dedicated(scn)
    work = job.app.iterations * job.app.gcomp / 1000.0
    assert work / 0.43 == pytest.approx(5.0, rel=0.05)
    assert d.time(job.job_id, (0, 1)) == pytest.approx(work / 0.43, rel=1e-9)
    assert d.time(job.job_id, (2, 3)) == pytest.approx(work, rel=1e-9)


def test_the_reference_stands_for_the_host_speed_it_is_given(tmp_path, monkeypatch):
    # A measured model (here an MPI program's trace, stamped as recorded at speed 0.1) replays at the
    # speed of the host the reference stands for: a real run's own, else the scenario's.
    from testbed.apps.mpi_trace import TRACES_ENV, trace_path

    monkeypatch.setenv(TRACES_ENV, str(tmp_path / "traces"))
    prog = tmp_path / "prog.py"
    prog.write_text("from mpi4py import MPI\n")
    path = trace_path(str(prog), (), 2)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"ranks": [[["c", 1.5]], [["c", 1.0]]], **stamp(0.1)}))
    job = {"id": "m", "size": 2, "app": {"kind": "mpi", "program": str(prog)}}
    fast = {"nodes": 2, "network": {"latency_us": 0}}
    assert Dedicated(_scn([job], fast)).time("m", (0, 1)) == pytest.approx(1.5, rel=1e-6)
    assert Dedicated(_scn([job], fast), None, 0.3).time("m", (0, 1)) == pytest.approx(4.5, rel=1e-6)
    slow = dict(fast, host_speed_s=0.2)
    assert Dedicated(_scn([job], slow)).time("m", (0, 1)) == pytest.approx(3.0, rel=1e-6)
    assert Dedicated(_scn([job], slow), None, 0.05).time("m", (0, 1)) == pytest.approx(0.75, rel=1e-6)
    # A job whose own compute is calibrated (compute_scale) stands alone at that compute, on top of the
    # host's speed.
    half = {**job, "app": {**job["app"], "compute_scale": 0.5}}
    assert Dedicated(_scn([half], fast)).time("m", (0, 1)) == pytest.approx(0.75, rel=1e-6)
    assert Dedicated(_scn([half], slow)).time("m", (0, 1)) == pytest.approx(1.5, rel=1e-6)


def test_identical_jobs_are_simulated_once():
    jobs = [{"id": f"j{i}", "size": 2, "app": COMPUTE} for i in range(3)]
    other = {"id": "k", "size": 2, "app": dict(COMPUTE, iterations=9)}
    d = Dedicated(_scn([*jobs, other]))
    times = {d.time(f"j{i}", (0, 1)) for i in range(3)}
    assert len(times) == 1 and d.simulated == 1
    d.time("j0", (2, 3))  # other rates
    d.time("j0", (1, 0))  # other nodes at the same rates: cached
    d.time("k", (0, 1))  # another config
    assert d.simulated == 3
    assert d.time("missing", (0, 1)) is None and d.simulated == 3


def test_a_run_without_local_users_has_no_new_column_or_figure(tmp_path):
    # A shipped scenario without local users: jobs.csv's columns and summary.json's keys as before.
    scn = load(ROOT / "scenarios" / "quickstart.yaml")
    _, summary, columns, _ = _run(scn, tmp_path)
    assert columns == results.JOB_COLUMNS
    assert not [k for k in summary if k.startswith(results.PARALLEL_SLOWDOWN)]


def test_always_gives_a_run_without_local_users_its_parallel_slowdown(tmp_path):
    # Paper 004's 0-user point: two jobs share the slow nodes (no session anywhere), so each is slowed
    # against its run alone; a rebuild keeps it (the switch is in the folder's scenario.yaml).
    jobs = [PARALLEL, dict(PARALLEL, id="par2")]
    scn = _scn(jobs).model_copy(update={"results": ResultsConfig(parallel_slowdown="always")})
    out, summary, columns, rows = _run(scn, tmp_path)
    assert columns[-1] == results.PARALLEL_SLOWDOWN and results.LOCAL_SLOWDOWN not in columns
    slow = [float(rows[j][results.PARALLEL_SLOWDOWN]) for j in ("par", "par2")]
    assert min(slow) > 1.5  # two CPU-bound ranks share each node: about 2
    assert summary[results.PARALLEL_SLOWDOWN_MEAN] == pytest.approx(sum(slow) / 2, rel=1e-5)
    assert results.rebuild(out)[results.PARALLEL_SLOWDOWN_MEAN] == summary[results.PARALLEL_SLOWDOWN_MEAN]


def test_a_wrong_parallel_slowdown_switch_is_one_error_naming_it():
    with pytest.raises(ScenarioError) as exc:
        load(doc={"workload": {"jobs": [PARALLEL]}, "results": {"parallel_slowdown": "yes"}})
    assert "results.parallel_slowdown" in str(exc.value) and "always" in str(exc.value)


def test_rebuild_comparison_and_report_carry_it(tmp_path):
    scn = _scn([PARALLEL, _user(0, at=0.0)])
    out, summary, _, _ = _run(scn, tmp_path)
    written = (out / "jobs.csv").read_text()
    (out / "jobs.csv").unlink()
    again = results.rebuild(out)  # the reference rebuilt from the folder's scenario.yaml
    assert (out / "jobs.csv").read_text() == written
    assert again[results.PARALLEL_SLOWDOWN_MEAN] == summary[results.PARALLEL_SLOWDOWN_MEAN]
    assert comparison.is_metric(results.PARALLEL_SLOWDOWN_MEAN)
    assert comparison.is_metric(results.PARALLEL_SLOWDOWN_MAX)
    page = report.write(out).read_text()
    value = json.loads(json.dumps(summary[results.PARALLEL_SLOWDOWN_MAX]))
    assert f"data-key='{results.PARALLEL_SLOWDOWN_MAX}' data-value='{value!r}'" in page
