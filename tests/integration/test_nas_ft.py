"""NAS FT (apps/nas/ft.py) as an ordinary mpi4py program under plain ``mpiexec``: it verifies against
NPB's checksums for every step, and a wrong verification value fails the run with NotVerified's line."""

from __future__ import annotations

from pathlib import Path

import pytest

from .nas_support import mpiexec, needs_mpiexec, verifies

FT = Path(__file__).resolve().parents[2] / "apps" / "nas" / "ft.py"


@needs_mpiexec
def test_class_s_verifies_on_two_ranks():
    verifies("FT", "S", 2)


@needs_mpiexec
def test_a_wrong_verification_value_fails_the_run_naming_kernel_class_and_value(tmp_path):
    wrong = 5.5461484e02
    prog = tmp_path / "ft_wrong.py"
    prog.write_text(
        "import importlib.util, sys\n"
        f"sys.path.insert(0, {str(FT.parent)!r})\n"
        f"spec = importlib.util.spec_from_file_location('ft_under_test', {str(FT)!r})\n"
        "ft = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(ft)\n"
        f"ft.VERIFY['S'][2] = complex({wrong!r}, ft.VERIFY['S'][2].imag)\n"
        "ft.main(['ft', 'S'])\n"
    )
    p = mpiexec(2, str(prog))
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "verification SUCCESSFUL" not in out
    lines = [ln for ln in out.splitlines() if "NotVerified: " in ln]
    assert lines, out
    # Steps 1 and 2 still verify; step 3's real part is the one named, against the value put there.
    assert "NAS FT class S: checksum 3 real = 554.61484" in lines[0], lines[0]
    assert f"does not verify against NPB's {wrong!r}" in lines[0], lines[0]


@pytest.mark.extended
@needs_mpiexec
@pytest.mark.parametrize("ranks", [1, 4, 16])
def test_class_w_verifies(ranks):
    verifies("FT", "W", ranks, timeout=300)


@pytest.mark.extended
@needs_mpiexec
def test_class_b_verifies_on_four_ranks():
    # 512x256x256, 20 steps: about 30 s and 1 GB a rank on 2 shared cores.
    verifies("FT", "B", 4, timeout=600)
