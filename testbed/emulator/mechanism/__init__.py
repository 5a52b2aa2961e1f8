"""Mechanism layer of a node agent: envelopes, worker processes, priority, accounting (docs/architecture.md,
"The emulated node", "One clock")."""

from testbed.emulator.mechanism.envelope import (
    CgroupV1Envelope,
    CgroupV2Envelope,
    Envelope,
    EnvelopeUnavailable,
    NoEnvelope,
    probe_envelopes,
)
from testbed.emulator.mechanism.envelopes import make_envelope
from testbed.emulator.mechanism.priority import raise_thread_priority
from testbed.emulator.mechanism.process import SpawnError, Worker, cont_all, spawn, stop_all

__all__ = [
    "CgroupV1Envelope",
    "CgroupV2Envelope",
    "Envelope",
    "EnvelopeUnavailable",
    "NoEnvelope",
    "SpawnError",
    "Worker",
    "cont_all",
    "make_envelope",
    "probe_envelopes",
    "raise_thread_priority",
    "spawn",
    "stop_all",
]
