"""The host-memory note (testbed/emulator/mechanism/hostmem.py) on sysfs trees laid out as a VM's and as
bare metal's, and on this host's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.emulator.mechanism import hostmem


def _balloon(root: Path, features: str) -> Path:
    dev = root / "virtio_balloon" / "virtio0"
    dev.mkdir(parents=True)
    (dev / "features").write_text(features + "\n")
    (root / "virtio_balloon" / "bind").write_text("")
    return root / "virtio_balloon"


def _params(root: Path, min_free_ms: str | None) -> Path:
    p = root / "params"
    p.mkdir()
    (p / "page_reporting_order").write_text("9\n")
    if min_free_ms is not None:
        (p / "min_free_ms").write_text(min_free_ms + "\n")
    return p


REPORTING = "0110010" + "0" * 57  # bit 5: VIRTIO_BALLOON_F_REPORTING
NOT_REPORTING = "0110000" + "0" * 57


def test_bare_metal_and_a_balloon_without_reporting_get_no_note(tmp_path):
    assert hostmem.page_reporting_note(str(_params(tmp_path, "0")), str(tmp_path / "absent")) == ""
    balloon = _balloon(tmp_path / "b", NOT_REPORTING)
    assert hostmem.reporting_devices(str(balloon)) == []
    assert hostmem.page_reporting_note(str(_params(tmp_path / "b", "0")), str(balloon)) == ""


def test_prompt_reporting_names_the_setting_and_the_fix(tmp_path):
    balloon = _balloon(tmp_path, REPORTING)
    params = _params(tmp_path, "0")
    note = hostmem.page_reporting_note(str(params), str(balloon))
    assert "0 ms after it is freed" in note
    assert f"echo {hostmem.RECOMMENDED_MIN_FREE_MS} > {params / 'min_free_ms'}" in note


@pytest.mark.parametrize("wait_ms", [hostmem.RECOMMENDED_MIN_FREE_MS, 600_000])
def test_a_wait_longer_than_a_runs_gaps_gets_no_note(tmp_path, wait_ms):
    balloon = _balloon(tmp_path, REPORTING)
    assert hostmem.page_reporting_note(str(_params(tmp_path, str(wait_ms))), str(balloon)) == ""


def test_a_kernel_without_the_delay_setting_says_to_turn_reporting_off(tmp_path):
    balloon = _balloon(tmp_path, REPORTING)
    note = hostmem.page_reporting_note(str(_params(tmp_path, None)), str(balloon))
    assert "virtio0" in note and "turn page reporting off" in note


def test_this_hosts_note_agrees_with_its_own_sysfs():
    note = hostmem.page_reporting_note()
    if not hostmem.reporting_devices():
        assert note == ""
        return
    raw = Path(hostmem.PARAMS, "min_free_ms")
    if raw.exists() and int(raw.read_text()) >= hostmem.RECOMMENDED_MIN_FREE_MS:
        assert note == ""
    else:
        assert note.startswith("this virtual machine returns")
