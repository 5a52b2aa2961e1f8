"""Paper 000's real-time job: a pipelined vision program (docs/policies.md, "Real-time and best-effort
classes"), as a program kind.

A job of s processes is a pipeline of s stages, stage i on rank i. Rank 0 renders frame k of a
deterministic generated video (moving shapes plus noise, ``width`` x ``height``, from ``seed``) at its
release time ``t0 + k * d`` (a camera), then every stage applies its operation (``stages[i]``: real
OpenCV work on the real pixels) and passes the frame on through tbcomm as real bytes. Each stage's work
per frame is scaled to phi = ``work_units[i]``: the operation runs, then the stage burns its own thread's
CPU up to phi ms in all (a work unit is one ms of CPU at rate 1.0), so phi holds on any host and the
image work is real. The last stage checks each frame against its deadline: the display holds a buffer of b
frames, so frame k is due ``b * d`` after its release (``Omega = b * d``: a stream that keeps its rate
1/d with less jitter than the buffer absorbs meets every deadline; a period that delivers n < b frames
misses b - n). It reports ``frames``, ``deadlines_met`` / ``deadlines_missed`` (running totals) and each
frame's end-to-end latency (release to leaving the last stage) as a ``frame_latency_s`` sample.

Why OpenCV (opencv-python-headless): one self-contained abi3 wheel with no further dependency but numpy,
its operations release the GIL and cost well under a millisecond at the default 160 x 120, so they fit
inside any phi worth scheduling; scikit-image would pull scipy, networkx, imageio and lazy_loader in.
Import cost is paid once per worker before GO (start-up, not the job's work). OpenCV is told to use one
thread: a node is one CPU, and work on other threads would escape the stage's CPU clock.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator
from typing import Annotated, Literal, Union

from pydantic import Discriminator, Field, Tag, field_validator, model_validator
from testbed.apps.base import (
    WORK_UNIT_S,
    Compute,
    MessagingConfig,
    Op,
    ProgramKind,
    Progress,
    RealTimeFacts,
    Recv,
    Reports,
    Send,
    SimContext,
    Sleep,
)
from testbed.apps.reports import DEADLINES_MET, DEADLINES_MISSED, FRAME_LATENCY

#: A stage's operation on the frame (the rendering at rank 0 comes first in any case).
OPERATIONS = ("decode", "denoise", "blur", "morph", "threshold", "edges", "label", "sink")
Operation = Literal["decode", "denoise", "blur", "morph", "threshold", "edges", "label", "sink"]

#: Frame header: index, release time (emulated s).
_HEADER = struct.Struct("<Id")
_TAG = 0


def _shape(v) -> str:
    return "list[float]" if isinstance(v, list | tuple) else "float"


#: phi: one number for every stage, or a list of one per stage, told apart by the value's shape: so a bad
#: element of a list is one error (a plain union also said the whole list was not a number: two lines).
WorkUnits = Annotated[
    Union[Annotated[float, Tag("float")], Annotated[list[float], Tag("list[float]")]],  # noqa: UP007
    Discriminator(_shape),
]


class VisionConfig(MessagingConfig):
    kind: Literal["vision"] = "vision"
    stages: list[Operation] = Field(
        default_factory=lambda: ["decode", "denoise", "edges"],
        min_length=1,
        description=f"one operation per pipeline stage (process), from: {', '.join(OPERATIONS)}",
    )
    work_units: WorkUnits = Field(
        10.0, description="phi: work units (ms of CPU at rate 1.0) per frame, one for all stages or one each"
    )
    period_ms: float = Field(1000.0 / 30, gt=0, description="d: one frame every period_ms emulated ms")
    buffer: int = Field(10, description="b: frames the display buffers (frame k is due b*d after release)")
    frames: int = Field(
        90, ge=1, le=1_000_000, description="frames the job processes (its length is about frames * d)"
    )
    width: int = Field(160, ge=16, le=4096, description="frame width in pixels")
    height: int = Field(120, ge=16, le=4096, description="frame height in pixels")
    max_wait_s: float | None = Field(
        None, gt=0, description="w: a job still waiting in the queue after this long is turned away"
    )
    # numpy's generators take 0..2^63-1 here as the workload's seed (-1 failed every real run's stages).
    seed: int = Field(0, ge=0, le=2**63 - 1, description="seed of the generated video")

    @field_validator("buffer")
    @classmethod
    def _buffer_positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError(
                f"b = {v}: the display must buffer at least 1 frame (frame k is due b*d after its release); "
                "set buffer >= 1"
            )
        return v

    @model_validator(mode="after")
    def _phi_per_stage(self):
        if isinstance(self.work_units, list):
            if len(self.work_units) != len(self.stages):
                raise ValueError(
                    f"work_units: {len(self.work_units)} values for {len(self.stages)} stages; give one per "
                    "stage or a single number for all"
                )
            bad = [i for i, w in enumerate(self.work_units) if not w > 0]
        else:
            bad = [] if self.work_units > 0 else [0]
        if bad:
            raise ValueError(f"work_units: must be > 0 (a stage does real work), got {self.work_units}")
        return self

    def phi_units(self) -> tuple[float, ...]:
        """Work units per frame of each stage."""
        if isinstance(self.work_units, list):
            return tuple(float(w) for w in self.work_units)
        return (float(self.work_units),) * len(self.stages)

    @property
    def period_s(self) -> float:
        return self.period_ms / 1000.0


# --------------------------------------------------------------------------------------------------------
# The image work (worker side; OpenCV is imported only here)


def render(k: int, width: int, height: int, seed: int):
    """Frame k of the generated video: three shapes moving on fixed, seed-dependent paths, plus noise."""
    import cv2
    import numpy as np

    img = np.zeros((height, width), np.uint8)
    rng = np.random.default_rng((seed, 0))
    starts = rng.uniform(0, 1, (3, 2))
    speeds = rng.uniform(0.002, 0.01, (3, 2))
    r = max(2, min(width, height) // 10)
    for i, ((sx, sy), (vx, vy)) in enumerate(zip(starts, speeds, strict=True)):
        x = int(((sx + vx * k) % 1.0) * (width - 1))
        y = int(((sy + vy * k) % 1.0) * (height - 1))
        if i == 1:
            cv2.rectangle(img, (x - r, y - r), (x + r, y + r), 200, -1)
        else:
            cv2.circle(img, (x, y), r, 160 + 40 * i, -1)
    noise = np.random.default_rng((seed, k + 1)).integers(0, 48, img.shape, dtype=np.uint8)
    return cv2.add(img, noise)


def apply(op: str, img):
    """Stage operation ``op`` on a grey frame; returns a grey frame of the same shape."""
    import cv2
    import numpy as np

    if op == "decode":
        ok, buf = cv2.imencode(".png", img)
        return cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE)
    if op == "denoise":
        return cv2.medianBlur(img, 5)
    if op == "blur":
        return cv2.GaussianBlur(img, (5, 5), 0)
    if op == "morph":
        return cv2.morphologyEx(img, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    if op == "threshold":
        return cv2.threshold(img, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)[1]
    if op == "edges":
        return cv2.Canny(img, 50, 150)
    if op == "label":
        mask = cv2.threshold(img, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)[1]
        n, labels, stats, _ = cv2.connectedComponentsWithStats(mask)
        keep = np.zeros(n, np.uint8)
        keep[1:] = np.where(stats[1:, cv2.CC_STAT_AREA] >= 20, 255, 0)
        return keep[labels]
    if op == "sink":
        return img
    raise ValueError(f"unknown stage operation {op!r}; use one of {', '.join(OPERATIONS)}")


class Vision(ProgramKind):
    name = "vision"
    summary = (
        "paper 000's real-time pipeline: real OpenCV stages on generated video, frames due b*d after release"
    )
    Config = VisionConfig
    reports = Reports(units=("frames", DEADLINES_MET, DEADLINES_MISSED, FRAME_LATENCY))

    # -- scenario -> job -------------------------------------------------------------------------------

    @classmethod
    def fixed_size(cls, cfg: VisionConfig) -> int:
        return len(cfg.stages)

    @classmethod
    def largest_message(cls, cfg: VisionConfig, size: int) -> int | None:
        return _HEADER.size + cfg.width * cfg.height  # a grey frame, one byte a pixel (apply keeps it)

    @classmethod
    def ideal_runtime(cls, cfg: VisionConfig, cpu_rate: float = 1.0) -> float:
        """The last frame's release plus one pass through the pipeline (latency ignored)."""
        return (cfg.frames - 1) * cfg.period_s + sum(cfg.phi_units()) * WORK_UNIT_S / cpu_rate

    @classmethod
    def with_duration(cls, cfg: VisionConfig, duration_s: float, cpu_rate: float = 1.0) -> VisionConfig:
        return cfg.model_copy(update={"frames": max(1, round(duration_s / cfg.period_s))})

    @classmethod
    def realtime(cls, cfg: VisionConfig, cpu_rate: float = 1.0) -> RealTimeFacts:
        work = tuple(u * WORK_UNIT_S / cpu_rate for u in cfg.phi_units())
        return RealTimeFacts(cfg.period_s, cfg.buffer, work, cfg.max_wait_s)

    @classmethod
    def problems(cls, cfg: VisionConfig, nodes: int, cpu_rate: float) -> list[tuple[str, str]]:
        out = []
        if len(cfg.stages) > nodes:
            out.append(
                (
                    "stages",
                    f"{len(cfg.stages)} stages, one process each, but the cluster has {nodes} nodes; "
                    "use fewer stages or add nodes",
                )
            )
        d = cfg.period_s
        for i, u in enumerate(cfg.phi_units()):
            phi = u * WORK_UNIT_S / cpu_rate
            if phi > d:
                where = f"work_units.{i}" if isinstance(cfg.work_units, list) else "work_units"
                out.append(
                    (
                        where,
                        f"stage {i} needs {phi * 1000:g} ms of CPU per frame on a node of rate {cpu_rate:g} "
                        f"but a frame comes every period_ms = {cfg.period_ms:g} ms: no node can keep up "
                        "(infeasible); lower work_units or raise period_ms",
                    )
                )
                break
        return out

    @classmethod
    def default_class(cls, cfg: VisionConfig) -> str:
        return "rt"

    # -- real processes --------------------------------------------------------------------------------

    @classmethod
    def run(cls, cfg: VisionConfig, ctx) -> None:
        import cv2
        import numpy as np
        from testbed.apps.work import work
        from testbed.apps.worker import WorkerError

        cv2.setNumThreads(1)
        rank, size = ctx.rank, ctx.size
        if size != len(cfg.stages):
            raise WorkerError(f"{size} processes for a pipeline of {len(cfg.stages)} stages")
        op = cfg.stages[rank]
        phi_s = cfg.phi_units()[rank] * WORK_UNIT_S
        shape = (cfg.height, cfg.width)
        # Warm the operation up and check it fits in phi, before GO: a stage whose own image work exceeds
        # its phi cannot be scaled to it, and says so rather than run slower than the scenario claims.
        img = render(0, cfg.width, cfg.height, cfg.seed)
        apply(op, img)
        c0 = time.thread_time()
        if rank == 0:
            img = render(1, cfg.width, cfg.height, cfg.seed)
        apply(op, img)
        cost = time.thread_time() - c0
        if cost > phi_s:
            raise WorkerError(
                f"stage {rank} ({op}) costs {cost * 1000:.2f} ms of CPU per {cfg.width}x{cfg.height} frame "
                f"here, more than its work_units ({phi_s * 1000:g} ms): raise work_units or lower "
                "width/height"
            )
        now, tdf = ctx.clock.now, ctx.clock.tdf
        comm = ctx.connect()
        d, due_after = cfg.period_s, cfg.buffer * cfg.period_s
        start = now()
        met = missed = 0
        for k in range(cfg.frames):
            if rank == 0:
                release = start + k * d
                wait = (release - now()) * tdf
                if wait > 0:
                    time.sleep(wait)
                c0 = time.thread_time()
                img = render(k, cfg.width, cfg.height, cfg.seed)
            else:
                msg = comm.recv(rank - 1, _TAG)
                c0 = time.thread_time()
                idx, release = _HEADER.unpack_from(msg)
                if idx != k:
                    raise WorkerError(f"stage {rank} got frame {idx}, expected {k}")
                img = np.frombuffer(msg, np.uint8, offset=_HEADER.size).reshape(shape)
            out = apply(op, img)
            work((phi_s - (time.thread_time() - c0)) / WORK_UNIT_S)  # the top-up to phi
            if rank < size - 1:
                comm.send(rank + 1, _HEADER.pack(k, release) + out.tobytes(), _TAG)
                continue
            done = now()
            if done <= release + due_after:
                met += 1
                ctx.progress(DEADLINES_MET, met)
            else:
                missed += 1
                ctx.progress(DEADLINES_MISSED, missed)
            ctx.progress(FRAME_LATENCY, done - release)
            ctx.progress("frames", k + 1)

    # -- simulator -------------------------------------------------------------------------------------

    @classmethod
    def model(cls, cfg: VisionConfig, ctx: SimContext) -> Iterator[Op]:
        rank, size = ctx.rank, ctx.size
        phi = cfg.phi_units()[rank] * WORK_UNIT_S
        nbytes = _HEADER.size + cfg.width * cfg.height
        d, due_after = cfg.period_s, cfg.buffer * cfg.period_s
        # Every rank starts at the job's launch, so each one's first clock reading is the job's t0: the
        # last stage knows frame k's release without a header.
        start = ctx.now()
        met = missed = 0
        for k in range(cfg.frames):
            release = start + k * d
            if rank == 0:
                wait = release - ctx.now()
                if wait > 1e-12:
                    yield Sleep(wait)
            else:
                yield Recv(1, _TAG)
            yield Compute(phi)
            if rank < size - 1:
                yield Send((rank + 1,), nbytes, _TAG)
                continue
            done = ctx.now()
            if done <= release + due_after + 1e-9:
                met += 1
                yield Progress(DEADLINES_MET, met)
            else:
                missed += 1
                yield Progress(DEADLINES_MISSED, missed)
            yield Progress(FRAME_LATENCY, done - release)
            yield Progress("frames", k + 1)


__all__ = ["OPERATIONS", "Vision", "VisionConfig", "apply", "render"]
