"""Jobs as the runtime knows them: what the policies see (:class:`JobSpec`) plus the program each
process runs (:class:`SyntheticApp`). Shared by the emulator and the simulator so both run the same work."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from testbed.schedulers.base import JobSpec

#: One calibrated work unit is this much CPU time on a node of CPU rate 1.0 (emulated seconds).
WORK_UNIT_S = 0.001

WAIT_MODES = ("spin", "block", "spin-block")


@dataclass(frozen=True)
class SyntheticApp:
    """Paper 002, fig. 6: ``iterations`` x { compute ``gcomp`` work units; ``gio`` writes of ``io_bytes``
    bytes to a real file, each taking at least ``io_time_ms`` emulated ms; barrier }."""

    iterations: int
    gcomp: float = 0.0
    gio: int = 0
    io_bytes: int = 8193
    io_time_ms: float = 1.0
    barrier: bool = True
    wait_mode: str = "block"
    spin_time_us: float = 300.0

    def compute_s(self, cpu_rate: float = 1.0) -> float:
        """Emulated seconds of CPU one iteration needs on a node of rate ``cpu_rate``."""
        return self.gcomp * WORK_UNIT_S / cpu_rate

    def io_s(self) -> float:
        return self.gio * self.io_time_ms / 1000.0

    def ideal_runtime(self, cpu_rate: float = 1.0) -> float:
        """Runtime alone on dedicated nodes, ignoring barrier latency (emulated s)."""
        return self.iterations * (self.compute_s(cpu_rate) + self.io_s())

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Job:
    spec: JobSpec
    app: SyntheticApp

    @property
    def job_id(self) -> str:
        return self.spec.job_id
