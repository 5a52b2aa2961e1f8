"""Local users (issue 22, deliverable 2): the ``localuser`` program kind's profiles and duty cycle, the
paper's hyper-exponential session lengths, ``workload.local_users`` checked with one line each, sessions
started on their owners' nodes without the global policy, seen by the local policy as local processes,
and their slowdown in the simulator and the results."""

from __future__ import annotations

import csv
import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
import yaml
from testbed.apps.base import Compute, Progress, SimContext, Sleep
from testbed.apps.localuser import PROFILES, LocalUser, LocalUserConfig
from testbed.apps.reports import SESSION_ELAPSED, SESSION_IDEAL
from testbed.apps.synthetic import SyntheticConfig
from testbed.schedulers import registry
from testbed.schedulers.base import JobSpec, ProcAdded, RunAll, Scheduler

from testbed.core.jobs import Job
from testbed.results import summary as results
from testbed.scenario import ScenarioError, workload
from testbed.scenario.localusers import SessionLengths, draw
from testbed.scenario.model import from_file_or_doc
from testbed.sim.engine import Simulation

PARALLEL = {"id": "par", "size": 2, "app": {"iterations": 40, "gcomp": 500, "barrier": False}}


def _scn(users=(), jobs=(PARALLEL,), nodes=2, generator=None):
    wl = {"seed": 7, "jobs": list(jobs), "local_users": list(users)}
    if generator is not None:
        wl["generator"] = generator
    return from_file_or_doc(doc={"cluster": {"nodes": nodes}, "workload": wl})


# --------------------------------------------------------------------------------------------------------
# The kind


@pytest.mark.parametrize(("profile", "rate"), [("cpu", 1.0), ("xwin", 1.0), ("cpu", 0.43)])
def test_a_cycle_computes_the_profiles_share_of_its_period_at_the_nodes_rate(profile, rate):
    cfg, _ = LocalUser.bind(LocalUserConfig(profile=profile, session_s=2.0, node=0), 0.0, rate)
    ops = list(LocalUser.model(cfg, SimContext(0, 1, lambda: 0.0)))
    computes = [op.cpu_s for op in ops if isinstance(op, Compute)]
    sleeps = [op.seconds for op in ops if isinstance(op, Sleep)]
    assert len(computes) == len(sleeps) == 20  # 2 s of 100 ms periods
    busy = computes[0] / rate  # seconds of the node's CPU alone
    share = PROFILES[profile].cpu_fraction
    assert busy / (busy + sleeps[0]) == pytest.approx(share, rel=1e-12)
    assert busy + sleeps[0] == pytest.approx(0.1, rel=1e-12)
    assert computes[0] == pytest.approx(share * 0.1 * rate, rel=1e-12)
    assert LocalUser.ideal_runtime(cfg) == pytest.approx(2.0)
    # The session's totals, every 10 cycles and at the end: ideal is cycles x period.
    ideal = [op.value for op in ops if isinstance(op, Progress) and op.unit == SESSION_IDEAL]
    assert ideal == pytest.approx([1.0, 2.0])


def test_profiles_are_the_papers_and_fields_override_them():
    assert (PROFILES["cpu"].cpu_fraction, PROFILES["cpu"].memory_mb, PROFILES["cpu"].bytes_per_s) == (
        0.65,
        35.0,
        0.0,
    )
    assert (PROFILES["xwin"].cpu_fraction, PROFILES["xwin"].memory_mb, PROFILES["xwin"].bytes_per_s) == (
        0.2,
        84.0,
        3000.0,
    )
    c = LocalUser.resolve(LocalUserConfig(profile="xwin", memory_mb=10, node=0))
    assert (c.cpu_fraction, c.memory_mb, c.bytes_per_s) == (0.2, 10.0, 3000.0)
    assert LocalUser.memory_mb(LocalUserConfig(profile="cpu", node=0), 1) == 35.0


# --------------------------------------------------------------------------------------------------------
# Session lengths


def test_hyperexponential_lengths_have_the_formulas_moments_and_are_scaled():
    lengths = SessionLengths()  # the paper's: means 600 and 3600 s, weights 0.6 / 0.4, scale 0.01
    x = lengths.draw(np.random.default_rng(1), 40_000)
    mean = 0.01 * (0.6 * 600 + 0.4 * 3600)  # 18 s
    second = 0.01**2 * (0.6 * 2 * 600**2 + 0.4 * 2 * 3600**2)
    assert lengths.mean() == pytest.approx(mean) and lengths.second_moment() == pytest.approx(second)
    assert float(x.mean()) == pytest.approx(mean, rel=0.10)
    assert float((x**2).mean()) == pytest.approx(second, rel=0.10)
    # A hyper-exponential is more variable than an exponential of its mean: CV^2 > 1 (here 2.46).
    assert second / mean**2 - 1 > 2.0


def test_sessions_are_drawn_from_the_seed_apart_from_other_jobs():
    gen = {"count": 5, "mean_interarrival_s": 1.0, "size": {"min": 1, "max": 2}}
    plain = _scn(jobs=(), generator=gen)
    users = [{"nodes": [0, 1], "profile": "xwin", "count": 3, "mean_gap_s": 2.0}]
    with_users = _scn(users, jobs=(), generator=gen)
    key = [(j.job_id, j.spec.submit_time, j.app) for j in workload.build(plain)]
    both = workload.build(with_users)
    assert [(j.job_id, j.spec.submit_time, j.app) for j in both if j.spec.owner_node is None] == key
    sessions = [j for j in both if j.spec.owner_node is not None]
    assert len(sessions) == 6 and {j.spec.owner_node for j in sessions} == {0, 1}
    assert all(j.spec.job_class == "xwin-user" and j.spec.memory_mb == 84.0 for j in sessions)
    again = [
        (j.job_id, j.spec.submit_time, j.app)
        for j in workload.build(with_users)
        if j.spec.owner_node is not None
    ]
    assert again == [(j.job_id, j.spec.submit_time, j.app) for j in sessions]
    # One after another on each node: the next arrives after the previous one's length alone.
    drawn = draw(with_users.workload.local_users, 7)
    node0 = [d for d in drawn if d[1] == 0]
    assert all(b[2] >= a[2] + a[3] - 1e-6 for a, b in zip(node0, node0[1:], strict=False))


@pytest.mark.parametrize(
    ("users", "jobs", "expect"),
    [
        ([{"nodes": [0, 5]}], (PARALLEL,), "workload.local_users.0.nodes: node(s) [5] do not exist"),
        ([{"nodes": [1, 1]}], (PARALLEL,), "workload.local_users.0: nodes: node(s) [1] listed twice"),
        ([{"nodes": []}], (PARALLEL,), "workload.local_users.0.nodes"),
        ([{"nodes": [0], "profile": "gpu"}], (PARALLEL,), "workload.local_users.0.profile"),
        ([{"nodes": [0], "session": {"weights": [1.0]}}], (PARALLEL,), "workload.local_users.0.session"),
        ([{"nodes": [0], "session": {"scale": 0}}], (PARALLEL,), "workload.local_users.0.session.scale"),
        ([{"nodes": [0], "count": 0}], (PARALLEL,), "workload.local_users.0.count"),
        ([], [{"size": 1, "app": {"kind": "localuser"}}], "workload.jobs.0.app.node: required"),
        ([], [{"size": 1, "app": {"kind": "localuser", "node": 9}}], "workload.jobs.0.app.node: node 9 does"),
        ([], [{"size": 2, "app": {"kind": "localuser", "node": 0}}], "workload.jobs.0.size: 2"),
        (
            [],
            [{"size": 1, "app": {"kind": "localuser", "node": 0, "profile": "x"}}],
            "workload.jobs.0.app.profile",
        ),
    ],
)
def test_bad_local_users_are_refused_with_one_line_naming_the_field(users, jobs, expect):
    with pytest.raises(ScenarioError) as ei:
        _scn(users, jobs)
    assert len(ei.value.problems) == 1 and "\n" not in str(ei.value), str(ei.value)
    assert expect in str(ei.value)


@pytest.mark.parametrize(
    "session",
    [{"means_s": [1e300], "weights": [1.0]}, {"scale": 1e300}, {"means_s": [1e200, 1e200], "scale": 1e200}],
)
def test_session_lengths_beyond_the_longest_session_are_refused_as_one_line(session, tmp_path):
    # Before, validate built the jobs and a drawn length of 1e298 s hit LocalUserConfig's session_s bound:
    # a pydantic traceback, exit 1.
    from testbed import runner
    from testbed.scenario.localusers import MAX_MEAN_SESSION_S

    with pytest.raises(ScenarioError) as ei:
        _scn([{"nodes": [0], "session": session}], (PARALLEL,))
    assert len(ei.value.problems) == 1 and "\n" not in str(ei.value), str(ei.value)
    assert "workload.local_users.0.session: scale (" in str(ei.value)
    assert "; lower scale or means_s" in str(ei.value)
    # The bound itself is accepted, and the jobs build; weights near the float maximum too.
    ok = {"means_s": [MAX_MEAN_SESSION_S], "weights": [1e308], "scale": 1.0}
    runner.preflight(_scn([{"nodes": [0], "count": 20, "session": ok}], (PARALLEL,)), "sim", tmp_path / "o")
    two = {"weights": [1e308, 1e308]}
    assert len(workload.build(_scn([{"nodes": [0], "count": 20, "session": two}], (PARALLEL,)))) == 21


def test_validate_refuses_a_local_user_on_no_node_with_one_line_and_exit_2(tmp_path):
    f = tmp_path / "bad.yaml"
    doc = {"cluster": {"nodes": 2}, "workload": {"local_users": [{"nodes": [2]}]}}
    f.write_text(yaml.safe_dump(doc))
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "validate", str(f), "--backend", "sim"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    [line] = p.stderr.strip().splitlines()
    assert line.startswith("error: ") and "workload.local_users.0.nodes" in line


# --------------------------------------------------------------------------------------------------------
# The owner's job in the simulator


class _Seen(RunAll):
    """RunAll that keeps every ProcAdded it hears."""

    added: list[tuple[int, ProcAdded]] = []

    def on_event(self, now, event):
        if isinstance(event, ProcAdded):
            _Seen.added.append((self.node, event))
        return super().on_event(now, event)


def _session(job_id: str, node: int, profile: str = "cpu", session_s: float = 3.0, t: float = 0.0) -> Job:
    cfg, _ = LocalUser.bind(LocalUserConfig(profile=profile, session_s=session_s, node=node), t, 1.0)
    cls = LocalUser.default_class(cfg)
    spec = JobSpec(job_id, 1, t, memory_mb=LocalUser.memory_mb(cfg, 1), job_class=cls, owner_node=node)
    return Job(spec, cfg)


def _cpu_bound(job_id: str, size: int, seconds: float) -> Job:
    app = SyntheticConfig(iterations=10, gcomp=seconds * 100, barrier=False)
    return Job(JobSpec(job_id, size, 0.0), app)


def _simulate(jobs, scheduler: type[Scheduler] | str = "local", nodes: int = 2, params=None):
    sched = registry.get(scheduler) if isinstance(scheduler, str) else scheduler
    sim = Simulation(jobs, sched, params or {}, nodes=nodes)
    events = sim.run()
    return sim, events, {r["job_id"]: r for r in results.job_rows(events)}


def _slowdown(events, job_id: str) -> float:
    last = {}
    for e in events:
        if e["kind"] == "progress" and e["job"] == job_id:
            last[e["unit"]] = e["value"]
    return last[SESSION_ELAPSED] / last[SESSION_IDEAL]


@pytest.mark.parametrize(("profile", "expect"), [("cpu", 2 * 0.65 + 0.35), ("xwin", 2 * 0.2 + 0.8)])
def test_a_session_alone_has_slowdown_1_and_beside_a_cpu_bound_job_2f_plus_1_minus_f(profile, expect):
    _, events, _ = _simulate([_session("s", 0, profile)])
    assert _slowdown(events, "s") == pytest.approx(1.0, abs=1e-9)
    # Beside a CPU-bound parallel process under native local scheduling (processor sharing, equal nice),
    # the session's compute runs at half speed: slowdown 2f + (1 - f), 1.65 for a CPU user.
    _, events, rows = _simulate([_cpu_bound("par", 2, 30.0), _session("s", 1, profile)])
    assert _slowdown(events, "s") == pytest.approx(expect, rel=1e-9)
    assert rows["par"]["final_state"] == results.FinalState.COMPLETED


def test_a_session_starts_at_once_on_its_node_bypassing_the_global_policy():
    batch = registry.get("batch")
    heard: list[str] = []

    class Recorded(batch.global_policy):
        def submit(self, now, job):
            heard.append(job.job_id)
            return super().submit(now, job)

        def finished(self, now, job_id):
            heard.append(job_id)
            return super().finished(now, job_id)

    class Watched(batch):
        global_policy = Recorded
        local_policy = _Seen

    _Seen.added = []
    jobs = [_cpu_bound("par", 2, 3.0), _session("s", 1, t=0.5)]
    sim, events, rows = _simulate(jobs, Watched)
    # batch holds both nodes for "par" (one job per node), yet the session starts on node 1 at its arrival.
    assert rows["s"]["starting_time"] == 0.5 and rows["s"]["allocated_resources"] == "1"
    assert rows["s"]["final_state"] == results.FinalState.COMPLETED
    started = [e for e in events if e["kind"] == "job_started"]
    assert [e["job"] for e in started] == ["par", "s"]
    submitted = {e["job"]: e for e in events if e["kind"] == "job_submitted"}
    assert submitted["s"]["owner_node"] == 1 and "owner_node" not in submitted["par"]
    # The global policy never heard of it: neither its arrival nor its end.
    assert heard == ["par", "par"]
    # The node's local policy saw it as a local process, the parallel job's as not.
    local = {(n, e.proc.job_id): e.local for n, e in _Seen.added}
    assert local == {(0, "par"): False, (1, "par"): False, (1, "s"): True}


def test_results_give_each_sessions_slowdown_and_leave_sessions_out_of_the_parallel_means(tmp_path):
    jobs = [_cpu_bound("par", 2, 3.0), _session("c", 0, "cpu"), _session("x", 1, "xwin")]
    _, events, _ = _simulate(jobs)
    facts = results.RunFacts(
        nodes=2,
        cpu_rate=1.0,
        cores_per_node=1,
        idle_watts=0.0,
        busy_watts=0.0,
        tdf=1.0,
        envelope="modelled",
        backend="sim",
        scheduler="local",
    )
    summary = results.write(tmp_path, events, facts)
    with open(tmp_path / "jobs.csv") as fh:
        rows = {r["job_id"]: r for r in csv.DictReader(fh)}
    assert list(rows["par"])[-1] == results.LOCAL_SLOWDOWN and rows["par"][results.LOCAL_SLOWDOWN] == ""
    assert float(rows["c"][results.LOCAL_SLOWDOWN]) == pytest.approx(1.65, rel=1e-6)
    assert float(rows["x"][results.LOCAL_SLOWDOWN]) == pytest.approx(1.2, rel=1e-6)
    assert summary["local_sessions"] == 2
    assert summary["local_slowdown_mean.cpu-user"] == pytest.approx(1.65, rel=1e-6)
    assert summary["local_slowdown_max.xwin-user"] == pytest.approx(1.2, rel=1e-6)
    assert summary["local_slowdown_max"] == pytest.approx(1.65, rel=1e-6)
    # The parallel job's own figures: its response time, not the sessions' (3 s each).
    par = float(rows["par"]["turnaround_time"])
    assert summary["mean_response_time_s"] == pytest.approx(par)
    assert not any(k.startswith(("session_elapsed", "session_ideal")) for k in summary)  # no rate of a time
    json.dumps(summary)


@pytest.mark.parametrize("overlap", ["wait", "share"])
def test_a_users_next_session_waits_for_the_previous_one_unless_told_to_share(overlap):
    # Session 0 (3 s alone) beside a CPU-bound process takes 3 x 1.65 = 4.95 s; session 1 arrives at 3 s,
    # its drawn time (session 0's length alone, no gap).
    first = _session("u0.n1.s0", 1)
    second = _session("u0.n1.s1", 1, t=3.0)
    if overlap == "wait":
        second = dataclasses.replace(second, after="u0.n1.s0")
    _, events, rows = _simulate([_cpu_bound("par", 2, 30.0), first, second])
    started = {e["job"]: e["t"] for e in events if e["kind"] == "job_started"}
    assert rows["u0.n1.s0"]["final_state"] == rows["u0.n1.s1"]["final_state"] == results.FinalState.COMPLETED
    if overlap == "wait":
        # One session at a time: the second starts as the first ends, and runs as the first did.
        assert started["u0.n1.s1"] == pytest.approx(3.0 * (2 * 0.65 + 0.35), rel=1e-6)
        assert _slowdown(events, "u0.n1.s1") == pytest.approx(2 * 0.65 + 0.35, rel=1e-6)
    else:
        # Beside the first for 1.95 s: three processes share the node, so the second is slowed more.
        assert started["u0.n1.s1"] == pytest.approx(3.0)
        assert _slowdown(events, "u0.n1.s1") > 2 * 0.65 + 0.35 + 0.05


def test_the_scenario_chains_each_users_sessions_under_overlap_wait_and_not_under_share():
    users = [{"nodes": [0, 1], "count": 3}]
    jobs = {j.job_id: j for j in workload.build(_scn(users, jobs=())) if j.spec.owner_node is not None}
    assert {k: j.after for k, j in jobs.items()} == {
        "u0.n0.s0": None, "u0.n0.s1": "u0.n0.s0", "u0.n0.s2": "u0.n0.s1",
        "u0.n1.s0": None, "u0.n1.s1": "u0.n1.s0", "u0.n1.s2": "u0.n1.s1",
    }  # fmt: skip
    users[0]["overlap"] = "share"
    assert all(j.after is None for j in workload.build(_scn(users, jobs=())) if j.spec.owner_node is not None)
