"""The metric math (power model, energy over emulated time, utilisation), families that must exist at zero,
and the cross-node gang switch skew bookkeeping."""

from __future__ import annotations

import math

import pytest
from prometheus_client import generate_latest
from testbed.monitoring.metrics import (
    ADMISSION_OUTCOMES,
    DEADLINE_OUTCOMES,
    JOB_STATES,
    PROCESS_STATES,
    CoordinatorMetrics,
    NodeMetrics,
    SwitchSkew,
    power_watts,
    utilization,
)

B, X = 219.10, 18.968  # the scenario's default power model (paper 003)


def _v(m, name: str, **labels) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_power_is_idle_plus_busy_times_utilisation():
    assert power_watts(B, X, 0.0) == B
    assert power_watts(B, X, 1.0) == B + X
    m = NodeMetrics(3, "gang", B, X, tdf=4.0)
    assert _v(m, "testbed_node_power_watts", node="3") == B  # idle before the first sample
    for u in (0.0, 0.25, 0.5, 1.0):
        assert m.sample(u, 1.0) == pytest.approx(B + X * u)
        assert _v(m, "testbed_node_power_watts", node="3") == pytest.approx(B + X * u)
        assert _v(m, "testbed_node_cpu_utilization_ratio", node="3", scheduler="gang") == u


def test_energy_integrates_power_over_emulated_time_like_the_summary():
    m = NodeMetrics(0, "gang", B, X, tdf=4.0)
    intervals = [(0.2, 0.5), (1.0, 0.25), (0.0, 1.0), (0.6, 0.25)]  # (u, dt emulated s)
    for u, dt in intervals:
        m.sample(u, dt)
    expected = sum((B + X * u) * dt for u, dt in intervals)
    assert _v(m, "testbed_node_energy_joules_total", node="0") == pytest.approx(expected)
    # The summary's E = (B + X*U)*T per node, U the time-weighted mean utilisation: the same number,
    # because the model is linear in u.
    t = sum(dt for _, dt in intervals)
    mean_u = sum(u * dt for u, dt in intervals) / t
    assert _v(m, "testbed_node_energy_joules_total", node="0") == pytest.approx((B + X * mean_u) * t)
    m.sample(0.5, 0.0)  # an empty interval adds nothing
    assert _v(m, "testbed_node_energy_joules_total", node="0") == pytest.approx(expected)


def test_utilisation_is_cpu_over_envelope_capacity_and_tdf_cancels():
    # A node of rate 0.5, TDF 4: its quota is 0.125 core; 2 emulated s = 8 real s = 1 real CPU-second.
    assert utilization(1.0, 2.0, cpu_rate=0.5) == pytest.approx(1.0)
    assert utilization(0.25, 2.0, cpu_rate=0.5) == pytest.approx(0.25)
    assert utilization(1.0, 1.0, cpu_rate=1.0, cores=2) == pytest.approx(0.5)
    assert utilization(5.0, 1.0) == 1.0 and utilization(-1.0, 1.0) == 0.0  # clamped
    assert utilization(1.0, 0.0) == 0.0


def test_node_families_exist_before_anything_happens():
    m = NodeMetrics(1, "local", B, X, tdf=2.5, job_classes=["compute", "io"])
    for s in PROCESS_STATES:
        assert _v(m, "testbed_node_processes", node="1", state=s) == 0
    assert _v(m, "testbed_node_dispatches_total", node="1", scheduler="local") == 0
    assert _v(m, "testbed_node_energy_joules_total", node="1") == 0
    assert _v(m, "testbed_job_progress_total", node="1", job_class="io", unit="barriers") == 0
    assert _v(m, "testbed_time_dilation_factor", node="1") == 2.5
    assert math.isnan(_v(m, "testbed_node_cpu_rate_error_ratio", node="1"))  # not probed yet
    assert math.isnan(_v(m, "testbed_node_cpu_rate_window_error_ratio", node="1"))  # no window yet
    assert _v(m, "testbed_policy_decision_seconds_count", role="local", scheduler="local") == 0
    m.add_progress("io", "barriers", 3)
    m.add_progress("io", "weird-unit", 2)
    assert _v(m, "testbed_job_progress_total", node="1", job_class="io", unit="barriers") == 3
    assert _v(m, "testbed_job_progress_total", node="1", job_class="io", unit="other") == 2


def test_deadlines_and_frame_latencies_are_fed_where_workers_report_them():
    m = NodeMetrics(2, "2dcs-ps", B, X, tdf=1.0, job_classes=["rt"])
    for o in DEADLINE_OUTCOMES:  # at zero before a real-time job runs
        assert _v(m, "testbed_deadlines_total", node="2", outcome=o, job_class="rt", scheduler="2dcs-ps") == 0
    # The progress counters of any kind's deadlines (increments, as the agent forwards them).
    m.add_progress("rt", "deadlines_met", 9)
    m.add_progress("rt", "deadlines_missed", 1)
    m.add_progress("rt", "deadlines_met", 3)
    got = {o: _v(m, "testbed_deadlines_total", node="2", outcome=o, job_class="rt", scheduler="2dcs-ps")
           for o in DEADLINE_OUTCOMES}  # fmt: skip
    assert got == {"met": 12, "missed": 1}
    # Deadlines are not progress units: nothing went to "other".
    assert _v(m, "testbed_job_progress_total", node="2", job_class="rt", unit="other") == 0
    for v in (0.03, 0.2, 0.04):
        m.observe_sample("rt", "frame_latency_s", v)
    lab = {"node": "2", "job_class": "rt", "scheduler": "2dcs-ps"}
    assert m.registry.get_sample_value("testbed_frame_latency_seconds_count", lab) == 3
    assert m.registry.get_sample_value("testbed_frame_latency_seconds_sum", lab) == pytest.approx(0.27)
    assert m.registry.get_sample_value("testbed_frame_latency_seconds_bucket", {**lab, "le": "0.05"}) == 2


def test_coordinator_families_exist_at_zero_and_jobs_reset():
    m = CoordinatorMetrics("gang", tdf=3.0, job_classes=["compute", None])
    for jc in ("compute", "none"):
        for o in ADMISSION_OUTCOMES:
            assert _v(m, "testbed_admissions_total", outcome=o, job_class=jc, scheduler="gang") == 0
        for s in JOB_STATES:
            assert _v(m, "testbed_jobs", state=s, job_class=jc, scheduler="gang") == 0
    m.set_jobs({("running", "compute"): 2, ("pending", "compute"): 5})  # pending (not arrived) is no state
    assert _v(m, "testbed_jobs", state="running", job_class="compute", scheduler="gang") == 2
    assert _v(m, "testbed_jobs", state="pending", job_class="compute", scheduler="gang") is None
    m.set_jobs({("finished", "compute"): 2})
    assert _v(m, "testbed_jobs", state="running", job_class="compute", scheduler="gang") == 0
    m.admission("rejected", "compute")
    assert _v(m, "testbed_admissions_total", outcome="rejected", job_class="compute", scheduler="gang") == 1
    assert _v(m, "testbed_time_dilation_factor") == 3.0
    text = generate_latest(m.registry).decode()
    assert "testbed_admissions_total{" in text and "_created" not in text


def test_switch_skew_per_slot_once_every_node_reported():
    s = SwitchSkew()
    s.expect(7, [0, 1, 2], now=0.0)
    assert s.report(0, 7, 1.000) is None
    assert s.report(5, 7, 9.000) is None  # a node the slot was not dispatched to
    assert s.report(2, 7, 1.004) is None
    assert s.report(1, 7, 1.001) == pytest.approx(0.004)
    assert len(s) == 0 and s.report(1, 7, 1.0) is None  # reported once
    s.expect(8, [0], now=0.0)  # one node: no spread to speak of
    assert len(s) == 0


def test_switch_skew_times_out_or_gives_up_on_down_nodes():
    s = SwitchSkew()
    s.expect(1, [0, 1, 2], now=0.0)
    s.expect(2, [0, 1, 2], now=0.0)
    s.expect(3, [0, 1, 2], now=9.0)
    s.report(0, 1, 5.0)
    s.report(1, 1, 5.002)
    s.report(0, 2, 6.0)
    assert s.expire(now=1.0, timeout=5.0) == []
    assert s.expire(now=1.0, timeout=5.0, down=[2]) == [pytest.approx(0.002)]  # node 2 died: slot 1 closes
    assert s.expire(now=6.0, timeout=5.0) == []  # slot 2: one report only, dropped without a figure
    assert len(s) == 1  # slot 3 is recent


def test_scenario_monitoring_section():
    from testbed.scenario import ScenarioError, load

    doc = {"workload": {"jobs": [{"size": 1}]}}
    m = load(doc=doc).monitoring
    assert (m.enabled, m.host, m.port, m.scrape_interval_s) == (True, "127.0.0.1", None, 1.0)
    m = load(doc=doc, overrides=["monitoring.port=9100", "monitoring.scrape_interval_s=5"]).monitoring
    assert m.port == 9100 and m.scrape_interval_s == 5.0
    with pytest.raises(ScenarioError, match="monitoring.port"):
        load(doc=doc, overrides=["monitoring.port=0"])
    with pytest.raises(ScenarioError, match="monitoring.interval: unknown field; did you mean 'scrape_"):
        load(doc=doc, overrides=["monitoring.interval=1"])


def test_node_observer_turns_events_into_metrics(tmp_path):
    """The node's metrics come from the events it logs and two hooks (testbed/core/observe.py): progress
    counted in increments per rank (a rank started again counts from 0), the job's class from its start,
    switch times sent on at the tick, continued processes and decision times."""
    from prometheus_client.parser import text_string_to_metric_families
    from testbed.monitoring.observers import NodeMetricsObserver

    from testbed.core import events as ev
    from testbed.core.messages import SlotSwitches

    sent, state = [], [0.0, 1, 2, 0]
    obs = NodeMetricsObserver(
        3, "gang", 2.0, 1.0, 1, {"port": 0}, sample=lambda: tuple(state), send=sent.append
    )
    log = ev.EventWriter(tmp_path / "node.jsonl", "node3")
    log.subscribe(obs.event)
    try:
        obs.begin()
        log.emit(ev.PROC_STARTED, t=0.0, node=3, job="a", rank=0, pid=1, job_class="io")
        for v in (2, 5):
            log.emit(ev.PROGRESS, t=0.1, node=3, job="a", rank=0, unit="barriers", value=v)
        log.emit(ev.PROC_EXITED, t=0.2, node=3, job="a", rank=0, code=0)
        log.emit(ev.PROGRESS, t=0.3, node=3, job="a", rank=0, unit="barriers", value=4)
        log.emit(ev.SLOT_SWITCH, t=0.4, node=3, slot=7, effect=0.401)
        log.emit(ev.RATE_WINDOW, t=0.5, node=3, error=0.12)  # the rate watch's window: the gauge
        assert obs.metrics.rate_window_error._value.get() == 0.12
        log.emit(ev.RATE_WINDOW, t=0.6, node=3, error=None)  # a window not judged: NaN
        assert math.isnan(obs.metrics.rate_window_error._value.get())
        obs.continued(2)
        obs.decided(0.001)
        state[0] = 0.5
        obs.tick()
        fams = {
            f.name: f for f in text_string_to_metric_families(generate_latest(obs.metrics.registry).decode())
        }
        progress = {(s.labels["job_class"], s.labels["unit"]): s.value
                    for s in fams["testbed_job_progress"].samples if s.name.endswith("_total")}  # fmt: skip
        assert progress[("io", "barriers")] == 9  # 5 by the first start, 4 by the second
        assert sent == [SlotSwitches(3, ((7, 0.401),))]
        assert obs.metrics.dispatches._value.get() == 2
        assert obs.metrics.procs["stopped"]._value.get() == 2
        assert obs.metrics.decision._sum.get() == 0.001
    finally:
        obs.close()
        log.close()


def test_node_observer_counts_deadlines_and_a_head_node_has_no_cluster_gauges(tmp_path):
    """Deadlines reported by a node's workers (deadlines_met / deadlines_missed progress) feed
    testbed_deadlines_total on that node, in increments per rank; the head node (paper 001's, outside the
    cluster) exports them too, but no utilisation, power or energy: those are the cluster's."""
    from testbed.monitoring.observers import NodeMetricsObserver

    from testbed.core import events as ev

    for head in (False, True):
        obs = NodeMetricsObserver(
            4, "mcdf", 2.0, 1.0, 1, {"port": 0, "head": head, "job_classes": ["divisible"]},
            sample=lambda: (0.0, 0, 0, 0), send=lambda m: None,
        )  # fmt: skip
        log = ev.EventWriter(tmp_path / f"node{head}.jsonl", "node4")
        log.subscribe(obs.event)
        try:
            obs.begin()
            for job in ("t0", "t1", "t2"):
                log.emit(ev.PROC_STARTED, t=0.0, node=4, job=job, rank=4, pid=1, job_class="divisible")
            log.emit(ev.PROGRESS, t=1.0, node=4, job="t0", rank=4, unit="deadlines_met", value=1.0)
            log.emit(ev.PROGRESS, t=1.0, node=4, job="t0", rank=4, unit="deadlines_missed", value=0.0)
            log.emit(ev.PROGRESS, t=2.0, node=4, job="t1", rank=4, unit="deadlines_met", value=1.0)
            log.emit(ev.PROGRESS, t=3.0, node=4, job="t2", rank=4, unit="deadlines_missed", value=1.0)
            obs.tick()
            m = obs.metrics
            labels = {"job_class": "divisible", "scheduler": "mcdf", "node": "4"}
            assert _v(m, "testbed_deadlines_total", outcome="met", **labels) == 2.0
            assert _v(m, "testbed_deadlines_total", outcome="missed", **labels) == 1.0
            util = _v(m, "testbed_node_cpu_utilization_ratio", node="4", scheduler="mcdf")
            assert (util is None) == head
            assert (_v(m, "testbed_node_energy_joules_total", node="4") is None) == head
        finally:
            obs.close()
            log.close()


def test_a_local_users_session_slowdown_is_a_gauge_of_its_node(tmp_path):
    """Paper 004's figure live: a session's running totals (session_elapsed_s over session_ideal_s, as the
    results divide them at the end) set its node's gauge at the tick; a node without local users has no
    such series."""
    from testbed.monitoring.observers import NodeMetricsObserver

    from testbed.core import events as ev

    obs = NodeMetricsObserver(0, "ccs", 2.0, 1.0, 1, {"port": 0}, sample=lambda: (0.0, 0, 0, 0), send=len)
    log = ev.EventWriter(tmp_path / "node0.jsonl", "node0")
    log.subscribe(obs.event)
    name = "testbed_local_session_slowdown_ratio"
    labels = {"node": "0", "job_class": "cpu-user", "scheduler": "ccs"}
    try:
        obs.begin()
        log.emit(ev.PROC_STARTED, t=0.0, node=0, job="u", rank=0, pid=1, job_class="cpu-user")
        obs.tick()
        assert _v(obs.metrics, name, **labels) is None  # no report yet: no series
        for ideal, elapsed in ((1.0, 1.5), (2.0, 2.8)):
            log.emit(ev.PROGRESS, t=elapsed, node=0, job="u", rank=0, unit="session_ideal_s", value=ideal)
            log.emit(ev.PROGRESS, t=elapsed, node=0, job="u", rank=0, unit="session_elapsed_s", value=elapsed)
        obs.tick()
        assert _v(obs.metrics, name, **labels) == pytest.approx(1.4)  # the latest totals: 2.8 / 2.0
    finally:
        obs.close()
        log.close()


def test_a_completed_parallel_jobs_slowdown_against_its_dedicated_run_is_a_gauge(tmp_path):
    """Paper 004's parallel slowdown live (runs with local users): a job that completes sets its class's
    gauge to its execution time over its reference alone on its nodes (results' figure); a session, a job
    not completed, or a run without the reference sets none."""
    import time

    from testbed.monitoring.observers import CoordinatorMetricsObserver

    from testbed.core import events as ev

    asked = []

    def dedicated(job, nodes):
        asked.append((job, nodes))
        return 2.0

    classes = {"a": "IS.A", "b": "IS.A", "u": "cpu-user"}
    obs = CoordinatorMetricsObserver(
        "ccs", 2.0, classes, {"port": 0}, job_counts=dict, down=tuple, dedicated=dedicated
    )
    log = ev.EventWriter(tmp_path / "coordinator.jsonl", "coordinator")
    log.subscribe(obs.event)
    name = "testbed_parallel_slowdown_ratio"
    try:
        log.emit(ev.JOB_SUBMITTED, t=0.0, job="u", size=1, owner_node=0)
        for job in ("u", "a", "b"):
            log.emit(ev.JOB_STARTED, t=1.0, job=job, nodes=[0, 1] if job != "u" else [0])
        log.emit(ev.JOB_FINISHED, t=3.0, job="u")
        log.emit(ev.JOB_KILLED, t=3.5, job="b", reason="scenario duration reached")
        log.emit(ev.JOB_FINISHED, t=6.0, job="a")
        for _ in range(200):  # computed off the loop: wait for it
            if _v(obs.metrics, name, job_class="IS.A", scheduler="ccs") is not None:
                break
            time.sleep(0.01)
        assert _v(obs.metrics, name, job_class="IS.A", scheduler="ccs") == pytest.approx(2.5)  # 5 s / 2 s
        assert asked == [("a", (0, 1))]
        assert _v(obs.metrics, name, job_class="cpu-user", scheduler="ccs") is None
    finally:
        obs.close()
        log.close()
    plain = CoordinatorMetricsObserver("ccs", 2.0, classes, {"port": 0}, job_counts=dict, down=tuple)
    try:
        plain.event({"kind": ev.JOB_FINISHED, "t": 1.0, "job": "a"})
        assert b"testbed_parallel_slowdown_ratio" not in generate_latest(plain.metrics.registry)
    finally:
        plain.close()


def test_an_exporter_bound_beyond_loopback_logs_a_warning(monkeypatch, caplog):
    import logging

    import prometheus_client
    from prometheus_client import CollectorRegistry
    from testbed.monitoring import metrics

    class Server:
        server_port = 9464

    # No socket is opened: serve's own decision is what is tested, not prometheus_client's bind.
    monkeypatch.setattr(prometheus_client, "start_http_server", lambda port, addr, registry: (Server(), None))
    with caplog.at_level(logging.WARNING, logger="testbed"):
        assert metrics.serve(CollectorRegistry(), host="127.0.0.1")[1] == "127.0.0.1:9464"
        assert metrics.serve(CollectorRegistry(), host="localhost")[1] == "localhost:9464"
        assert caplog.records == []  # loopback: nothing to say
        assert metrics.serve(CollectorRegistry(), host="0.0.0.0")[1] == "0.0.0.0:9464"
    (rec,) = caplog.records
    assert rec.levelno == logging.WARNING
    assert rec.getMessage().startswith("monitoring: an exporter listens on 0.0.0.0:9464, beyond loopback")


def test_the_local_prometheus_runs_without_the_lifecycle_or_admin_api(tmp_path):
    from testbed.monitoring.prometheus import LocalPrometheus

    argv = LocalPrometheus(tmp_path, port=9090).argv("/usr/bin/prometheus")
    assert argv[0] == "/usr/bin/prometheus"
    assert "--web.listen-address=127.0.0.1:9090" in argv  # loopback unless asked
    # With the lifecycle API any local user could POST /-/quit; with the admin API, delete the series.
    assert not [a for a in argv if a.startswith(("--web.enable-lifecycle", "--web.enable-admin-api"))]
