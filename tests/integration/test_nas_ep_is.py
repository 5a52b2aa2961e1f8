"""NAS EP and IS (apps/nas/ep.py, is_.py) as plain mpi4py programs under MPICH's ``mpiexec``: class S
verifies against NPB's values; a changed verification value fails the run with NotVerified naming the
kernel, class and value; IS refuses a rank count that is not a power of two. With --extended, class W
at 1, 4 and 16 ranks, and class B at 4."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import require

NAS = Path(__file__).resolve().parents[2] / "apps" / "nas"
EP = NAS / "ep.py"
IS = NAS / "is_.py"
MPIEXEC = shutil.which("mpiexec")


@pytest.fixture(autouse=True)
def _mpiexec_here():
    require(MPIEXEC is not None, "mpiexec (MPICH) is not on PATH")


def _mpiexec(ranks: int, *argv: str | Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MPIEXEC, "-n", str(ranks), sys.executable, *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _verified(out: subprocess.CompletedProcess, kernel: str, cls: str, ranks: int) -> None:
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(f"NAS {kernel} class {cls}:")]
    # One report, from rank 0, with the rank count and the verdict.
    assert len(lines) == 1, text
    assert f"{ranks} ranks" in lines[0] and lines[0].endswith("verification SUCCESSFUL"), lines[0]


@pytest.mark.parametrize("kernel, program", [("EP", EP), ("IS", IS)])
def test_class_s_verifies(kernel, program):
    _verified(_mpiexec(2, program, "S"), kernel, "S", 2)


def _altered(tmp_path: Path, program: Path, change: str) -> Path:
    """A program that loads ``program`` without running it, applies ``change`` to its globals ``g``, and
    runs its main on class S."""
    p = tmp_path / "altered.py"
    p.write_text(
        f"import runpy, sys\ng = runpy.run_path({str(program)!r})\n{change}\ng['main']([sys.argv[0], 'S'])\n"
    )
    return p


def test_ep_wrong_reference_fails(tmp_path):
    prog = _altered(tmp_path, EP, "g['CLASSES']['S']['sx'] *= 1 + 1e-6")
    out = _mpiexec(2, prog)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "verification SUCCESSFUL" not in text
    # Every rank fails with the same line (each has the reduced sums); their output may interleave.
    assert re.search(
        r"NotVerified: NAS EP class S: sx = -3247\.83\d+ does not verify against NPB's -3247\.83\d+"
        r" \(relative error 1e-06 > 1e-08\)",
        text,
    ), text


def test_is_wrong_test_rank_fails(tmp_path):
    prog = _altered(tmp_path, IS, "g['CLASSES']['S']['test_rank'][1] += 1")
    out = _mpiexec(2, prog)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text
    assert "verification SUCCESSFUL" not in text
    # Test key 1 (the key at index 17148, value 158) has rank 18 + 1 in the first timed iteration.
    assert (
        "NotVerified: NAS IS class S: partial verification failed in iteration 1: test key 1 (value 158)"
        " has rank 19, NPB's is 20"
    ) in text, text


def test_is_refuses_ranks_not_a_power_of_two():
    out = _mpiexec(3, IS, "S")
    assert out.returncode != 0
    assert "error: NAS IS: 3 ranks; use a power of two" in out.stdout + out.stderr


@pytest.mark.extended
@pytest.mark.parametrize("ranks", [1, 4, 16])
@pytest.mark.parametrize("kernel, program", [("EP", EP), ("IS", IS)])
def test_class_w(kernel, program, ranks):
    _verified(_mpiexec(ranks, program, "W", timeout=600), kernel, "W", ranks)


@pytest.mark.extended
@pytest.mark.parametrize("kernel, program", [("EP", EP), ("IS", IS)])
def test_class_b_on_four_ranks(kernel, program):
    # About 25 s (EP) and 17 s (IS) on 2 shared cores.
    _verified(_mpiexec(4, program, "B", timeout=600), kernel, "B", 4)
