"""NAS MG (apps/nas/mg.py) as an ordinary mpi4py program under plain ``mpiexec``: the residual's L2 norm
verifies against NPB's value, and a wrong verification value fails the run with NotVerified's line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .nas_support import mpiexec, needs_mpiexec, verifies

MG = Path(__file__).resolve().parents[2] / "apps" / "nas" / "mg.py"


#: NPB's class S value (mg.py's own table is what is under test, so it is not read from there).
S_NORM = 0.5307707005734e-04


@needs_mpiexec
def test_class_s_verifies_on_two_ranks():
    verifies("MG", "S", 2)


@needs_mpiexec
def test_a_wrong_verification_value_fails_the_run_naming_kernel_class_and_value(tmp_path):
    wrong = 5.3e-05
    prog = tmp_path / "mg_wrong.py"
    prog.write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('mg_under_test', {str(MG)!r})\n"
        "mg = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(mg)\n"
        f"mg.VERIFY['S'] = {wrong!r}\n"
        "mg.main(['mg', 'S'])\n"
    )
    p = mpiexec(2, str(prog))
    out = p.stdout + p.stderr
    assert p.returncode != 0, out
    assert "verification SUCCESSFUL" not in out
    lines = [ln for ln in out.splitlines() if "NotVerified: " in ln]
    # Rank 0 alone verifies: one line, not one per rank.
    assert len(lines) == 1, out
    got = re.search(
        r"NAS MG class S: L2 norm of the residual = (\S+) does not verify against NPB's (\S+) ", lines[0]
    )
    assert got, lines[0]
    # The value named is the one computed (NPB's, to its tolerance), against the value put there.
    assert abs(float(got.group(1)) - S_NORM) <= 1e-8 * S_NORM, lines[0]
    assert got.group(2) == repr(wrong), lines[0]


@pytest.mark.extended
@needs_mpiexec
@pytest.mark.parametrize("ranks", [1, 4, 16])
def test_class_w_verifies(ranks):
    verifies("MG", "W", ranks, timeout=300)


@pytest.mark.extended
@needs_mpiexec
def test_class_b_verifies_on_four_ranks():
    # Class B is A's grid with 20 iterations and NPB's S(b) smoother; about 15 s on 2 shared cores.
    verifies("MG", "B", 4, timeout=600)


@pytest.mark.extended
@needs_mpiexec
def test_class_s_verifies_on_sixteen_ranks():
    # 16 ranks of 2 planes each: every level below the finest is held whole on every rank.
    verifies("MG", "S", 16)


@pytest.mark.extended
@needs_mpiexec
@pytest.mark.parametrize("ranks", [3, 32])
def test_a_rank_count_not_a_power_of_two_up_to_16_is_refused_in_one_line(ranks):
    p = mpiexec(ranks, str(MG), "S", timeout=120)
    assert p.returncode != 0
    assert p.stderr.count("error: NAS MG:") == 1, p.stderr
    assert f"{ranks} ranks; use a power of two" in p.stderr
