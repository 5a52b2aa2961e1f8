"""The decision core (testbed/core/decision.py): one job-state machine, one refusal of impossible actions,
node
faults and Kill / Requeue, checked through the simulator (its backend) and directly."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from testbed.apps.synthetic import SyntheticConfig
from testbed.schedulers.base import (
    Dispatch,
    GlobalPolicy,
    JobSpec,
    Kill,
    Reject,
    Requeue,
    Scheduler,
    SlotJobs,
    Start,
)

from testbed.core import events as ev
from testbed.core.decision import DecisionCore, PolicyError
from testbed.core.jobs import Job, JobState
from testbed.core.kinds import Fault, FaultKind
from testbed.scenario import ScenarioError, load
from testbed.sim import simulate


def _job(job_id: str, size: int = 1, t: float = 0.0, iterations: int = 10, gcomp: float = 100.0) -> Job:
    return Job(JobSpec(job_id, size, t), SyntheticConfig(iterations=iterations, gcomp=gcomp))


class Scripted(GlobalPolicy):
    """Answers each submit with the actions the test scripted for that job (FCFS on free nodes else)."""

    script: dict[str, list] = {}
    cap: int | None = 1

    def __init__(self, nodes: int, params: Mapping[str, Any], seed: int = 0) -> None:
        super().__init__(nodes, params, seed)
        self.queue: list[JobSpec] = []
        self.busy: dict[str, tuple[int, ...]] = {}
        self.heard: list[tuple] = []

    def max_jobs_per_node(self) -> int | None:
        return self.cap

    def submit(self, now, job):
        self.heard.append(("submit", job.job_id))
        if job.job_id in self.script:
            return self.script[job.job_id]
        self.queue.append(job)
        return self._place()

    def finished(self, now, job_id):
        self.heard.append(("finished", job_id))
        self.busy.pop(job_id, None)
        return self._place()

    def node_down(self, now, node):
        self.heard.append(("down", node))
        super().node_down(now, node)
        return self._place()

    def node_up(self, now, node):
        self.heard.append(("up", node))
        super().node_up(now, node)
        return self._place()

    def _place(self):
        out = []
        while self.queue:
            used = {n for nodes in self.busy.values() for n in nodes} | self.down
            free = [n for n in range(self.nodes) if n not in used]
            job = self.queue[0]
            if len(free) < job.size:
                break
            self.queue.pop(0)
            self.busy[job.job_id] = tuple(free[: job.size])
            out.append(Start(job.job_id, tuple(free[: job.size])))
        return out


class ScriptedSched(Scheduler):
    name = "scripted"
    summary = "test"
    global_policy = Scripted


def _states(events) -> dict[str, str]:
    final = {
        ev.JOB_FINISHED: JobState.FINISHED,
        ev.JOB_FAILED: JobState.FAILED,
        ev.JOB_KILLED: JobState.KILLED,
    }
    out = {}
    for e in events:
        if e["kind"] in final:
            out[e["job"]] = final[e["kind"]]
    return out


@pytest.fixture(autouse=True)
def _reset():
    Scripted.script = {}
    Scripted.cap = 1
    yield


@pytest.mark.parametrize(
    "action, says",
    [
        (Start("ghost", (0,)), "Start of job ghost: no such job"),
        (Start("a", (7,)), "Start of job a: node(s) [7] out of range (the cluster has nodes 0..1)"),
        (Start("a", (-1,)), "Start of job a: node(s) [-1] out of range"),
        (Start("a", (0.5,)), "Start of job a: node(s) [0.5] out of range"),  # a node is a whole number
        (Start("a", (0, 1)), "Start of job a: 2 nodes [0, 1] for a job of size 1"),
        (Reject("b", "why"), "Reject of job b: the job is pending, not queued"),
        (Kill("a", "x"), "Kill of job a: the job is queued, not running"),
        (Requeue("a", "x"), "Requeue of job a: the job is queued, not running"),
        (Dispatch(0.0, 0, {5: frozenset({"a"})}), "Dispatch of slot 0: node(s) [5] out of range"),
        (Dispatch(0.0, 0, {0: frozenset({"zz"})}), "Dispatch of slot 0: no such job(s) ['zz']"),
        # A plan by job: its jobs' nodes (not the very tuples their Starts gave) and its jobs checked alike.
        (Dispatch(0.0, 0, SlotJobs(2, {"a": (0, 5)})), "Dispatch of slot 0: node(s) [5] out of range"),
        (Dispatch(0.0, 0, SlotJobs(2, {"a": (0,), "zz": (1,)})), "Dispatch of slot 0: no such job(s) ['zz']"),
        ("not an action", "returned 'not an action', not Start"),
    ],
)
def test_an_impossible_action_is_refused_naming_the_policy(action, says):
    Scripted.script = {"a": [action]}
    with pytest.raises(PolicyError) as err:
        simulate([_job("a"), _job("b", t=5.0)], ScriptedSched, {}, nodes=2)
    assert str(err.value).startswith("scheduler 'scripted': ") and says in str(err.value), str(err.value)


def test_a_node_beyond_the_policys_own_limit_is_refused():
    Scripted.script = {"b": [Start("b", (0,))]}  # a holds node 0, and the policy says one job per node
    with pytest.raises(PolicyError, match=r"Start of job b: node\(s\) \[0\] would hold more than 1 job"):
        simulate([_job("a"), _job("b", t=0.01)], ScriptedSched, {}, nodes=2)
    Scripted.cap = None  # unbounded: the same start is allowed (the two jobs share the node)
    events = simulate([_job("a"), _job("b", t=0.01)], ScriptedSched, {}, nodes=2)
    assert _states(events) == {"a": JobState.FINISHED, "b": JobState.FINISHED}


def test_kill_and_requeue_from_the_policy():
    # b starts, is requeued at once (the policy keeps it queued and never restarts it: killed at the end);
    # c starts and is killed by the policy.
    Scripted.script = {
        "b": [Start("b", (1,)), Requeue("b", "make room")],
        "c": [Start("c", (1,)), Kill("c", "over budget")],
    }
    events = simulate([_job("a"), _job("b"), _job("c", t=0.5)], ScriptedSched, {}, nodes=2, duration=5.0)
    kinds = [(e["kind"], e.get("job")) for e in events if e["src"] == "coordinator"]
    assert (ev.JOB_REQUEUED, "b") in kinds
    killed = {e["job"]: e["reason"] for e in events if e["kind"] == ev.JOB_KILLED}
    assert killed["c"] == "killed by the policy: over budget"
    assert killed["b"] == f"{ev.DURATION_REACHED} before it started"
    # The requeued and killed jobs' processes are gone, with the reason.
    exits = {(e["job"], e["rank"]): e["reason"] for e in events if e["kind"] == ev.PROC_EXITED}
    assert (
        exits[("b", 0)] == "killed: make room"
        and exits[("c", 0)] == "killed: killed by the policy: over budget"
    )


def test_a_node_going_down_fails_its_jobs_and_the_policy_hears_it():
    jobs = [_job("a", size=2), _job("b", size=1, t=0.5)]
    events = simulate(
        jobs, ScriptedSched, {}, nodes=3, faults=[Fault(0.3, 1, FaultKind.DOWN), Fault(1.0, 1, FaultKind.UP)]
    )
    assert _states(events) == {"a": JobState.FAILED, "b": JobState.FINISHED}
    failed = next(e for e in events if e["kind"] == ev.JOB_FAILED)
    assert failed["reason"] == "node 1 went down (scripted fault)" and failed["t"] == pytest.approx(0.3)
    down = next(e for e in events if e["kind"] == ev.NODE_DOWN)
    assert (down["node"], down["t"]) == (1, pytest.approx(0.3))
    assert any(e["kind"] == ev.NODE_UP and e["node"] == 1 for e in events)
    # b arrived while node 1 was down: the policy placed it elsewhere.
    started = {e["job"]: e["nodes"] for e in events if e["kind"] == ev.JOB_STARTED}
    assert 1 not in started["b"]


@pytest.mark.parametrize(("name", "params"), [("batch", {}), ("gang", {"mpl": 1})])
def test_a_job_queued_when_a_node_fails_starts_on_the_nodes_left(name, params):
    # a holds all 3 nodes, b waits for 2; node 1 fails under a. Before, a's end reached the policy before
    # the failure did, and it started b on node 1: the run stopped with "node(s) [1] are down".
    from testbed.schedulers import registry

    jobs = [_job("a", size=3, iterations=10, gcomp=100.0), _job("b", size=2, t=0.1)]
    events = simulate(jobs, registry.get(name), params, nodes=3, faults=[Fault(0.3, 1, FaultKind.DOWN)])
    assert _states(events) == {"a": JobState.FAILED, "b": JobState.FINISHED}
    started = {e["job"]: (e["t"], e["nodes"]) for e in events if e["kind"] == ev.JOB_STARTED}
    assert started["b"] == (pytest.approx(0.3), [0, 2])


def test_requeued_on_node_down_the_job_starts_again_from_the_beginning():
    jobs = [_job("a", size=2, iterations=10, gcomp=100.0)]  # 1 s of work
    events = simulate(
        jobs, ScriptedSched, {}, nodes=3, faults=[Fault(0.4, 0, FaultKind.DOWN)], on_node_down="requeue"
    )
    assert _states(events) == {"a": JobState.FINISHED}
    starts = [e for e in events if e["kind"] == ev.JOB_STARTED]
    assert [s["nodes"] for s in starts] == [[0, 1], [1, 2]]
    finished = next(e for e in events if e["kind"] == ev.JOB_FINISHED)
    # All of its work again after the fault: 1 s of CPU and 10 barriers of 2 x 50 us.
    assert finished["t"] == pytest.approx(0.4 + 1.0 + 10 * 100e-6)


def test_core_alone_follows_the_state_machine():
    calls = []

    class Backend:
        def launch(self, job, nodes):
            calls.append(("launch", job.job_id, nodes))

        def kill(self, job, nodes, reason):
            calls.append(("kill", job.job_id, nodes, reason))

        def dispatch(self, plan, nodes):
            calls.append(("dispatch", plan.slot, list(nodes)))

        def policy_consulted(self):
            pass

    log = []
    policy = Scripted(2, {})
    core = DecisionCore(
        [_job("a", 2), _job("b", 1)], policy, "scripted", 2, Backend(), lambda k, t, **f: log.append(k)
    )
    core.submit(0.0, "a")
    core.submit(0.0, "b")
    assert core.jobs["a"].state == JobState.RUNNING and core.jobs["b"].state == JobState.QUEUED
    core.rank_exited(1.0, "a", 0, True)
    assert core.jobs["a"].state == JobState.RUNNING  # one rank of two
    core.rank_exited(1.0, "a", 1, False, "rank 1 failed: boom")
    assert core.jobs["a"].state == JobState.FAILED
    assert ("kill", "a", (0, 1), "rank 1 failed: boom") in calls
    assert core.jobs["b"].state == JobState.RUNNING  # a's nodes were freed for b
    core.node_down(2.0, 0, "test")
    assert core.jobs["b"].state == JobState.FAILED and policy.down == {0}
    core.end(3.0, "over")
    assert core.open == 0 and log.count(ev.JOB_ADMITTED) == 2


def test_faults_section_is_checked():
    base = {"cluster": {"nodes": 4}, "workload": {"jobs": [{"size": 1}]}}

    def err(faults):
        with pytest.raises(ScenarioError) as e:
            load(doc={**base, "faults": faults})
        return str(e.value)

    assert "faults.script.0.node: node 9 does not exist (nodes 0..3)" in err(
        {"script": [{"at_s": 1, "node": 9, "kind": "down"}]}
    )
    assert "node 2 is already up at 1 s" in err({"script": [{"at_s": 1, "node": 2, "kind": "up"}]})
    assert "faults.on_node_down" in err({"on_node_down": "retry"})
    scn = load(
        doc={
            **base,
            "faults": {"on_node_down": "requeue", "script": [{"at_s": 1, "node": 2, "kind": "down"}]},
        }
    )
    assert scn.faults.faults() == [Fault(1.0, 2, FaultKind.DOWN)]


@pytest.mark.parametrize("name", sorted(__import__("testbed.schedulers.registry", fromlist=["x"]).names()))
@pytest.mark.parametrize("on_node_down", ["fail", "requeue"])
def test_every_policy_keeps_off_a_down_node_and_uses_it_again_once_up(name, on_node_down):
    from testbed.schedulers import registry

    # 0.4 s jobs of 2 ranks every 0.2 s on 4 nodes: node 1 is busy when it goes down, and needed after.
    jobs = [_job(f"j{i}", size=2, t=0.2 * i, iterations=5, gcomp=80.0) for i in range(13)]
    if registry.get(name).__module__.endswith(".divisible"):
        # Paper 001's policies run divisible loads only: tasks of the same length (0.4 s on one node).
        from testbed.apps.divisible import Divisible, DivisibleConfig

        cfg = DivisibleConfig(sigma=100, deadline_s=10.0, cms=0.002, cps=0.002)
        jobs = []
        for i in range(13):
            app, fields = Divisible.bind(cfg, 0.2 * i)
            jobs.append(Job(JobSpec(f"j{i}", 2, 0.2 * i, **fields), app))
    down, up = 0.25, 1.5
    events = simulate(
        jobs,
        registry.get(name),
        {},
        nodes=4,
        faults=[Fault(down, 1, FaultKind.DOWN), Fault(up, 1, FaultKind.UP)],
        on_node_down=on_node_down,
    )
    starts = [e for e in events if e["kind"] == ev.JOB_STARTED]
    assert not [s for s in starts if down <= s["t"] < up and 1 in s["nodes"]], starts
    assert any(s["t"] >= up and 1 in s["nodes"] for s in starts), "node 1 never used again"
    states = _states(events)
    assert len(states) == len(jobs)
    failed = {j for j, s in states.items() if s == JobState.FAILED}
    if on_node_down == "requeue":
        assert not failed and set(states.values()) == {JobState.FINISHED}
    else:
        assert failed and all(s in (JobState.FINISHED, JobState.FAILED) for s in states.values())
        reasons = {e["reason"] for e in events if e["kind"] == ev.JOB_FAILED}
        assert reasons == {"node 1 went down (scripted fault)"}
