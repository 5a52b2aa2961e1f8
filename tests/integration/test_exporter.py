"""The exporters of real node agents and a real coordinator (in this process, no Ray) running a gang
workload on real processes: every family is there with sane values, ``promtool check metrics`` accepts a
scrape of each, and the exporters are gone once their owners shut down."""

from __future__ import annotations

import concurrent.futures as cf
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families
from testbed.apps.synthetic import Synthetic, SyntheticConfig
from testbed.monitoring.metrics import ADMISSION_OUTCOMES, DEADLINE_OUTCOMES, JOB_STATES, PROCESS_STATES
from testbed.schedulers.base import JobSpec

from testbed.core import events as ev
from testbed.core.jobs import Job
from testbed.emulator.agent import NodeAgent, NodeConfig
from testbed.emulator.control import LocalHandle
from testbed.emulator.coordinator import Coordinator
from testbed.results import summary as results

from ..conftest import require

NODE_FAMILIES = {
    "testbed_node_cpu_utilization_ratio",
    "testbed_node_power_watts",
    "testbed_node_energy_joules",
    "testbed_node_processes",
    "testbed_node_dispatches",
    "testbed_job_progress",
    "testbed_policy_decision_seconds",
    "testbed_time_dilation_factor",
    "testbed_node_cpu_rate_error_ratio",
    "testbed_node_cpu_rate_window_error_ratio",
    "testbed_deadlines",
    "testbed_frame_latency_seconds",
}
COORD_FAMILIES = {
    "testbed_jobs",
    "testbed_admissions",
    "testbed_gang_switch_skew_seconds",
    "testbed_policy_decision_seconds",
    "testbed_time_dilation_factor",
}
IDLE_W, BUSY_W = 100.0, 50.0


def _text(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as r:
        return r.read().decode()


def _samples(text: str) -> dict[str, list[tuple[dict, float]]]:
    out: dict = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _lab(outcome: str) -> dict:
    return {"outcome": outcome, "job_class": "compute", "scheduler": "gang"}


def _families(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text)}


def _promtool(text: str) -> None:
    exe = shutil.which("promtool")
    require(exe is not None, "promtool is not installed (Debian: apt-get install prometheus; .ci/run does)")
    p = subprocess.run([exe, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr


def test_exporters_of_a_real_gang_run(tmp_path):
    run_id = "test-" + uuid.uuid4().hex[:8]
    mon = {"host": "127.0.0.1", "port": None, "scrape_interval_s": 0.2, "idle_watts": IDLE_W,
           "busy_watts": BUSY_W, "job_classes": ["compute"]}  # fmt: skip
    params = {"mpl": 2, "quantum_ms": 50.0}
    tdf, nodes = 2.0, 4
    pool = cf.ThreadPoolExecutor(8)
    agents = [
        NodeAgent(NodeConfig(run_id=run_id, node=n, run_dir=str(tmp_path), tdf=tdf, scheduler="gang",
                             params=params, monitoring=mon))
        for n in range(nodes)
    ]  # fmt: skip
    app = SyntheticConfig(iterations=10, gcomp=30.0)
    jobs = [Job(JobSpec(j, nodes, 0.0, estimate=Synthetic.ideal_runtime(app)), app) for j in ("a", "b")]
    coord = None
    try:
        proxies = [LocalHandle(a, pool) for a in agents]
        coord = Coordinator(str(tmp_path), nodes, "gang", params, 0, jobs, proxies,
                            [a.nic_address for a in agents], tdf, monitoring=mon)  # fmt: skip
        addresses = [a.info()["metrics"] for a in agents] + [coord.metrics_address()]
        assert all(a and a.startswith("127.0.0.1:") for a in addresses), addresses
        # Before the run: every family exists, admissions (coordinator) and deadlines (nodes) at zero.
        c0 = _samples(_text(addresses[-1]))
        for o in ADMISSION_OUTCOMES:
            assert ({"outcome": o, "job_class": "compute", "scheduler": "gang"}, 0.0) in c0[
                "testbed_admissions_total"
            ]
        n0 = _samples(_text(addresses[0]))
        for o in DEADLINE_OUTCOMES:
            assert ({"node": "0", "outcome": o, "job_class": "compute", "scheduler": "gang"}, 0.0) in n0[
                "testbed_deadlines_total"
            ]
        agents[0].record_probe({"node": 0, "configured": 0.5, "delivered": 0.49, "error": -0.02})
        t0 = time.monotonic() + 0.2
        for a in agents:
            a.set_run(t0, coord.on_node_event)
        coord.start(t0)
        mid = None
        deadline = time.monotonic() + 120
        while not coord.status()["done"]:
            assert time.monotonic() < deadline
            time.sleep(0.3)
            if mid is None and coord.status()["counts"].get("running") == 2:
                time.sleep(0.5)
                mid = _text(addresses[1])
        time.sleep(1.0)  # a few metric intervals: the last switch batches reach the coordinator
        node_texts = [_text(a) for a in addresses[:-1]]
        coord_text = _text(addresses[-1])
        node_events = [e for f in sorted((tmp_path / "events").glob("node*.jsonl")) for e in ev.read_jsonl(f)]
    finally:
        if coord is not None:
            coord.stop("test over")
        for a in agents:
            a.shutdown()
        pool.shutdown()

    _promtool(node_texts[0])
    _promtool(coord_text)
    assert mid is not None
    for text in node_texts:
        assert _families(text) >= NODE_FAMILIES
    assert _families(coord_text) >= COORD_FAMILIES

    m = _samples(mid)  # node 1 while both jobs ran, time-sliced
    assert 0.0 <= m["testbed_node_cpu_utilization_ratio"][0][1] <= 1.0
    states = {lab["state"]: v for lab, v in m["testbed_node_processes"]}
    assert (
        set(states) == set(PROCESS_STATES) and states["running"] + states["stopped"] + states["blocked"] == 2
    )

    per_node = [_samples(t) for t in node_texts]
    for n, s in enumerate(per_node):
        labels, u = s["testbed_node_cpu_utilization_ratio"][0]
        p, e = s["testbed_node_power_watts"][0][1], s["testbed_node_energy_joules_total"][0][1]
        assert labels == {"node": str(n), "scheduler": "gang"}
        assert p == pytest.approx(IDLE_W + BUSY_W * u)
        assert e > IDLE_W * 0.5  # ran for more than half an emulated second
        assert s["testbed_node_dispatches_total"][0][1] >= 2
        progress = {(lab["job_class"], lab["unit"]): v for lab, v in s["testbed_job_progress_total"]}
        assert progress[("compute", "barriers")] == 20  # 2 jobs x 10 barriers, one rank per node
        assert s["testbed_policy_decision_seconds_count"][0][1] > 0
        assert s["testbed_time_dilation_factor"][0][1] == tdf
    assert per_node[0]["testbed_node_cpu_rate_error_ratio"][0][1] == -0.02
    assert (
        per_node[1]["testbed_node_cpu_rate_error_ratio"][0][1]
        != per_node[1]["testbed_node_cpu_rate_error_ratio"][0][1]
    )

    for n, s in enumerate(per_node):  # the rate watch's gauge: one of its windows' errors (NaN: not judged)
        g = s["testbed_node_cpu_rate_window_error_ratio"][0][1]
        errs = [e["error"] for e in node_events if e["kind"] == ev.RATE_WINDOW and e["node"] == n]
        assert errs and ((g != g and None in errs) or g in errs), (n, g, errs)

    c = _samples(coord_text)
    jobs_by_state = {lab["state"]: v for lab, v in c["testbed_jobs"]}
    assert set(jobs_by_state) == set(JOB_STATES) and jobs_by_state["finished"] == 2
    adm = {lab["outcome"]: v for lab, v in c["testbed_admissions_total"]}
    assert adm == {"admitted": 2, "rejected": 0}
    for s in per_node:  # synthetic jobs have no deadlines
        assert {lab["outcome"]: v for lab, v in s["testbed_deadlines_total"]} == {"met": 0, "missed": 0}
    # Each slot's spread, as the event log tells it, was observed once, from the nodes' switch batches.
    skews_ms = results.slot_skews_ms(node_events)
    assert len(skews_ms) > 5
    assert c["testbed_gang_switch_skew_seconds_count"][0][1] == len(skews_ms)
    assert c["testbed_gang_switch_skew_seconds_sum"][0][1] == pytest.approx(sum(skews_ms) / 1000.0)
    assert c["testbed_policy_decision_seconds_count"][0][1] > 0

    # The exporters went with their owners.
    for a in addresses:
        with pytest.raises(OSError):
            _text(a)


def test_watch_follows_a_runs_exporters_and_exits_when_they_are_gone(tmp_path):
    from testbed.monitoring.metrics import CoordinatorMetrics, NodeMetrics, serve, stop
    from testbed.monitoring.prometheus import write_targets

    nodes = [NodeMetrics(n, "gang", IDLE_W, BUSY_W, 3.0) for n in range(2)]
    for m in nodes:
        m.sample(0.5, 2.0)
    coord = CoordinatorMetrics("gang", 3.0, ["compute"])
    coord.set_jobs({("running", "compute"): 2})
    coord.skew.observe(0.002)
    served = [serve(r) for r in [m.registry for m in nodes] + [coord.registry]]
    write_targets(tmp_path, "r1", [(0, served[0][1]), (1, served[1][1])], served[2][1])
    once = subprocess.run([sys.executable, "-m", "testbed.cli", "watch", str(tmp_path), "--once"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert once.returncode == 0, once.stderr
    for figure in ("3/3 (2 nodes)", "50.0 %", f"{2 * (IDLE_W + BUSY_W * 0.5):,.1f} W",
                   f"{2 * 2.0 * (IDLE_W + BUSY_W * 0.5):,.0f} J", "running=2", "3.00"):  # fmt: skip
        assert figure in once.stdout, (figure, once.stdout)
    live = subprocess.Popen([sys.executable, "-m", "testbed.cli", "watch", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        time.sleep(3)
        assert live.poll() is None  # still watching
        for server, _ in served:
            stop(server)
        assert live.wait(timeout=20) == 0
        assert "it ended" in live.stdout.read()
    finally:
        if live.poll() is None:
            live.kill()
