"""Bad input is refused by the scenario's loader as one ScenarioError line, never as another exception
(issue 19, Deliver 1-2): every numeric field of every section and program kind given an infinite,
NaN, negative, huge, textual or boolean value; names that would become paths; seeds numpy refuses; YAML
that repeats a key or expands aliases without end; files that are not files or are too big."""

from __future__ import annotations

import copy
import math
import os
import time
from pathlib import Path

import pytest
import yaml

from testbed.scenario import ScenarioError, load
from testbed.scenario.model import MAX_ALIASES, MAX_SCENARIO_BYTES, apply_override

# Every section that has numbers, and every program kind, filled in once.
BASE = {
    "name": "bounds",
    "cluster": {"nodes": 4, "power": {}, "network": {"latency_us": 50, "bandwidth_mbps": 100}},
    "clock": {"tdf": 2.0},
    "scheduler": {"name": "gang", "params": {"mpl": 2, "quantum_ms": 50}},
    "workload": {
        "seed": 3,
        "jobs": [
            {"id": "syn", "size": 2, "estimate_s": 1.0, "app": {"iterations": 3, "gcomp": 5, "gio": 1}},
            {"id": "vis", "size": 2, "app": {"kind": "vision", "stages": ["decode", "edges"]}},
            {"id": "div", "size": 2, "app": {"kind": "divisible", "sigma": 10, "deadline_s": 100}},
        ],
        "generator": {
            "count": 3,
            "mean_interarrival_s": 1.0,
            "duration": {"dist": "erlang", "mean_s": 1.0, "shape": 2},
            "size": {"min": 1, "max": 2},
            "classes": [{"name": "c", "weight": 1.0, "app": {"gcomp": 2}}],
        },
        "divisible": {"arrivals": 2, "load": 0.5},
    },
    "faults": {"script": [{"at_s": 1.0, "node": 1, "kind": "down"}]},
    "duration_s": 100.0,
}
BAD = (math.inf, -math.inf, math.nan, -1, 1e300, "x", True)


def _numeric_paths(doc, path=()):
    """Every path to a number in ``doc`` (the scenario with every default filled in)."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _numeric_paths(v, (*path, str(k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _numeric_paths(v, (*path, str(i)))
    elif isinstance(doc, int | float) and not isinstance(doc, bool):
        yield path


def test_every_numeric_field_refuses_what_it_cannot_take_as_one_line():
    full = load(doc=BASE).model_dump(mode="json")
    paths = list(_numeric_paths(full))
    assert len(paths) > 60  # the walk reached the kinds' and sections' fields, not just a few
    refused = accepted = 0
    for path in paths:
        for value in BAD:
            doc = copy.deepcopy(full)
            apply_override(doc, list(path), value)
            try:
                load(doc=doc)
            except ScenarioError as exc:
                assert "\n" not in str(exc), (path, value, str(exc))
                refused += 1
                continue
            # Accepted: then it was a finite number in range (nothing infinite or NaN, no boolean).
            assert isinstance(value, int | float) and not isinstance(value, bool), (path, value)
            assert math.isfinite(value), (path, value)
            accepted += 1
    assert refused > accepted > 0


@pytest.mark.parametrize("value", ["", "../x", "a/b", "a\nb", "nul\x00", ".hidden", "x" * 101])
def test_a_job_id_must_be_usable_as_a_file_name(value):
    doc = copy.deepcopy(BASE)
    doc["workload"]["jobs"][0]["id"] = value
    with pytest.raises(ScenarioError, match=r"workload\.jobs\.0\.id: .*cannot name a file"):
        load(doc=doc)


def test_a_given_id_cannot_take_a_name_the_workload_gives_another_job():
    doc = copy.deepcopy(BASE)
    doc["workload"]["jobs"] = [{"size": 1}, {"id": "j0", "size": 1}]  # the first is j0 too
    with pytest.raises(ScenarioError, match="duplicate job id.*j0"):
        load(doc=doc)
    doc["workload"]["jobs"] = [{"id": "j4", "size": 1}]  # the generator's jobs are j1, j2, j3
    assert load(doc=doc)
    doc["workload"]["jobs"] = [{"id": "j2", "size": 1}]
    with pytest.raises(ScenarioError, match="duplicate job id.*j2"):
        load(doc=doc)


@pytest.mark.parametrize("seed", [-1, 2**63, 2**64])
def test_a_seed_numpy_cannot_take_is_refused(seed):
    doc = copy.deepcopy(BASE)
    doc["workload"]["seed"] = seed
    with pytest.raises(ScenarioError, match="workload.seed"):
        load(doc=doc)


def test_a_name_is_bounded():
    doc = copy.deepcopy(BASE)
    doc["name"] = "n" * 300
    with pytest.raises(ScenarioError, match="name: .*up to 100 printable characters"):
        load(doc=doc)
    doc["name"] = "my scenario (v2)"  # any printable text: the results folder keeps its safe characters
    assert load(doc=doc).name == "my scenario (v2)"


def test_duplicate_keys_are_refused_naming_their_lines(tmp_path):
    f = tmp_path / "dup.yaml"
    text = yaml.safe_dump(BASE, sort_keys=False) + "scheduler: {name: batch}\n"
    f.write_text(text)
    with pytest.raises(ScenarioError, match=r"duplicate key 'scheduler' at lines \d+ and \d+"):
        load(f)
    with pytest.raises(ScenarioError, match="duplicate key 'mpl'"):
        load(doc=BASE, overrides=["scheduler.params={mpl: 2, mpl: 3}"])


def test_an_alias_bomb_is_refused_at_once(tmp_path):
    lines = ["name: b", "workload: {jobs: [{size: 1}]}", "scheduler:", "  name: gang", "  params:"]
    lines.append('    a: &a ["x","x","x","x","x","x","x","x","x"]')
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"    {cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    f = tmp_path / "bomb.yaml"
    f.write_text("\n".join(lines) + "\n")
    t = time.monotonic()
    with pytest.raises(ScenarioError, match=f"more than {MAX_ALIASES} aliases"):
        load(f)
    with pytest.raises(ScenarioError, match=f"more than {MAX_ALIASES} aliases"):
        load(doc=BASE, overrides=["sweep=" + "{" + ", ".join(lines[5:]).replace("    ", "") + "}"])
    assert time.monotonic() - t < 5


def test_what_is_not_a_regular_file_or_too_big_is_refused_unread(tmp_path):
    with pytest.raises(ScenarioError, match="not a regular file"):
        load(Path("/dev/zero"))
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ScenarioError, match="not a regular file"):
        load(fifo)  # opening it would block for ever
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(MAX_SCENARIO_BYTES + 1)
    with pytest.raises(ScenarioError, match="MiB, over the 4 MiB"):
        load(big)


def test_a_bad_set_value_is_shown_bounded():
    with pytest.raises(ScenarioError) as exc:
        load(doc=BASE, overrides=["name=[" + "x" * 5000])
    assert len(str(exc.value)) < 300


def test_the_simulator_honours_wall_limit_s(tmp_path):
    # A run whose events never thin out (a 1 ms quantum over ten million rounds) ends at the limit, as a
    # real run does, with its results written: before, the simulator had no wall limit at all.
    import json

    from testbed import runner

    doc = copy.deepcopy(BASE)
    doc["workload"] = {"jobs": [{"id": "long", "size": 4, "app": {"iterations": 10_000_000, "gcomp": 1}}]}
    doc.pop("faults")
    doc.update(duration_s=None, wall_limit_s=2.0)
    doc["scheduler"] = {"name": "gang", "params": {"mpl": 2, "quantum_ms": 1, "lead_ms": 0.5}}
    t = time.monotonic()
    summary = runner.run_once(load(doc=doc), "sim", tmp_path / "out")
    assert time.monotonic() - t < 30
    assert summary["ended"] == "wall_limit_s (2 s real) reached"
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["jobs_by_state"] == {
        "COMPLETED_KILLED": 1
    }


def test_validate_reads_the_trace_as_run_would(tmp_path):
    # The trace is read when the jobs are built: the preflight builds them, so what run would fail on
    # (garbage, a gzip cut short, a non-finite field, no usable job) is refused before anything runs.
    from testbed import runner

    nasa = Path(__file__).resolve().parents[2] / "scenarios" / "traces" / "NASA-iPSC-1993-3.1-cln.swf.gz"
    cases = {
        "garbage.swf.gz": (os.urandom(3000), "cannot read it as an SWF trace"),
        "cut.swf.gz": (nasa.read_bytes()[:20000], "cannot read it as an SWF trace"),
        "inf.swf": (b"1 0 0 inf 1 0 0 1 0 0 1 0 0 0 0 0 0 0\n", "not 18 finite numbers"),
        "empty.swf": (b"; a comment\n1 0 0 0 0 0 0 0 0 0 1 0 0 0 0 0 0 0\n", "no job to run"),
    }
    for name, (data, expect) in cases.items():
        (tmp_path / name).write_bytes(data)
        scn = load(doc={"name": "t", "workload": {"trace": {"path": str(tmp_path / name)}}})
        with pytest.raises(runner.PreflightError, match=expect):
            runner.preflight(scn, "sim", tmp_path / "out")
        assert not (tmp_path / "out").exists()


def test_a_message_no_nic_could_carry_is_refused_for_real_processes_only(tmp_path):
    # A divisible chunk of sigma x unit_bytes = 100 MB is beyond every NIC's frame (apps/wire.py
    # MAX_FRAME_BODY): on real processes its connection would be closed mid-run (issue 19).
    from testbed import runner

    job = {"id": "div", "size": 2, "app": {"kind": "divisible", "sigma": 100_000, "deadline_s": 1e6,
                                            "unit_bytes": 1000}}  # fmt: skip
    scn = load(doc={"name": "t", "cluster": {"nodes": 2, "envelope": "none"}, "workload": {"jobs": [job]}})
    with pytest.raises(
        runner.PreflightError, match=r"job 'div': app: a message of 95.4 MiB, over the 64 MiB"
    ):
        runner.preflight(scn, "ray", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    runner.preflight(scn, "sim", tmp_path / "out")  # the simulator sends no bytes


def test_a_runs_frame_bound_is_its_largest_message():
    from testbed.apps.wire import MAX_FRAME_BODY, MIN_FRAME_BODY, STAMP, frame_bound

    from testbed.core.jobs import largest_message
    from testbed.scenario.workload import build

    assert frame_bound(None) == MAX_FRAME_BODY  # a user's MPI program: its messages are its own
    assert frame_bound(0) == frame_bound(100) == MIN_FRAME_BODY
    assert frame_bound(10**6) == 10**6 + STAMP.size
    assert frame_bound(10**9) == MAX_FRAME_BODY
    jobs = build(load(doc=copy.deepcopy(BASE)))
    # The vision job's grey 160 x 120 frames and their 12-byte header, the divisible job's 10 x 1000 bytes
    assert largest_message([j for j in jobs if j.job_id == "vis"]) == 160 * 120 + 12
    assert largest_message([j for j in jobs if j.job_id == "div"]) == 10_000
    assert largest_message([j for j in jobs if j.job_id in ("syn", "vis", "div")]) == 160 * 120 + 12
    mpi = load(
        doc={"name": "m", "workload": {"jobs": [{"size": 2, "app": {"kind": "mpi", "program": __file__}}]}}
    )
    assert largest_message(build(mpi)) is None


def test_a_trace_out_of_submission_order_gives_no_negative_arrival(tmp_path):
    from testbed.scenario.workload import build

    (tmp_path / "t.swf").write_bytes(
        b"1 100 0 10 1 0 0 1 0 0 1 0 0 0 0 0 0 0\n2 40 0 10 1 0 0 1 0 0 1 0 0 0 0 0 0 0\n"
    )
    jobs = build(load(doc={"name": "t", "workload": {"trace": {"path": str(tmp_path / "t.swf")}}}))
    assert [(j.job_id, j.spec.submit_time) for j in jobs] == [("t2", 0.0), ("t1", 60.0)]


@pytest.mark.extended
def test_every_accepted_value_runs_to_its_end_in_the_simulator(tmp_path):
    # The other half of the battery above: what the loader accepts, run takes too (validate catches
    # everything run would fail on). Each accepted extreme runs in the simulator under a 3 s wall
    # limit: it ends, or reaches that limit, and never fails with an error of its own.
    from testbed import runner
    from testbed.core.backend import wall_limit_reached

    full = load(doc={**BASE, "wall_limit_s": 3.0}).model_dump(mode="json")
    ran = 0
    for path in _numeric_paths(full):
        if path == ("wall_limit_s",):
            continue
        for value in BAD:
            doc = copy.deepcopy(full)
            apply_override(doc, list(path), value)
            try:
                scn = load(doc=doc)
            except ScenarioError:
                continue
            out = tmp_path / f"r{ran}"
            try:
                runner.run_once(scn, "sim", out)
            except runner.RunFailed as exc:
                assert str(exc).startswith(wall_limit_reached(3.0)), (path, value, str(exc))
            ran += 1
    assert ran > 30  # the extremes in range (no boolean is among them: one is never taken for a number)


@pytest.mark.parametrize("path", ["t" * 300 + ".swf", "/tr" * 3000, "a\x00b.swf"])
def test_a_path_the_os_cannot_look_up_is_one_line_naming_the_field(path):
    # Longer than the OS allows (a name over 255 bytes, a path over 4096) or with a NUL in it: an OSError
    # or ValueError traceback and exit 1 before.
    doc = {"name": "p", "workload": {"trace": {"path": path}}}
    with pytest.raises(ScenarioError, match=r"^workload\.trace\.path: the system refuses it: ") as exc:
        load(doc=doc)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 200
    doc = {"name": "p", "workload": {"jobs": [{"size": 1, "app": {"kind": "mpi", "program": path}}]}}
    with pytest.raises(ScenarioError, match=r"workload\.jobs\.0\.app\.program: ") as exc:
        load(doc=doc)
    assert "\n" not in str(exc.value)


def test_power_is_capped_so_the_energy_stays_finite(tmp_path):
    # A node of 1e307 W on 64 nodes wrote "energy_j": Infinity into summary.json (not JSON), exit 0.
    import json

    from testbed import runner
    from testbed.scenario.model import MAX_NODE_WATTS

    doc = {
        "name": "w",
        "cluster": {"nodes": 64},
        "workload": {"jobs": [{"size": 64, "app": {"iterations": 2}}]},
    }
    for field in ("idle_watts", "busy_watts"):
        with pytest.raises(ScenarioError, match=rf"^invalid scenario: cluster\.power\.{field}: .*1000000"):
            load(doc={**doc, "cluster": {"nodes": 64, "power": {field: 1e307}}})
    top = {"idle_watts": MAX_NODE_WATTS, "busy_watts": MAX_NODE_WATTS}
    runner.run_once(load(doc={**doc, "cluster": {"nodes": 64, "power": top}}), "sim", tmp_path / "out")

    def refuse(name):
        raise AssertionError(f"summary.json holds {name}, which is not JSON")

    summary = json.loads((tmp_path / "out" / "summary.json").read_text(), parse_constant=refuse)
    assert 0 < summary["energy_j"] < 1e300


def test_a_boolean_is_not_taken_for_a_number_in_any_model():
    # Pydantic's lax mode took true as 1: `nodes: true` was a cluster of one node, exit 0. Each kind of
    # model (a section, a program kind's config, local users, divisible tasks, a list of numbers) is tried.
    cases = {
        "cluster.nodes": ("cluster", "nodes"),
        "workload.seed": ("workload", "seed"),
        "repetitions": ("repetitions",),
        "cluster.cpu_rate": ("cluster", "cpu_rate"),
        "cluster.power.idle_watts": ("cluster", "power", "idle_watts"),
        "workload.jobs.0.size": ("workload", "jobs", "0", "size"),
        "workload.jobs.0.app.iterations": ("workload", "jobs", "0", "app", "iterations"),
        "workload.jobs.1.app.work_units": ("workload", "jobs", "1", "app", "work_units"),
        "workload.divisible.arrivals": ("workload", "divisible", "arrivals"),
        "workload.generator.size.max": ("workload", "generator", "size", "max"),
        "clock.tdf": ("clock", "tdf"),
    }
    for name, path in cases.items():
        for value in [True, False] + ([[True, 5]] if name.endswith("work_units") else []):
            doc = copy.deepcopy(BASE)
            apply_override(doc, list(path), value)
            with pytest.raises(ScenarioError) as exc:
                load(doc=doc)
            assert str(exc.value).startswith(f"invalid scenario: {name}: a boolean (true or false) is not a "
                                             "number; give a number"), str(exc.value)  # fmt: skip
    doc = copy.deepcopy(BASE)
    doc["workload"]["local_users"] = [{"nodes": [0], "session": {"means_s": [True, 1.0]}}]
    with pytest.raises(ScenarioError, match=r"workload\.local_users\.0\.session\.means_s: a boolean"):
        load(doc=doc)
    doc["workload"]["local_users"] = [{"nodes": [True]}]
    with pytest.raises(ScenarioError, match=r"workload\.local_users\.0\.nodes: a boolean"):
        load(doc=doc)
    # A field that takes a boolean still does.
    assert load(doc={**BASE, "monitoring": {"enabled": False}}).monitoring.enabled is False


BIG = "x" * 200_000


@pytest.mark.parametrize(
    ("where", "doc"),
    [
        ("scheduler.name", {"scheduler": {"name": BIG}}),
        ("cluster.envelope", {"cluster": {"envelope": BIG}}),
        ("a key", {"cluster": {BIG: 1}}),
        ("a top-level key", {BIG: 1}),
        ("name", {"name": BIG}),
        ("cluster.nodes", {"cluster": {"nodes": BIG}}),
        ("cluster.ray_address", {"cluster": {"ray_address": BIG}}),
        ("a scheduler parameter", {"scheduler": {"name": "gang", "params": {BIG: 1}}}),
        ("a scheduler parameter's value", {"scheduler": {"name": "gang", "params": {"quantum_ms": BIG}}}),
        (
            "thousands of parameters",
            {"scheduler": {"name": "gang", "params": {f"p{i}": 1 for i in range(9999)}}},
        ),
        ("a job id", {"workload": {"jobs": [{"size": 1, "id": BIG}]}}),
        ("a program kind", {"workload": {"jobs": [{"size": 1, "app": {"kind": BIG}}]}}),
        ("a kind's field", {"workload": {"jobs": [{"size": 1, "app": {BIG: 1}}]}}),
        ("a kind's profile", {"workload": {"jobs": [{"size": 1, "app": {"profile": BIG}}]}}),
        ("a generator kind", {"workload": {"generator": {"kind": BIG}}}),
        ("a trace path", {"workload": {"trace": {"path": "/t" * 1500}}}),
        (
            "an mpi program",
            {"workload": {"jobs": [{"size": 1, "app": {"kind": "mpi", "program": "/p" * 1500}}]}},
        ),
        ("a grid value", {"sweep": {"scheduler.name": [BIG]}}),
        ("a variant's key", {"sweep": [{"name": "v", "set": {BIG: 1}}]}),
        ("a variant's value", {"sweep": [{"name": "v", "set": {"scheduler.name": BIG}}]}),
    ],
)
def test_a_huge_value_is_echoed_as_a_bounded_excerpt(where, doc):
    # A 200,000-character value came back as one line of 200 KB: every echo is cut to EXCERPT_CHARS.
    from testbed.core.inputs import EXCERPT_CHARS

    full = {"name": "b", "workload": {"jobs": [{"size": 1}]}}
    full.update(copy.deepcopy(doc))
    with pytest.raises(ScenarioError) as exc:
        load(doc=full)
    longest = max(len(line) for line in str(exc.value).splitlines())
    assert longest < 400, (where, str(exc.value)[:500])
    assert "x" * (EXCERPT_CHARS + 1) not in str(exc.value), where


def test_a_huge_set_or_yaml_key_is_echoed_as_a_bounded_excerpt():
    for override in (BIG, f"cluster.{BIG}=1", f"workload.jobs.{BIG}=1", f"name=[{BIG}"):
        with pytest.raises(ScenarioError) as exc:
            load(doc=BASE, overrides=[override])
        assert len(str(exc.value)) < 400, str(exc.value)[:500]
    key = "k" * 1000  # PyYAML reads a plain key of up to 1024 characters
    with pytest.raises(ScenarioError, match=r"duplicate key 'k{60}'\.\.\. at line 1; keep one") as exc:
        load(doc=BASE, overrides=[f"scheduler.params={{{key}: 1, {key}: 2}}"])
    assert len(str(exc.value)) < 400
