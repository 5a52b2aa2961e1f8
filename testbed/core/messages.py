"""What a node agent reports to the coordinator (through ``notify``: a Ray call, or a direct call in
tests). Frozen dataclasses: the coordinator tells them apart by type."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProcExit:
    """A worker process ended: ``code`` 0 is success; negative, killed by that signal."""

    job: str
    rank: int
    node: int
    code: int
    cpu_s: float
    reason: str | None
    attempt: int = 1  # which start of the job the process belonged to


@dataclass(frozen=True)
class QuantumUsage:
    """Per-process CPU share of the quantum that just ended on ``node``, for policies that want it:
    ``samples`` = ((job, rank, utilisation 0..1, interval emulated s), ...)."""

    node: int
    samples: tuple[tuple[str, int, float, float], ...]


@dataclass(frozen=True)
class SlotSwitches:
    """When the node's slot switches took effect: ((slot, effect emulated s), ...), for the skew metric."""

    node: int
    switches: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class NodeError:
    """The node's local policy or the agent itself raised: the run cannot go on as planned (the
    coordinator ends it, with this error)."""

    node: int
    error: str
    traceback: str | None = None
