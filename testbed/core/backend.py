"""The runner-level interface of a backend (docs/architecture.md, "A job's path"): what the runner asks of
real processes (:class:`testbed.emulator.backend.RayBackend`) and of the simulator
(:class:`testbed.sim.Simulation`) alike, and the :class:`Outcome` each returns.

A backend runs one repetition of a scenario's jobs into a results folder: it leaves the folder's
``events.jsonl`` (the run's truth) and returns how the run ended. It does not raise for how a run ends (an
error, Ctrl-C): that is part of its outcome, and the runner writes the results first, then raises
(:func:`testbed.runner.run_once`). It raises only :class:`PreflightError`, before anything has run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from testbed.core.clock import host_cores

if TYPE_CHECKING:
    from testbed.core.jobs import Job
    from testbed.scenario import Scenario

#: summary.json's ``ended`` for a run stopped by Ctrl-C (or SIGTERM, which the CLI turns into it).
INTERRUPTED = "interrupted (Ctrl-C)"
#: summary.json's ``ended`` when every job reached a final state.
ALL_JOBS_ENDED = "all jobs ended"


def wall_limit_reached(limit_s: float) -> str:
    """How a run that reached the scenario's ``wall_limit_s`` ended, in either backend."""
    return f"wall_limit_s ({limit_s:g} s real) reached"


class PreflightError(ValueError):
    """The run cannot start as asked; the message is one line naming the field or option and the fix."""


def _quiet(_: Any) -> None:
    return None


@dataclass(frozen=True)
class Hooks:
    """What a run tells its caller as it goes (None: nothing): ``on_status(status)`` the jobs' progress and
    the emulated time (the coordinator's status shape: now, counts, total, final, done), ``on_phase(text)``
    the start-up phase entered, ``notice(text)`` a line for the user (where to look)."""

    on_status: Callable[[dict], Any] | None = None
    on_phase: Callable[[str], Any] | None = None
    notice: Callable[[str], Any] | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) is None:
                object.__setattr__(self, f.name, _quiet)


@dataclass(kw_only=True)
class Outcome:
    """How one run ended, with the facts its summary needs that the event log does not hold.

    ``cause``: the exception that ended it, if one did. The runner raises it on (Ctrl-C) or raises
    :class:`testbed.runner.RunFailed` from it, with ``exit_code`` (2: the host cannot run it, Ray could not
    start; 1: any other error), once the results are written."""

    tdf: float
    #: What held a node's processes ("modelled" in the simulator); None until known.
    envelope: str | None = None
    ended: str = "error: the run stopped without saying why"
    error: str | None = None
    exit_code: int = 1
    cause: BaseException | None = field(default=None, repr=False, compare=False)
    #: CPU s of apps/speed.py's fixed work on the run's host, where a real run measured it (its jobs'
    #: simulator models are measured ones): the host the run's dedicated references stand for.
    host_speed_s: float | None = None

    @property
    def interrupted(self) -> bool:
        """Ended by Ctrl-C (or anything else that is not an error of the run: the runner raises it on)."""
        return self.cause is not None and not isinstance(self.cause, Exception)

    def summary_fields(self) -> dict[str, Any]:
        """summary.json's keys that come from the outcome, in the file's order."""
        return {"ended": self.ended, "error": self.error}


@dataclass(kw_only=True)
class RealOutcome(Outcome):
    """A run on real processes: its id, what start-up took, what the node agents reported, and (on a
    joined Ray cluster only: ``cluster.ray_address``) where each agent process ran and the nodes whose
    events and logs went with a host that died."""

    run_id: str | None = None
    #: Real seconds from the start of bring-up to the first job's start.
    startup_s: float | None = None
    #: Real seconds per start-up phase (start-up is a benchmarked figure).
    phases_s: dict[str, float] | None = None
    agent_priority: list | None = None
    session_priority: str | None = None
    #: The run's control cgroup (emulator/mechanism/controlgroup.py), or "none: why".
    control_group: str | None = None
    #: CPU seconds the control plane used (the control cgroup's cpuacct), where there was one.
    control_cpu_s: float | None = None
    envelope_note: str | None = None
    #: The quota tick's threads (emulator/mechanism/quotatick.py), where ``cluster.quota_tick_us`` is set.
    quota_tick: str | None = None
    #: Why the nodes' host may charge a job for memory a bare-metal node would not (free page reporting:
    #: emulator/mechanism/hostmem.py), or "" where it does not.
    host_memory_note: str | None = None
    #: The two figures the real run's ``host_speed_s`` is the mean of: before its jobs and after them.
    host_speeds_s: list[float] | None = None
    nodes_down: list[int] | None = None
    agent_hosts: list | None = None
    logs_lost: list[int] | None = None

    def summary_fields(self) -> dict[str, Any]:
        fields = {
            **super().summary_fields(),
            "run_id": self.run_id,
            "startup_s": self.startup_s,
            "phases_s": self.phases_s,
            "agent_priority": self.agent_priority,
            "session_priority": self.session_priority,
            "control_group": self.control_group,
            "control_cpu_s": self.control_cpu_s,
            "envelope_note": self.envelope_note,
            "host_memory_note": self.host_memory_note,
            "host_speed_s": self.host_speed_s,
            "host_speeds_s": self.host_speeds_s,
            "nodes_down": self.nodes_down,
            "host_cores": host_cores(),
        }
        # Present only where they apply (a joined cluster; a quota tick), as the summary always had them.
        for key in ("agent_hosts", "logs_lost", "quota_tick"):
            if getattr(self, key) is not None:
                fields[key] = getattr(self, key)
        return fields


class Backend(Protocol):
    """Runs one repetition of a scenario. ``name`` is the summary's ``backend`` ("ray", "sim")."""

    name: str

    def run_scenario(self, scn: Scenario, jobs: Sequence[Job], run_dir: Path, hooks: Hooks) -> Outcome:
        """Runs ``jobs`` (built from ``scn``) with ``run_dir`` (absolute, claimed) as the results folder;
        returns with ``run_dir/events.jsonl`` written, however the run ended."""
        ...
