"""The envelope factory: which class makes a node's envelope of each kind (docs/architecture.md, "The
emulated node"). Here, apart from the base module, because it imports every envelope: the kinds' classes
know their base (testbed/emulator/mechanism/envelope.py), the base knows none of them."""

from __future__ import annotations

import logging

from testbed.core.kinds import ENVELOPE_KINDS
from testbed.emulator.mechanism.docker_envelope import DockerEnvelope
from testbed.emulator.mechanism.envelope import (
    CFS_PERIOD_US,
    CgroupV1Envelope,
    CgroupV2Envelope,
    Envelope,
    EnvelopeUnavailable,
    NoEnvelope,
    PodEnvelope,
    probe_v1,
    probe_v2,
)

log = logging.getLogger(__name__)

#: The kinds made as named: kind -> class. ``auto`` and ``cgroup`` pick one of the cgroup classes by what
#: the host offers (:func:`make_envelope`).
CLASSES: dict[str, type[Envelope]] = {
    "cgroup-v1": CgroupV1Envelope,
    "cgroup-v2": CgroupV2Envelope,
    "docker": DockerEnvelope,
    "pod": PodEnvelope,
    "none": NoEnvelope,
}
assert set(CLASSES) | {"auto", "cgroup"} == set(ENVELOPE_KINDS), "an envelope kind without a class"


def make_envelope(
    kind: str,
    run_id: str,
    node: int,
    cpu_rate: float,
    tdf: float,
    cores: int = 1,
    period_us: int = CFS_PERIOD_US,
    memory_mb: float | None = None,
) -> Envelope:
    """Build (not create) the envelope of one node. ``auto`` falls back to ``none`` with a loud note.
    ``memory_mb`` limits the node's memory where the envelope can (docker); the others ignore it."""
    if kind not in ENVELOPE_KINDS:
        raise ValueError(f"unknown envelope kind {kind!r}; known kinds: {', '.join(ENVELOPE_KINDS)}")
    args = (run_id, node, cpu_rate, tdf, cores, period_us)
    if kind in ("auto", "cgroup"):
        return _cgroup(kind, args)
    if kind == "cgroup-v1":
        why = probe_v1()
        if why is not None:
            raise EnvelopeUnavailable(
                f"cgroup-v1 envelope unavailable: {why}. Fix that, or use envelope: none "
                "(CPU rate then NOT fixed)"
            )
    extra = {"memory_mb": memory_mb} if kind == "docker" else {}
    return CLASSES[kind](*args, **extra)


def _cgroup(kind: str, args: tuple) -> Envelope:
    """``cgroup``: v1 if the host offers it, else v2, else unavailable; ``auto``: the same, else none."""
    why1 = probe_v1()
    if why1 is None:
        return CgroupV1Envelope(*args)
    why2 = probe_v2()
    if why2 is None:
        return CgroupV2Envelope(*args)
    reason = f"cgroup-v1: {why1}; cgroup-v2: {why2}"
    if kind == "cgroup":
        raise EnvelopeUnavailable(
            f"cgroup envelope unavailable ({reason}). Run as root with the cpu and cpuacct "
            "controllers mounted read-write (v1) or the cpu controller enabled in "
            "cgroup v2, or use envelope: none (CPU rate then NOT fixed)"
        )
    env = NoEnvelope(*args)
    env.note = f"cgroup envelope unavailable: {reason}; CPU rate is NOT fixed (envelope none)"
    log.warning("node %d: %s", args[1], env.note)
    return env
