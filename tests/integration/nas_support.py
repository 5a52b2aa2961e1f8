"""What the NAS kernels' tests share: running a kernel under plain ``mpiexec``, and checking that it
verified (rank 0's one report line, for the class and rank count asked for)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from ..conftest import requires

#: The kernels' files.
NAS = Path(__file__).resolve().parents[2] / "apps" / "nas"

needs_mpiexec = requires(shutil.which("mpiexec") is not None, "no mpiexec on PATH (MPICH)")


def mpiexec(ranks: int, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["mpiexec", "-n", str(ranks), sys.executable, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def verifies(kernel: str, cls: str, ranks: int, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs ``kernel`` (its NAS name: "CG") of class ``cls`` on ``ranks`` ranks and checks it verified;
    returns the run for further checks."""
    p = mpiexec(ranks, str(NAS / f"{kernel.lower()}.py"), cls, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    report = re.compile(
        rf"NAS {kernel} class (\w): (\d+) ranks, ([0-9.]+) s, ([0-9.]+) Mop/s total, verification SUCCESSFUL"
    )
    reports = report.findall(p.stdout)
    # Rank 0 alone reports, once, for the class and rank count asked for.
    assert len(reports) == 1, p.stdout + p.stderr
    got_cls, got_ranks, seconds, mops = reports[0]
    assert (got_cls, int(got_ranks)) == (cls, ranks)
    assert float(seconds) > 0 and float(mops) > 0
    return p
