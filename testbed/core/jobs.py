"""Jobs as the runtime knows them: what the policies see (:class:`JobSpec`), the program its processes run
(a program kind's resolved config, apps/base.py), and how those processes wait for messages
(:class:`WaitSpec`, settled by the scheduler). Shared by the emulator and the simulator, so both run the
same work."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from testbed.apps import registry as kinds
from testbed.apps.base import SEND_WAITS, WAIT_MODES, WORK_UNIT_S, AppConfig, Launch, ProgramKind, WaitSpec
from testbed.apps.environ import JobEnv
from testbed.schedulers.base import JobSpec

__all__ = ["SEND_WAITS", "WAIT_MODES", "WORK_UNIT_S", "Job", "JobSpec", "JobState", "WaitSpec"]


try:
    from enum import StrEnum
except ImportError:  # Python 3.10

    class StrEnum(str, Enum):
        """A name that is its own string value wherever it is written (logs, CSV, JSON, f-strings)."""

        def __str__(self) -> str:
            return self.value

        def __format__(self, spec: str) -> str:
            return self.value.__format__(spec)

        __hash__ = str.__hash__  # a member finds its value's entries in a dict read from JSON or CSV


class JobState(StrEnum):
    """Where a job is in the decision core's state machine (testbed/core/decision.py)."""

    PENDING = "pending"  # not arrived yet
    QUEUED = "queued"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    KILLED = "killed"
    REJECTED = "rejected"


#: The states a job ends in.
FINAL = (JobState.FINISHED, JobState.FAILED, JobState.KILLED, JobState.REJECTED)


@dataclass(frozen=True)
class Job:
    spec: JobSpec
    app: AppConfig
    wait: WaitSpec = field(default_factory=WaitSpec)
    #: A local user's session (``spec.owner_node``): the id of the same user's previous session, which
    #: must have ended before this one starts (the decision core holds it back until then: one user works
    #: one session at a time); None: it starts as it arrives.
    after: str | None = None

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def kind(self) -> type[ProgramKind]:
        return kinds.get(self.app.kind)

    @property
    def processes(self) -> int:
        """Its processes: one per allocated node, and the head (rank ``size``) if its kind has one (the
        most, for a moldable job: :meth:`processes_on` counts those of one start)."""
        return self.processes_on(self.spec.size)

    def processes_on(self, nodes: int) -> int:
        """Its processes when it runs on ``nodes`` allocated nodes: one each, and the head if it has one."""
        return nodes + (1 if self.kind.head else 0)

    def launch(self, rank: int, nics: list[str]) -> Launch:
        """Rank ``rank``'s command and the job's environment for it (the node adds its own): the kind's
        launch, plus where the job's ranks are (``nics``: one NIC per rank, the head's last, so their
        number is the job's processes in this start), how they wait (read once, by tbcomm) and the
        memory each keeps resident."""
        base = self.kind.launch(self.app, rank, len(nics))
        w = self.wait
        job = JobEnv(self.job_id, rank, tuple(nics), w.mode, w.spin_us, w.send_wait, self.spec.memory_mb)
        return Launch(base.argv, {**base.env, **job.to_env()})


def largest_message(jobs: list[Job]) -> int | None:
    """The largest message any of ``jobs`` sends between its processes (ProgramKind.largest_message), or
    None when one of them does not say."""
    sizes = [j.kind.largest_message(j.app, j.spec.size) for j in jobs]
    return None if None in sizes else max(sizes, default=0)
