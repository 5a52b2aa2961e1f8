"""NAS-like job profiles (paper 003 §5, table 2): named per-iteration shapes of the synthetic app.

These are shapes *inspired by* the NAS Parallel Benchmarks' communication intensity, not the NAS kernels:
each profile is an ordinary synthetic program (apps/synthetic.py: compute, then rounds of a point-to-point
pattern or a barrier) whose messages per unit of compute follow paper 003's table 2 ranking: EP very
low, BT and LU low, MG and SP medium, CG and IS high. At 4 processes, messages sent per process per
emulated second of compute are about 3 (EP), 10 (BT, LU), 100 (MG, SP), 300 (IS) and 800 (CG); the
patterns echo the kernels loosely (EP: one collective; BT, SP, MG, CG: neighbour exchanges; LU: a
pipelined ring; IS: all-to-all key exchange).

Scale-down, stated:

* time: a profile's default iteration count gives an ideal (compute-only, dedicated) run time of
  ``TIME_SCALE`` x the class-A execution time of table 2 (so 1/4 of it; the generator instead sets the
  iteration count from the drawn duration);
* memory: per process, table 3's class-C figure for that benchmark and process count (where the table
  has none, the job's total divided by the process count; CG, LU and EP are not in table 3, their totals
  are guesses of the same order), times ``MEMORY_SCALE`` = 1/16, so a 16-node cluster with MPL 3 fits on
  one host; scale the scenario's ``cluster.memory_mb`` by the same factor;
* sizes: the paper's process counts, 4, 8 or 16 (BT and SP need squares: 4, 9 or 16).

Use in a scenario: ``app: {profile: CG}`` in a job entry or a generator class; the profile fills the app
fields it defines (gcomp, gio, pattern, msg_bytes, msgs, iterations) and any field given explicitly
overrides it. The job's memory (``memory_mb`` of the entry or class) defaults to the profile's for its
size, and a generator class with a profile draws sizes from the profile's sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.apps.work import WORK_UNIT_S
from testbed.schedulers.inputs import excerpt

#: Profile run time (compute only, dedicated) as a fraction of table 2's class-A execution time.
TIME_SCALE = 0.25
#: Profile memory per process as a fraction of the paper's (table 3, class C).
MEMORY_SCALE = 1.0 / 16.0

#: Paper 003 table 3: maximum memory per process (MB), class C, by (benchmark, processes).
TABLE3_MB: dict[tuple[str, int], float] = {
    ("SP", 4): 354, ("SP", 9): 176, ("SP", 16): 111,
    ("BT", 9): 473, ("BT", 16): 272,
    ("MG", 8): 456, ("MG", 16): 228,
    ("IS", 4): 428, ("IS", 8): 214, ("IS", 16): 107,
}  # fmt: skip


@dataclass(frozen=True)
class Profile:
    name: str
    intensity: str  # paper 003 table 2: "very low" | "low" | "medium" | "high"
    gcomp: float  # work units (ms of CPU at rate 1) per iteration
    pattern: str
    msg_bytes: int
    msgs: int
    sizes: tuple[int, ...]
    class_a_s: float  # table 2, class A execution time (s)
    total_mb: float  # whole job's memory, class C (MB), where table 3 has no entry for the size

    def iterations(self) -> int:
        return max(1, round(self.class_a_s * TIME_SCALE / (self.gcomp * WORK_UNIT_S)))

    def app_fields(self) -> dict:
        """The synthetic config fields this profile defines."""
        return {
            "iterations": self.iterations(),
            "gcomp": self.gcomp,
            "gio": 0,
            "pattern": self.pattern,
            "msg_bytes": self.msg_bytes,
            "msgs": self.msgs,
        }

    def memory_mb(self, size: int) -> float:
        """Memory per process (MB, scaled down) for a job of ``size`` processes."""
        mb = TABLE3_MB.get((self.name, size), self.total_mb / max(1, size))
        return round(mb * MEMORY_SCALE, 3)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile("EP", "very low", 500.0, "barrier", 0, 1, (4, 8, 16), 7.9, 64.0),
        Profile("BT", "low", 200.0, "neighbour", 16384, 1, (4, 9, 16), 53.1, 4300.0),
        Profile("LU", "low", 200.0, "ring", 4096, 2, (4, 8, 16), 32.2, 1200.0),
        Profile("MG", "medium", 40.0, "neighbour", 8192, 2, (4, 8, 16), 2.4, 3648.0),
        Profile("SP", "medium", 20.0, "neighbour", 32768, 1, (4, 9, 16), 34.5, 1600.0),
        Profile("CG", "high", 10.0, "neighbour", 8192, 4, (4, 8, 16), 1.3, 1200.0),
        Profile("IS", "high", 10.0, "alltoall", 16384, 1, (4, 8, 16), 1.0, 1712.0),
    )
}


def get(name: str) -> Profile:
    """The profile called ``name`` (case-insensitive); ValueError naming the known ones otherwise."""
    p = PROFILES.get(str(name).upper())
    if p is None:
        raise ValueError(f"unknown profile {excerpt(name)}; known profiles: {', '.join(PROFILES)}")
    return p
