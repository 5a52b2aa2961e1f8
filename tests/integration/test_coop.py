"""Events between cooperating nodes (schedulers/base.py CoopEvent, issue 22): a local policy's event
reaches the other nodes of its job, one link time later, and both ends are in the event log. On real
processes through the nodes' NICs (in-process agents, real workers, real sockets), and in the simulator."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from testbed.schedulers import registry
from testbed.schedulers.base import CoopEvent, CoopReceived, LocalDecision, ProcAdded, ProcExited, RunAll
from testbed.schedulers.local import Local

from testbed.core import coop
from testbed.core import events as ev
from testbed.sim.engine import simulate

from .test_gang_nodes import _job, _run


@dataclass(frozen=True)
class Hello(CoopEvent):
    """The test's event: which node first ran a process of the job, and a tuple to carry."""

    node: int
    words: tuple[str, ...] = ("hello", "there")


class Announce(RunAll):
    """Runs everything (as local scheduling does) and tells a job's other nodes when a process of it starts
    here; checks what it hears (an error in a policy ends the run, and the test with it)."""

    def on_event(self, now, event):
        decision = super().on_event(now, event)
        if isinstance(event, ProcAdded):
            return LocalDecision(run=decision.run, coop=(Hello(event.proc.job_id, self.node),))
        if isinstance(event, CoopReceived):
            assert isinstance(event.event, Hello) and event.event.words == ("hello", "there")
        assert isinstance(event, ProcAdded | ProcExited | CoopReceived), event
        return decision


class Cooperating(Local):
    name = "test-coop"
    summary = "local scheduling whose nodes announce their jobs to each other (a test's)"
    local_policy = Announce


@pytest.fixture
def coop_scheduler(monkeypatch):
    targets = {**registry._targets(), Cooperating.name: f"{__name__}:Cooperating"}
    monkeypatch.setattr(registry, "_targets", lambda: targets)


def _check(events, latency_s, nodes):
    assert not [e for e in events if e["kind"] == ev.RUN_ERROR]  # the policies' own checks held
    sent = [e for e in events if e["kind"] == ev.COOP_SENT]
    got = [e for e in events if e["kind"] == ev.COOP_RECEIVED]
    assert sorted(e["node"] for e in sent) == nodes  # each node of the job, once (one process each)
    for e in sent:
        assert e["event"] == "Hello" and e["fields"]["job_id"] == "a" and e["fields"]["node"] == e["node"]
        assert e["to"] == [n for n in nodes if n != e["node"]]
    pairs = sorted((e["from_node"], e["node"]) for e in got)
    assert pairs == sorted((s, r) for s in nodes for r in nodes if s != r)
    at = {e["node"]: e["t"] for e in sent}
    delays = [e["t"] - at[e["from_node"]] for e in got]
    assert all(d >= latency_s for d in delays), delays
    for e in got:
        assert list(e["fields"]["words"]) == ["hello", "there"] and e["fields"]["node"] == e["from_node"]
    return delays


def test_coop_events_go_node_to_node_in_the_simulator(coop_scheduler):
    events = simulate([_job("a", 3, iterations=5)], Cooperating, {}, nodes=3, latency_s=500e-6)
    delays = _check(events, 500e-6, [0, 1, 2])
    assert delays == pytest.approx([500e-6] * 6, abs=1e-9)  # the latency, the link having no bandwidth limit


def test_coop_events_go_nic_to_nic_on_real_processes(tmp_path, coop_scheduler):
    events = _run(tmp_path, "test-coop", {}, [_job("a", 3, iterations=5)], nodes=3, latency_s=2e-3)
    delays = _check(events, 2e-3, [0, 1, 2])
    print("real coop delays (s):", delays)
    assert max(delays) < 0.2, delays  # a link time, not a stall


def test_a_coop_event_travels_as_json_of_plain_fields_only():
    body = coop.encode(Hello("a", 3), src=1)
    assert coop.decode(body) == (1, Hello("a", 3))

    @dataclass(frozen=True)
    class Bad(CoopEvent):
        where: object = None

    with pytest.raises(coop.CoopError, match=r"Bad.where = \{\}: a CoopEvent's fields must be str, int"):
        coop.encode(Bad("a", {}), src=0)
    for body in (b"garbage", b'{"type": "os.system", "src": 0, "fields": {}}', b'{"type": 1}'):
        with pytest.raises(coop.CoopError):
            coop.decode(body)
