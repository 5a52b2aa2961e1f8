"""CI fails when what a test needs is missing, instead of passing without testing it (issue 12)."""

from __future__ import annotations

import pytest

from ..conftest import measured, require


def test_a_missing_tool_skips_here_and_fails_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="promtool is not installed"):
        require(False, "promtool is not installed")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true, and promtool is not installed"):
        require(False, "promtool is not installed")
    require(True, "never said")


def test_a_timing_window_is_measured_again_at_most_so_often():
    values = iter([5, 7, 1])
    assert measured(lambda: next(values), lambda v: v < 3, why="load") == 1
    values = iter([5, 7, 9])
    with pytest.raises(AssertionError, match=r"all 3 tries \(load\): \[5, 7, 9\]"):
        measured(lambda: next(values), lambda v: v < 3, why="load")
