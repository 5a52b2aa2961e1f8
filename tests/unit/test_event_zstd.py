"""Compressed event logs (issue 23, deliverable 3): ``results.events: zstd`` writes ``events.jsonl.zst``, a
stream of zstd frames each whole on its own, which every reader of the log reads as it reads events.jsonl;
an interrupted run keeps what it logged, a torn last frame is passed over as a torn last line is, and
damage anywhere else stops the reader with one line naming the file."""

from __future__ import annotations

import json
import subprocess
import sys

import orjson
import pytest
import zstandard

from testbed import runner
from testbed.core import events as ev
from testbed.core.backend import PreflightError
from testbed.results import compare, report
from testbed.results import folder as outfolder
from testbed.results import summary as results
from testbed.scenario import load

# Small, but with every kind of record a gang run logs (slots, switches, progress, a node down and up).
DOC = {
    "name": "small",
    "cluster": {"nodes": 4},
    "scheduler": {"name": "gang", "params": {"quantum_ms": 200}},
    "workload": {"seed": 5, "generator": {"count": 8, "mean_interarrival_s": 0.5, "duration": {"mean_s": 2}}},
    "faults": {"on_node_down": "requeue", "script": [{"at_s": 1.5, "node": 2, "kind": "down"},
                                                       {"at_s": 3.0, "node": 2, "kind": "up"}]},
}  # fmt: skip


def _run(tmp_path, name, fmt=None):
    doc = dict(DOC, results={"events": fmt}) if fmt else DOC
    out = tmp_path / name
    runner.run(load(doc=doc), "sim", out)
    return out


def _frames(path) -> int:
    """How many zstd frames the file holds."""
    data, n = path.read_bytes(), 0
    while data:
        obj = zstandard.ZstdDecompressor().decompressobj()
        obj.decompress(data)
        assert obj.eof
        data, n = obj.unused_data, n + 1
    return n


@pytest.fixture
def small_frames(monkeypatch):
    # Frames of 4 kB of lines instead of 1 MiB: a small run's log then holds many of them.
    monkeypatch.setattr(ev, "FLUSH_BYTES", 4096)


def test_the_default_log_is_plain_and_zstd_gives_the_same_run(tmp_path, small_frames):
    assert load(doc=DOC).results.events == "jsonl"
    plain, packed = _run(tmp_path, "plain"), _run(tmp_path, "zstd", "zstd")
    assert (plain / "events.jsonl").is_file() and not (plain / "events.jsonl.zst").exists()
    assert (packed / "events.jsonl.zst").is_file() and not (packed / "events.jsonl").exists()
    assert ev.find_log(plain) == plain / "events.jsonl" and ev.find_log(packed) == packed / "events.jsonl.zst"
    events = list(ev.read_jsonl(plain / "events.jsonl"))
    # (230 lines: a switch's nodes that run the same jobs share one, testbed/core/events.py GROUPED)
    assert len(events) > 200 and {e["kind"] for e in events} >= {
        ev.SLOT_SWITCH,
        ev.NODE_DOWN,
        ev.JOB_REQUEUED,
    }
    assert list(ev.read_jsonl(packed / "events.jsonl.zst")) == events
    # The very bytes, in frames that the zstd tool (or any zstd library) reads too.
    raw = zstandard.ZstdDecompressor().stream_reader(
        (packed / "events.jsonl.zst").read_bytes(), read_across_frames=True
    )
    assert raw.read() == (plain / "events.jsonl").read_bytes()
    assert _frames(packed / "events.jsonl.zst") >= 5
    assert (packed / "events.jsonl.zst").stat().st_size * 5 < (plain / "events.jsonl").stat().st_size
    for name in ("jobs.csv", "summary.json"):
        assert (packed / name).read_bytes() == (plain / name).read_bytes(), name


def test_results_report_and_compare_read_a_zstd_folder(tmp_path):
    plain, out = _run(tmp_path, "plain"), _run(tmp_path, "packed", "zstd")
    jobs, summary = (out / "jobs.csv").read_bytes(), json.loads((out / "summary.json").read_text())
    assert results.run_folders(tmp_path) == [out, plain]
    # The report draws the same page from either log, and compare puts the two side by side.
    assert report.run_page(out).replace("packed", "plain") == report.run_page(plain)
    assert [e.summaries for e in compare.entries([out])] == [[summary]]
    (out / "jobs.csv").unlink()
    (out / "summary.json").unlink()
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "results", str(out)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr
    assert (out / "jobs.csv").read_bytes() == jobs
    names = {p.name for p in plain.iterdir()} - {"events.jsonl"} | {"events.jsonl.zst"}
    assert {p.name for p in out.iterdir()} == names  # rebuilt from the compressed log, not beside it
    # What only the driver knew (how the run ended, the seed it drew) is said to be unknown or left out, as
    # for a plain log; everything computed from the events is the same.
    rebuilt = json.loads((out / "summary.json").read_text())
    assert rebuilt.pop("ended").startswith("not recorded") and summary.pop("ended") == "all jobs ended"
    summary.pop("workload_seed")
    assert rebuilt == summary


def _four_frames() -> tuple[list[list[dict]], list[bytes]]:
    """Four chunks of 50 events, and each as one checksummed zstd frame (as the writer makes them)."""
    cctx = zstandard.ZstdCompressor(write_checksum=True)
    chunks = [
        [{"t": float(k), "kind": ev.JOB_SUBMITTED, "job": f"j{k}-{i}"} for i in range(50)] for k in range(4)
    ]
    return chunks, [cctx.compress(b"".join(ev._line(e) for e in c)) for c in chunks]


def test_a_torn_last_frame_is_passed_over(tmp_path):
    chunks, frames = _four_frames()
    path = tmp_path / "events.jsonl.zst"
    for cut in (5, len(frames[-1]) // 2, len(frames[-1]) - 1):
        path.write_bytes(b"".join(frames[:-1]) + frames[-1][:cut])
        assert list(ev.read_jsonl(path)) == [e for c in chunks[:-1] for e in c], cut
    path.write_bytes(b"".join(frames))
    assert list(ev.read_jsonl(path)) == [e for c in chunks for e in c]
    # Cut within the very first frame, or within its magic number: nothing read, nothing raised.
    for cut in (2, 30):
        path.write_bytes(frames[0][:cut])
        assert list(ev.read_jsonl(path)) == []


def test_damage_before_the_last_frame_fails_with_one_line_naming_the_file(tmp_path):
    chunks, frames = _four_frames()
    path = tmp_path / "events.jsonl.zst"
    start = len(frames[0])
    for where in range(4, len(frames[1])):  # every byte of the second frame after its magic number
        damaged = bytearray(b"".join(frames))
        damaged[start + where] ^= 0x5A
        path.write_bytes(bytes(damaged))
        with pytest.raises(ev.EventLogError) as info:
            list(ev.read_jsonl(path))
        msg = str(info.value)
        assert msg.startswith(f"{path}: zstd frame ") and "damaged" in msg and "\n" not in msg, (where, msg)
    # A block header claiming more than follows (a raw block of 100 kB): its decoder waits for bytes that
    # never come, taking the next frames in. Not a torn end: another frame begins after it.
    waits = ev.ZSTD_MAGIC + bytes([0x00, 0x38]) + (100_000 << 3 | 1).to_bytes(3, "little") + b'{"t": 1}\n'
    path.write_bytes(frames[0] + waits + frames[2] + frames[3])
    with pytest.raises(ev.EventLogError, match=rf"^{path}: zstd frame 2 \(from byte {start}\) does not end "):
        list(ev.read_jsonl(path))
    path.write_bytes(frames[0] + waits)  # the same frame last: a torn end, passed over
    assert list(ev.read_jsonl(path)) == chunks[0]
    # A frame whose lines are not events: the line is named, as in a plain log.
    torn = zstandard.ZstdCompressor(write_checksum=True).compress(b'{"t": 1.0, "kind": "job_sta{"t": 2\n')
    path.write_bytes(frames[0] + torn + frames[2])
    with pytest.raises(ev.EventLogError, match=r"line 51 is not an event"):
        list(ev.read_jsonl(path))


def test_the_cli_names_the_damaged_file(tmp_path, small_frames):
    out = _run(tmp_path, "zstd", "zstd")
    log = out / "events.jsonl.zst"
    data = bytearray(log.read_bytes())
    data[len(data) // 3] ^= 0xFF
    log.write_bytes(bytes(data))
    p = subprocess.run(
        [sys.executable, "-m", "testbed.cli", "results", str(out)], capture_output=True, text=True
    )
    assert p.returncode == 2 and str(log) in p.stderr and "damaged" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_a_killed_writer_keeps_its_whole_frames_and_an_interrupted_one_everything(tmp_path, monkeypatch):
    monkeypatch.setattr(ev, "FLUSH_BYTES", 2000)
    events = [{"t": k / 10, "wall": k / 10, "src": "sim", "kind": ev.PROGRESS, "node": k % 7, "value": k}
              for k in range(400)]  # fmt: skip
    path = tmp_path / "events.jsonl.zst"
    sink = ev.ZstdSink(path)
    for e in events:
        sink(e)
    # Killed now (never closed): what is on disk is every frame written so far, a prefix of the events.
    kept = list(ev.read_jsonl(path))
    assert 0 < len(kept) < len(events) and kept == events[: len(kept)]
    sink.close()
    assert list(ev.read_jsonl(path)) == events

    # Ctrl-C amid a frame's write (half of it on disk): until close() the file reads as the frames before
    # it (the half frame is a torn end); after close(), every event emitted, once.
    real_write, calls = ev.os.write, []

    def torn_write(fd, data):
        calls.append(len(data))
        if len(calls) == 3:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise KeyboardInterrupt
        return real_write(fd, data)

    monkeypatch.setattr(ev.os, "write", torn_write)
    sink = ev.ZstdSink(path)
    emitted = 0
    with pytest.raises(KeyboardInterrupt):
        for e in events:
            emitted += 1
            sink(e)
    assert len(calls) == 3 and emitted < len(events)
    kept = list(ev.read_jsonl(path))
    assert 0 < len(kept) < emitted and kept == events[: len(kept)]
    sink.close()
    assert list(ev.read_jsonl(path)) == events[:emitted]
    assert _frames(path) == 3


def test_force_replaces_a_zstd_runs_folder(tmp_path):
    out = _run(tmp_path, "zstd", "zstd")
    (out / "events.jsonl.zst.tmp").write_bytes(b"")  # a merge killed midway leaves it
    assert outfolder.foreign_entries(out) == []
    outfolder.claim(out, force=True).release()
    assert not (out / "events.jsonl.zst").exists() and not (out / "events.jsonl.zst.tmp").exists()
    # ... and the runner never writes a second run beside the first's compressed log.
    again = _run(tmp_path, "again", "zstd")
    with pytest.raises(PreflightError, match="already holds a run's events"):
        runner.run_once(load(doc=DOC), "sim", again)


def test_a_killed_real_runs_logs_are_merged_into_the_scenarios_format(tmp_path):
    # What a real run's driver leaves when it is killed before its merge: the components' own logs
    # (events/*.jsonl, plain, line by line). `testbed results` merges them into events.jsonl.zst when the
    # scenario says zstd, and into events.jsonl otherwise.
    for fmt, name in (("zstd", "events.jsonl.zst"), ("jsonl", "events.jsonl")):
        out = _run(tmp_path, fmt, fmt)
        events = list(ev.read_jsonl(ev.find_log(out)))
        ev.find_log(out).unlink()
        (out / "events").mkdir()
        for src in {e["src"] for e in events}:
            ev.write_all([e for e in events if e["src"] == src], out / "events" / f"{src}.jsonl")
        results.rebuild(out)
        assert [p.name for p in out.iterdir() if p.name.startswith("events.")] == [name]
        assert (out / name).read_bytes().startswith(ev.ZSTD_MAGIC) == (fmt == "zstd")
        key = lambda e: orjson.dumps(e, option=orjson.OPT_SORT_KEYS)  # noqa: E731
        assert sorted(map(key, ev.read_jsonl(out / name))) == sorted(map(key, events))
