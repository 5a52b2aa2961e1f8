"""The ``nas`` program kind: one of this package's NAS kernels by name and class, ``app: {kind: nas,
kernel: cg, class: A}`` (docs/architecture.md, "MPI programs").

On real processes it is the ``mpi`` kind running the kernel's file with the class as its argument
(apps/mpi.py): one rank per allocated node, each under its node's control, the kernel's own verification
deciding whether the job completes.

In the simulator it replays the kernel's measured model: the trace of the kernel run on real processes
(apps/mpi_trace.py's format: each rank's CPU between MPI calls, and the calls), recorded by
``benchmarks/mpi_profiles.py`` per kernel, class and rank count and kept in ``apps/nas/models/`` with the
SHA-256 of the kernel file it was recorded from and the recorder's version. A model of another version of
the kernel or of the recorder, or of a rank count not recorded, is not used: the kernel is then recorded
on first use, as a user's program is (and the run says so on stderr).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field
from testbed.apps.base import JobPlan, Shape
from testbed.apps.mpi import ModelConfig, Mpi
from testbed.apps.mpi_trace import RECORDER_VERSION, compute_s
from testbed.apps.speed import stamp_of

HERE = Path(__file__).parent
#: Kernel name (as scenarios and NPB name it) -> its file here.
KERNELS: dict[str, str] = {"ep": "ep.py", "is": "is_.py", "cg": "cg.py", "mg": "mg.py", "ft": "ft.py"}
#: The kernels NPB runs on a power-of-two number of processes only (EP runs on any).
POWER_OF_TWO = frozenset({"is", "cg", "mg", "ft"})
#: Where the measured models are kept (benchmarks/mpi_profiles.py writes them).
MODELS = HERE / "models"

Kernel = Literal["ep", "is", "cg", "mg", "ft"]
NpbClass = Literal["S", "W", "A", "B"]


class NasConfig(ModelConfig):
    model_config = ConfigDict(populate_by_name=True)

    kind: Literal["nas"] = "nas"
    kernel: Kernel = Field(..., description="the NAS kernel: ep, is, cg, mg or ft")
    npb_class: NpbClass = Field("S", alias="class", description="NPB's problem class: S, W, A or B")
    estimate_s: float | None = Field(
        None, gt=0, description="emulated s the job takes alone; default: its measured model's CPU"
    )
    init_timeout_s: float = Field(
        120.0,
        gt=0,
        description="emulated s every rank has to reach MPI_Init once the job starts; else the job fails",
    )

    # What the mpi kind runs (apps/mpi.py reads these two of its own config).
    @property
    def program(self) -> str:
        return str(HERE / KERNELS[self.kernel])

    @property
    def args(self) -> tuple[str, ...]:
        return (self.npb_class,)


def model_path(kernel: str, npb_class: str, size: int) -> Path:
    return MODELS / f"{kernel}-{npb_class}-{size}.json.gz"


def kernel_sha256(kernel: str) -> str:
    return hashlib.sha256((HERE / KERNELS[kernel]).read_bytes()).hexdigest()


@cache
def _model(kernel: str, npb_class: str, size: int) -> dict | None:
    path = model_path(kernel, npb_class, size)
    if not path.is_file():
        return None
    doc = json.loads(gzip.decompress(path.read_bytes()))
    if doc.get("program_sha256") != kernel_sha256(kernel) or doc.get("recorder") != RECORDER_VERSION:
        return None
    return doc


def measured(kernel: str, npb_class: str, size: int) -> list[list] | None:
    """The kernel's measured trace on ``size`` ranks, or None when none was recorded from the kernel as
    it is now."""
    doc = _model(kernel, npb_class, size)
    return None if doc is None else doc["ranks"]


def measured_speed(kernel: str, npb_class: str, size: int) -> float | None:
    """The host's speed (apps/speed.py) stamped on that model, or None (no model, or not stamped)."""
    doc = _model(kernel, npb_class, size)
    return None if doc is None else stamp_of(doc)


class Nas(Mpi):
    name = "nas"
    summary = "a NAS kernel (EP, IS, CG, MG, FT; classes S, W, A, B) in mpi4py, verified against NPB's values"
    Config = NasConfig

    @classmethod
    def problems(cls, cfg: NasConfig, nodes: int, cpu_rate: float) -> list[tuple[str, str]]:
        return []  # the kernels are this package's files

    @classmethod
    def size_problem(cls, cfg: NasConfig, size: int) -> str | None:
        if cfg.kernel in POWER_OF_TWO and size & (size - 1):
            name = cfg.kernel.upper()
            return f"NAS {name} runs on a power of two of processes (NPB's rule); use 1, 2, 4, 8, 16..."
        return None

    @classmethod
    def size_choices(cls, cfg: NasConfig, lo: int, hi: int) -> list[int]:
        """Powers of two, for every kernel: NPB's own rule for four of them, and the rank counts the
        models are measured at (EP runs at any size a job gives it)."""
        return [1 << k for k in range(hi.bit_length()) if lo <= 1 << k <= hi]

    @classmethod
    def default_class(cls, cfg: NasConfig) -> str:
        return f"{cfg.kernel.upper()}.{cfg.npb_class}"

    @classmethod
    def has_own_length(cls, cfg: NasConfig) -> bool:
        return True

    @classmethod
    def with_own_length(cls, cfg: NasConfig, scale: float) -> NasConfig:
        if scale != 1:
            raise NotImplementedError(
                "a NAS kernel's length is its class's (NPB's fixed problem): use duration.scale 1, or "
                "choose the class"
            )
        return cfg

    @classmethod
    def largest_message(cls, cfg: NasConfig, size: int) -> int | None:
        """The largest send of the kernel's measured model on ``size`` ranks, or None without one: a loose
        bound on what its ranks send the NICs, since the mirror declares each message's size instead of
        carrying its bytes (apps/wire.py SIZE: 8-16 bytes a frame)."""
        ranks = measured(cfg.kernel, cfg.npb_class, size)
        if ranks is None:
            return None
        return max((op[2] for ops in ranks for op in ops if op[0] == "s"), default=0)

    @classmethod
    def ideal_runtime(cls, cfg: NasConfig, cpu_rate: float = 1.0, size: int = 1) -> float:
        """The estimate given, else the measured model's busiest rank's CPU on ``size`` ranks (its
        messages' time left out), else the mpi kind's default."""
        if cfg.estimate_s is not None:
            return cfg.estimate_s
        ranks = measured(cfg.kernel, cfg.npb_class, size)
        if ranks is None:
            return 60.0
        return max(map(compute_s, ranks)) / cpu_rate

    @classmethod
    def plan(
        cls, cfg: NasConfig, submit_time: float, cpu_rate: float = 1.0, shape: Shape = Shape()
    ) -> JobPlan:
        plan = super().plan(cfg, submit_time, cpu_rate, shape)
        if shape.size is None:
            return plan
        return dataclasses.replace(plan, estimate=cls.ideal_runtime(cfg, cpu_rate, shape.size))

    @classmethod
    def trace(cls, cfg: NasConfig, size: int) -> list[list]:
        ranks = measured(cfg.kernel, cfg.npb_class, size)
        return ranks if ranks is not None else super().trace(cfg, size)

    @classmethod
    def trace_speed(cls, cfg: NasConfig, size: int) -> float | None:
        doc = _model(cfg.kernel, cfg.npb_class, size)
        return stamp_of(doc) if doc is not None else super().trace_speed(cfg, size)


__all__ = ["KERNELS", "Nas", "NasConfig", "measured", "measured_speed", "model_path"]
