"""The names a scenario gives the testbed's mechanisms and faults, shared by the scenario's model and the
backends that act on them: the envelope kinds, scripted node faults, and what becomes of a down node's
jobs."""

from __future__ import annotations

from dataclasses import dataclass

from testbed.core.jobs import StrEnum

#: What holds a node's processes and fixes its rate (testbed/emulator/mechanism/envelopes.py has a class
#: for each but ``auto``, which picks ``cgroup`` or ``none``, and ``cgroup``, which picks the host's version).
ENVELOPE_KINDS = ("auto", "cgroup", "cgroup-v1", "cgroup-v2", "docker", "pod", "none")


class OnNodeDown(StrEnum):
    """What becomes of the jobs running on a node that goes down (the scenario's ``faults.on_node_down``)."""

    FAIL = "fail"
    REQUEUE = "requeue"


class FaultKind(StrEnum):
    DOWN = "down"  # the node fails: its processes die, it takes no new ones
    UP = "up"  # it is back, empty


@dataclass(frozen=True)
class Fault:
    """A scripted node fault (the scenario's ``faults.script``), at emulated time ``at_s``."""

    at_s: float
    node: int
    kind: FaultKind
