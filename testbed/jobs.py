"""Jobs as the runtime knows them: what the policies see (:class:`JobSpec`) plus the program each
process runs (:class:`SyntheticApp`). Shared by the emulator and the simulator so both run the same work."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from testbed.apps.synthetic import PATTERNS, pattern_plan
from testbed.schedulers.base import JobSpec

#: One calibrated work unit is this much CPU time on a node of CPU rate 1.0 (emulated seconds).
WORK_UNIT_S = 0.001

WAIT_MODES = ("spin", "block", "spin-block")
#: How a send waits for the receiving NIC's acknowledgement: "none" does not wait (no acknowledgement).
SEND_WAITS = ("none", *WAIT_MODES)

__all__ = ["PATTERNS", "WAIT_MODES", "WORK_UNIT_S", "Job", "SyntheticApp", "check_pattern", "pattern_plan"]


def check_pattern(pattern: str, msg_bytes: int, msgs: int, barrier: bool = True) -> None:
    """Raises ValueError naming the field and the fix when the communication fields do not fit together."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern: unknown pattern {pattern!r}; use one of {', '.join(PATTERNS)}")
    if msg_bytes < 0 or msgs < 0:
        raise ValueError("msg_bytes and msgs must be >= 0")
    if pattern == "barrier" and (msg_bytes != 0 or msgs != 1):
        raise ValueError(
            "pattern barrier sends one round of empty messages per iteration: leave msg_bytes at 0 and msgs "
            "at 1, or use pattern rank0 (the same shape with payloads and rounds)"
        )
    if not barrier and pattern != "barrier":
        raise ValueError(f"barrier false means no communication, but pattern is {pattern!r}; drop one")


@dataclass(frozen=True)
class SyntheticApp:
    """Paper 002, fig. 6: ``iterations`` x { compute ``gcomp`` work units; ``gio`` writes of ``io_bytes``
    bytes to a real file, each taking at least ``io_time_ms`` emulated ms; barrier }.

    Paper 000's best-effort process generalises the barrier: ``pattern`` other than ``"barrier"`` makes
    the step ``msgs`` rounds of a point-to-point exchange (:func:`pattern_plan`) with ``msg_bytes``-byte
    payloads. ``barrier=False`` drops the communication step altogether. ``memory_mb`` is what each
    process allocates and keeps resident (the job's ``JobSpec.memory_mb``; 0 = nothing extra).
    ``send_wait`` is how each send waits for the receiving NIC's acknowledgement (:data:`SEND_WAITS`;
    the scheduler's ``send_wait``, "none" but under CC), spinning ``spin_time_us`` in "spin-block"."""

    iterations: int
    gcomp: float = 0.0
    gio: int = 0
    io_bytes: int = 8193
    io_time_ms: float = 1.0
    barrier: bool = True
    wait_mode: str = "block"
    spin_time_us: float = 300.0
    pattern: str = "barrier"
    msg_bytes: int = 0
    msgs: int = 1
    memory_mb: float = 0.0
    send_wait: str = "none"

    def __post_init__(self) -> None:
        check_pattern(self.pattern, self.msg_bytes, self.msgs, self.barrier)
        if self.send_wait not in SEND_WAITS:
            raise ValueError(f"send_wait: unknown {self.send_wait!r}; use one of {', '.join(SEND_WAITS)}")
        if self.memory_mb < 0:
            raise ValueError(f"memory_mb must be >= 0, got {self.memory_mb}")

    def compute_s(self, cpu_rate: float = 1.0) -> float:
        """Emulated seconds of CPU one iteration needs on a node of rate ``cpu_rate``."""
        return self.gcomp * WORK_UNIT_S / cpu_rate

    def io_s(self) -> float:
        return self.gio * self.io_time_ms / 1000.0

    def ideal_runtime(self, cpu_rate: float = 1.0) -> float:
        """Runtime alone on dedicated nodes, ignoring barrier latency (emulated s)."""
        return self.iterations * (self.compute_s(cpu_rate) + self.io_s())

    def messages_per_iteration(self, size: int) -> float:
        """Messages one process sends per iteration, averaged over the ``size`` ranks."""
        if not self.barrier or size <= 1:
            return 0.0
        if self.pattern == "barrier":
            return 2.0 * (size - 1) / size
        sent = sum(len(pattern_plan(self.pattern, r, size)[1]) for r in range(size))
        return self.msgs * sent / size

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Job:
    spec: JobSpec
    app: SyntheticApp

    @property
    def job_id(self) -> str:
        return self.spec.job_id
