"""The node-control boundary: what the coordinator asks of a node, as typed commands.

The coordinator (testbed/emulator/coordinator.py) never names an agent's method: it sends a command, one
frozen dataclass per thing a node does, and :func:`execute` calls the :class:`NodeControl` method that
carries it out. So a new capability is one command class and one method, checked by type, and the
batching of calls into one Ray call per agent process (testbed/emulator/actors.py) keys on the command's
class, not on a method's name.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from testbed.schedulers.base import JobSpec


@dataclass(frozen=True)
class StartProc:
    """Start rank ``rank`` of ``job_id``'s start number ``attempt``: ``argv`` with the job's ``env`` on top
    of the node's own (testbed.core.jobs.Job.launch says what the job's part holds). ``spec`` is the job as
    the global policy saw it: the local policy hears of it with the process."""

    job_id: str
    rank: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    job_class: str | None = None
    attempt: int = 1
    spec: JobSpec | None = None
    #: The job's other allocated nodes and their NICs: where the node's policy's CoopEvents for the job go.
    peers: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SwitchSlot:
    """From emulated time ``at``, the node may run only the jobs in ``allowed``; ``slot`` is the gang
    matrix row (for the skew statistics). Sent ahead: the node switches on its own timer."""

    at: float
    slot: int
    allowed: tuple[str, ...]


@dataclass(frozen=True)
class KillJob:
    """Kill the job's processes on the node: those of start ``attempt`` or earlier (None: all), since a
    later start is not the one the caller meant."""

    job_id: str
    reason: str
    attempt: int | None = None


@dataclass(frozen=True)
class SetDown:
    """A scripted fault: down kills every process of the node and refuses new ones until it is up again."""

    down: bool
    reason: str = ""


@dataclass(frozen=True)
class Ping:
    """Is the node's agent alive? (A dead one fails the call.)"""


NodeCommand = StartProc | SwitchSlot | KillJob | SetDown | Ping
#: Commands made in one turn of the coordinator's loop that travel together, one Ray call per agent
#: process: a job's ranks, a slot's nodes (a 16-rank start is 4 Ray calls at 4 nodes per process).
BATCHED: tuple[type, ...] = (StartProc, SwitchSlot)


class NodeControl(Protocol):
    """What a node agent does for the coordinator (testbed/emulator/agent.py implements it)."""

    def start_proc(self, cmd: StartProc) -> int:
        """Returns the new process's pid."""
        ...

    def switch_slot(self, cmd: SwitchSlot) -> None: ...

    def kill_job(self, cmd: KillJob) -> int:
        """Returns how many processes were killed."""
        ...

    def set_down(self, cmd: SetDown) -> int:
        """Returns how many processes were killed."""
        ...

    def ping(self, cmd: Ping) -> int:
        """Returns the node's number."""
        ...


def execute(node: NodeControl, cmd: NodeCommand):
    """Carries out ``cmd`` on ``node``: the one place a command meets a method."""
    match cmd:
        case StartProc():
            return node.start_proc(cmd)
        case SwitchSlot():
            return node.switch_slot(cmd)
        case KillJob():
            return node.kill_job(cmd)
        case SetDown():
            return node.set_down(cmd)
        case Ping():
            return node.ping(cmd)
    raise TypeError(f"not a node command: {cmd!r}")


class NodeHandle(Protocol):
    """How the coordinator reaches one node: :meth:`send` returns the command's future result."""

    def send(self, cmd: NodeCommand) -> cf.Future: ...


class LocalHandle:
    """A NodeAgent in this process, its commands run on ``pool`` (tests, and in-process use)."""

    def __init__(self, agent: NodeControl, pool: cf.ThreadPoolExecutor) -> None:
        self.agent = agent
        self.pool = pool

    def send(self, cmd: NodeCommand) -> cf.Future:
        return self.pool.submit(execute, self.agent, cmd)
