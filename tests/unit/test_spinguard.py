"""The spin guard's fallback (apps/spinguard.py): where its node's cgroup files cannot be read it spins
unguarded, and says so once. The guard's timing is held on real processes in
tests/integration/test_tbcomm.py."""

from __future__ import annotations

from testbed.apps.spinguard import GuardSpec, SpinGuard


def test_a_guard_whose_node_files_are_gone_spins_unguarded_and_says_so_once(tmp_path, capsys):
    missing = tmp_path / "node0" / "cpu.stat"
    guard = SpinGuard(GuardSpec(10_000, 2_120, 200, str(missing), str(tmp_path / "node0" / "cpuacct.usage")))
    assert [guard.pause_s(t * 1e-3) for t in range(5)] == [0.0] * 5
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("spin guard off:") and str(missing) in lines[0]
    assert "FileNotFoundError" in lines[0] and "spin_reserve_us" in lines[0]


def test_a_guard_on_a_readable_node_pauses_a_spin_that_spent_the_period(tmp_path, capsys):
    # A v1 node as files: cpu.stat's period count and cpuacct.usage in ns, written as a kernel would.
    stat, usage = tmp_path / "cpu.stat", tmp_path / "cpuacct.usage"
    guard = SpinGuard(GuardSpec(10_000, 2_000, 200, str(stat), str(usage)))

    def look(now: float, periods: int, used_ns: int) -> float:
        stat.write_text(f"nr_periods {periods}\nnr_throttled 0\nthrottled_time 0\n")
        usage.write_text(f"{used_ns}\n")
        return guard.pause_s(now)

    assert look(1.0000, 0, 0) == 0.0  # the first look: taken as a period's start, of unknown precision
    assert look(1.0001, 1, 0) == 0.0  # a period began within 100 us: its grid is kept
    assert look(1.0010, 1, 1_000_000) == 0.0  # 1 ms of the 2 ms quota used: poll on
    pause = look(1.0019, 1, 1_850_000)  # 1.85 ms used: less than the 200 us reserve left
    assert 0.008 - 0.0001 < pause < 0.0082, pause  # until just before the period at 1.0101
    assert capsys.readouterr().err == ""
