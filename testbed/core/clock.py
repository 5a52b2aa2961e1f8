"""One clock: emulated time, time-dilated from the host's CLOCK_MONOTONIC (docs/architecture.md, "One clock").

real seconds = emulated seconds x TDF. Every process on one host reads the same CLOCK_MONOTONIC, so a
clock built from the same ``t0`` agrees across the driver, the actors and the workers. Another host's
CLOCK_MONOTONIC has another origin (its boot): a reading crosses hosts through the wall clock
(:func:`origin`, :func:`localize`), which NTP keeps within a millisecond or so between machines.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from testbed.apps.environ import RunClock


def host_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


#: Host cores kept for the control plane (agents, coordinator, Ray) when the TDF is automatic. With all
#: cores handed to the nodes' quotas, the control plane's ~0.25 core (measured on 2 cores, 16 nodes) is
#: taken from the nodes and they run up to 18 % below their configured rate.
CONTROL_RESERVE_CORES = 0.3
#: The same under a scheduler whose node policy hears every message (LocalPolicy.wants_message_events:
#: DCS, SB, PB, CC, HYBRID): each mirrored MPI message then passes two NICs and is a local event for the
#: policy. On paper003-compare's real subset (8 nodes, 2 cores) the control plane used 0.55-0.92 core
#: under those schemes; with 0.3 kept, 70-94 % of the nodes' rate windows fell over 5 % below their rate,
#: with 0.9, 0-10 %, and the schemes' mean response came 4-23 % nearer the simulator's (docs/measurements.md,
#: "The control plane's reserve under the message-driven schemes").
CONTROL_RESERVE_MESSAGES_CORES = 0.9


def auto_tdf(emulated_cpus: float, cores: int | None = None, reserve: float = CONTROL_RESERVE_CORES) -> float:
    """Emulated CPUs / (host cores - reserve), at least 1: each node's real quota is its rate / TDF."""
    cores = cores or host_cores()
    usable = max(cores - reserve, 0.5 * cores)
    return max(1.0, emulated_cpus / usable)


def origin() -> tuple[str, float]:
    """This host's CLOCK_MONOTONIC, as another process can place it: (the kernel's boot id, wall clock
    minus CLOCK_MONOTONIC now). Containers on one kernel share its boot id and its CLOCK_MONOTONIC."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:  # not Linux: no way to tell hosts apart, so every reading goes through the wall clock
        boot = ""
    return boot, time.time() - time.monotonic()


def localize(t_mono: float, where: tuple[str, float]) -> float:
    """A CLOCK_MONOTONIC reading taken on the host ``where`` (its :func:`origin`), on this host's
    CLOCK_MONOTONIC: unchanged on the same kernel, else carried over through the two wall clocks."""
    boot, offset = origin()
    if boot and boot == where[0]:
        return t_mono
    return t_mono + where[1] - offset


@dataclass(frozen=True)
class Clock(RunClock):
    """The run's clock: ``tdf`` and ``t0`` (CLOCK_MONOTONIC reading, real seconds, of emulated time 0).
    :class:`~testbed.apps.environ.RunClock` holds what a worker needs too (``now``, ``real_at``, and the
    clock's part of a worker's environment); this adds what the driver and the agents need."""

    @classmethod
    def starting_now(cls, tdf: float, delay_real: float = 0.0) -> Clock:
        return cls(tdf=tdf, t0=time.monotonic() + delay_real)

    def emu_at(self, t_real: float) -> float:
        return (t_real - self.t0) / self.tdf

    def real(self, d_emu: float) -> float:
        """Real duration of an emulated duration."""
        return d_emu * self.tdf
