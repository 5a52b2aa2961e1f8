"""The host's speed figure (apps/speed.py) and the stamps that carry it on measured models."""

from __future__ import annotations

from testbed.apps import speed


def test_the_figure_is_cpu_seconds_of_the_fixed_work():
    # Real work on this host: a positive number of CPU seconds, a few hundredths here (0.024 s on
    # 2026-11-28); two figures in a row within a factor of 2 of each other, however loaded the host.
    a, b = speed.speed_s(), speed.speed_s()
    assert 0 < a < 1 and 0 < b < 1
    assert 0.5 < a / b < 2


def test_a_stamp_is_read_back_only_for_the_same_work():
    doc = {"ranks": [], **speed.stamp(0.0241234567)}
    assert speed.stamp_of(doc) == 0.024123
    assert speed.stamp_of({**doc, "speed_version": speed.SPEED_VERSION + 1}) is None
    assert speed.stamp_of({"ranks": [], "speed_s": 0.02}) is None  # a stamp without its work's version


def test_a_model_replays_as_recorded_unless_both_speeds_are_known():
    assert speed.scale(None, 0.02) == speed.scale(0.02, None) == speed.scale(None, None) == 1.0
    assert speed.scale(0.03, 0.02) == 1.5


def test_the_figure_around_a_piece_of_work_is_the_mean_of_the_two_measured():
    assert speed.around(0.024, 0.031) == 0.0275
    assert speed.around(0.0241234567, 0.0241234567) == 0.024123
