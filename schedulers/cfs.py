"""The Linux CFS scheduler's load weights: the OS's own rule for how runnable processes share a CPU, which
the simulator models (testbed/sim/engine.py) and a local policy that sets shares through nice values
computes with (schedulers/ccs.py)."""

from __future__ import annotations

import math

NICE_MIN, NICE_MAX = -20, 19

#: Linux CFS load weight by nice value (kernel/sched/core.c, sched_prio_to_weight), nice -20 first.
CFS_WEIGHTS = (
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916,
    9548, 7620, 6100, 4904, 3906, 3121, 2501, 1991, 1586, 1277,
    1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
    110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
)  # fmt: skip


def cfs_weight(nice: int) -> int:
    return CFS_WEIGHTS[min(NICE_MAX, max(NICE_MIN, nice)) - NICE_MIN]


def nearest_nice(weight: float) -> int:
    """The nice value whose CFS weight is nearest ``weight`` (in ratio: shares are ratios of weights)."""
    return min(range(NICE_MIN, NICE_MAX + 1), key=lambda n: abs(math.log(cfs_weight(n) / weight)))
