"""Heterogeneous nodes (issue 22): ``cluster.groups`` in the scenario, checked with one line each; every
policy told its nodes' rates and memory (NodeInfo); the simulator runs each node at its own rate; memory-
aware allocation checks each node's own memory; the results show each node's rate and count each node's
utilisation and power against its own capacity."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import yaml
from testbed.apps.synthetic import SyntheticConfig
from testbed.schedulers import registry
from testbed.schedulers.base import JobSpec, NodeInfo, Reject, Start

from testbed.core.jobs import Job
from testbed.deploy.k8s import rayjob
from testbed.results import summary as results
from testbed.scenario import ScenarioError, effective_tdf
from testbed.scenario.model import from_file_or_doc
from testbed.sim.engine import Simulation, simulate

PAPER004 = [{"count": 8, "cpu_rate": 0.43, "memory_mb": 128}, {"count": 8, "cpu_rate": 1.0, "memory_mb": 256}]
JOBS = {"jobs": [{"size": 2}]}


def _scn(cluster: dict, **rest):
    return from_file_or_doc(doc={"cluster": cluster, "workload": JOBS, **rest})


# --------------------------------------------------------------------------------------------------------
# The scenario


def test_groups_give_each_node_its_rate_and_memory_and_the_node_count():
    c = _scn({"groups": PAPER004}).cluster
    assert c.nodes == 16
    info = c.node_info()
    assert info[:8] == (NodeInfo(0.43, 128.0),) * 8 and info[8:] == (NodeInfo(1.0, 256.0),) * 8
    assert c.min_rate() == 0.43 and c.total_rate() == pytest.approx(8 * 0.43 + 8)
    assert _scn({"groups": PAPER004, "nodes": 16}).cluster.nodes == 16  # a count that agrees is fine
    # Uniform nodes: the one rate and memory, as before.
    u = _scn({"nodes": 3, "cpu_rate": 0.5, "memory_mb": 64}).cluster
    assert u.groups is None and u.node_info() == (NodeInfo(0.5, 64.0),) * 3 and u.min_rate() == 0.5


def test_the_automatic_tdf_counts_each_node_at_its_rate():
    het = _scn({"groups": PAPER004})
    same = _scn({"nodes": 16, "cpu_rate": (8 * 0.43 + 8) / 16})
    assert effective_tdf(het, cores=2) == pytest.approx(effective_tdf(same, cores=2))


@pytest.mark.parametrize(
    ("cluster", "expect"),
    [
        (
            {"groups": PAPER004, "nodes": 10},
            "cluster.groups: the counts add up to 16 nodes but cluster.nodes is 10",
        ),
        ({"groups": PAPER004, "cpu_rate": 0.5}, "cluster.cpu_rate: cannot be set with cluster.groups"),
        ({"groups": PAPER004, "memory_mb": 64}, "cluster.memory_mb: cannot be set with cluster.groups"),
        ({"groups": [{"count": 1, "memory_mb": 9}, {"count": 1}]}, "cluster.groups.1.memory_mb: give every"),
        ({"groups": []}, "cluster.groups: empty"),
        ({"groups": [{"count": 0}]}, "cluster.groups.0.count"),
        ({"groups": [{"count": 1, "cpu_rate": 1.5}]}, "cluster.groups.0.cpu_rate"),
        ({"groups": [{"count": 1, "cpu_rate": 0}]}, "cluster.groups.0.cpu_rate"),
        ({"groups": [{"count": 1, "memory_mb": -1}]}, "cluster.groups.0.memory_mb"),
        ({"groups": [{"count": 1, "speed": 2}]}, "cluster.groups.0.speed: unknown field"),
    ],
)
def test_bad_groups_are_refused_with_one_line_naming_the_field(cluster, expect):
    with pytest.raises(ScenarioError) as ei:
        _scn(cluster)
    assert len(ei.value.problems) == 1 and "\n" not in str(ei.value), str(ei.value)
    assert expect in str(ei.value)


def test_the_defaults_written_back_load_again():
    # A results folder's scenario.yaml holds every field, defaults included (cpu_rate 1.0, memory_mb null).
    scn = _scn({"groups": PAPER004})
    again = from_file_or_doc(doc=scn.model_dump(mode="json"))
    assert again.cluster.node_info() == scn.cluster.node_info()


def test_validate_refuses_bad_groups_with_one_line_and_exit_2(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump({"cluster": {"groups": PAPER004, "nodes": 12}, "workload": JOBS}))
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "validate", str(f), "--backend", "sim"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    [line] = p.stderr.strip().splitlines()
    assert line.startswith("error: ") and "cluster.groups" in line and "cluster.nodes is 12" in line


# --------------------------------------------------------------------------------------------------------
# The policies and the simulator


def _job(job_id: str, size: int = 1, t: float = 0.0, mb: float = 0.0, barrier: bool = False) -> Job:
    """3 iterations of 250 ms of CPU at rate 1.0 (0.75 s)."""
    app = SyntheticConfig(iterations=3, gcomp=250.0, barrier=barrier)
    return Job(JobSpec(job_id, size, t, memory_mb=mb), app)


def test_a_job_on_a_half_rate_node_takes_exactly_twice_as_long():
    info = [NodeInfo(0.5), NodeInfo(1.0)]
    events = simulate([_job("slow"), _job("fast")], registry.get("batch"), {}, nodes=2, node_info=info)
    start = {e["job"]: (e["t"], e["nodes"]) for e in events if e["kind"] == "job_started"}
    end = {e["job"]: e["t"] for e in events if e["kind"] == "job_finished"}
    assert start == {"slow": (0.0, [0]), "fast": (0.0, [1])}
    assert end["fast"] == 0.75 and end["slow"] == 2 * end["fast"]  # exactly, not approximately
    # Each node's CPU time in CPU seconds at rate 1.0, as the kernel counts it: the same work on both.
    cpu = {e["job"]: e["cpu_s"] for e in events if e["kind"] == "proc_exited"}
    assert cpu == {"slow": 0.75, "fast": 0.75}


def test_a_parallel_job_waits_for_its_slowest_node():
    info = [NodeInfo(0.43), NodeInfo(1.0)]
    events = simulate([_job("a", size=2, barrier=True)], registry.get("batch"), {}, nodes=2, node_info=info)
    [end] = [e["t"] for e in events if e["kind"] == "job_finished"]
    assert end == pytest.approx(0.75 / 0.43, rel=1e-3)  # plus the barriers' latencies


def test_every_policy_is_told_its_nodes():
    info = (NodeInfo(0.43, 128.0), NodeInfo(0.43, 128.0), NodeInfo(1.0, 256.0))
    sim = Simulation([_job("a")], registry.get("gang"), {}, nodes=3, node_info=info)
    assert sim.gp.node_info == info and sim.gp.node_memory_mb == 128.0
    assert [n.policy.info for n in sim.nodes] == list(info)
    # Frozen: a policy cannot change what it was told.
    with pytest.raises(AttributeError):
        info[0].rate = 2.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="one NodeInfo per node"):
        Simulation([_job("a")], registry.get("gang"), {}, nodes=2, node_info=info)
    with pytest.raises(ValueError, match="node rate"):
        NodeInfo(0.0)


@pytest.mark.parametrize("name", ["batch", "gang", "local"])
def test_memory_aware_allocation_checks_each_nodes_own_memory(name):
    p = registry.get(name).make_global(4, {}, 0, [NodeInfo(0.43, 128.0)] * 2 + [NodeInfo(1.0, 256.0)] * 2)
    [start] = [a for a in p.submit(0.0, JobSpec("big", 2, 0.0, memory_mb=200.0)) if isinstance(a, Start)]
    assert sorted(start.nodes) == [2, 3]  # only the 256 MB nodes hold 200 MB
    [rej] = p.submit(0.0, JobSpec("wide", 3, 0.0, memory_mb=200.0))
    assert (
        isinstance(rej, Reject) and "needs 3 nodes with 200 MB" in rej.reason and "only 2 nodes" in rej.reason
    )
    [rej] = p.submit(0.0, JobSpec("huge", 1, 0.0, memory_mb=300.0))
    assert isinstance(rej, Reject) and "the largest node has only 256 MB" in rej.reason


# --------------------------------------------------------------------------------------------------------
# The results


def test_results_show_each_nodes_rate_and_count_power_per_node(tmp_path):
    doc = {"cluster": {"groups": [{"count": 1, "cpu_rate": 0.5}, {"count": 1, "cpu_rate": 1.0}]},
           "scheduler": {"name": "batch"}, "workload": {"jobs": []}}  # fmt: skip
    scn = from_file_or_doc(doc={**doc, "workload": JOBS})
    facts = results.facts_of(scn, "sim", 1.0, "modelled")
    assert facts.node_rates == (0.5, 1.0)
    events = simulate(
        [_job("slow"), _job("fast")], registry.get("batch"), {}, nodes=2, node_info=scn.cluster.node_info()
    )
    summary = results.write(tmp_path, events, facts)
    assert summary["node_rates"] == "0.5:0 1:1"
    with open(tmp_path / "jobs.csv") as fh:
        rows = {r["job_id"]: r for r in csv.DictReader(fh)}
    assert rows["slow"]["allocated_rates"] == "0.5:0" and rows["fast"]["allocated_rates"] == "1:1"
    # Makespan 1.5 s. Node 0 busy all of it (0.75 CPU-s at rate 1.0 over 0.5 x 1.5), node 1 half (0.75 of
    # 1.5): U = 1.5 / (0.5 x 1.5 + 1.5), E = (2 B + X (1 + 0.5)) T.
    B, X = facts.idle_watts, facts.busy_watts
    assert summary["makespan_s"] == 1.5
    assert summary["utilization"] == pytest.approx(1.5 / 2.25)
    assert summary["energy_j"] == pytest.approx((2 * B + X * 1.5) * 1.5)
    assert json.loads((tmp_path / "summary.json").read_text())["node_rates"] == "0.5:0 1:1"


def test_uniform_results_have_no_per_node_rates(tmp_path):
    scn = from_file_or_doc(doc={"cluster": {"nodes": 2}, "workload": JOBS})
    facts = results.facts_of(scn, "sim", 1.0, "modelled")
    summary = results.write(tmp_path, simulate([_job("a")], registry.get("batch"), {}, nodes=2), facts)
    assert "node_rates" not in summary
    with open(tmp_path / "jobs.csv") as fh:
        assert csv.DictReader(fh).fieldnames == results.JOB_COLUMNS


def test_kubernetes_pods_are_sized_for_the_largest_node():
    job = rayjob("het", {"cluster": {"groups": PAPER004}}, "img")
    [group] = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert group["replicas"] == 16  # the groups' counts, cluster.nodes left out
    [worker] = group["template"]["spec"]["containers"]
    assert worker["resources"]["limits"] == {"cpu": "1250m", "memory": "256Mi"}
