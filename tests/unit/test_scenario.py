"""Scenario validation and overrides: errors name the field and the fix; same seed, same workload."""

from pathlib import Path

import pytest

from testbed import scenario, workload
from testbed.scenario import ScenarioError, load

ROOT = Path(__file__).resolve().parents[2]
MINI = {"workload": {"jobs": [{"size": 2}]}}


def _err(doc, overrides=()):
    with pytest.raises(ScenarioError) as ei:
        load(doc=doc, overrides=list(overrides))
    return str(ei.value)


def test_quickstart_is_valid_and_defaults_fill_in():
    scn = load(ROOT / "scenarios" / "quickstart.yaml")
    assert scn.name == "quickstart"
    assert scn.cluster.nodes == 16
    assert scn.scheduler.name == "gang"
    assert len(workload.build(scn)) == len(scn.workload.jobs)


def test_unknown_field_is_named_with_a_suggestion():
    msg = _err({"cluster": {"nodez": 4}, **MINI})
    assert "cluster.nodez" in msg and "did you mean 'nodes'" in msg


def test_unknown_scheduler_lists_the_known_ones():
    msg = _err({"scheduler": {"name": "fifo"}, **MINI})
    assert "unknown scheduler 'fifo'" in msg
    for known in ("batch", "gang", "local"):
        assert known in msg


def test_unknown_scheduler_param_lists_the_known_ones():
    msg = _err({"scheduler": {"name": "gang", "params": {"quantum": 5}}, **MINI})
    assert "quantum" in msg and "quantum_ms" in msg


def test_bad_values_name_field_and_fix():
    assert "workload.jobs.0.size" in _err({"workload": {"jobs": [{"size": 0}]}})
    assert "clock.tdf" in _err({"clock": {"tdf": 0.5}, **MINI})
    assert "gcomp and gio are both 0" in _err({"workload": {"jobs": [{"size": 1, "app": {"gcomp": 0}}]}})
    assert "no jobs" in _err({"workload": {}})
    msg = _err({"workload": {"generator": {"count": 3, "mean_interarrival_s": 1, "size": {"max": 40}}}})
    assert "size.max (40) is above cluster.nodes (16)" in msg


def test_overrides_apply_before_validation():
    scn = load(
        ROOT / "scenarios" / "quickstart.yaml",
        ["scheduler.name=batch", "workload.seed=7", "scheduler.params={}", "workload.jobs.0.size=4"],
    )
    assert scn.scheduler.name == "batch" and scn.workload.seed == 7
    assert scn.workload.jobs[0].size == 4
    assert "expected KEY=VALUE" in _err(MINI, ["scheduler.name"])
    assert "not an index" in _err(MINI, ["workload.jobs.5.size=3"])
    # An override is checked like the file.
    assert "unknown scheduler" in _err(MINI, ["scheduler.name=nope"])


def test_generator_is_deterministic_per_seed():
    doc = {
        "workload": {
            "seed": 3,
            "generator": {
                "count": 20,
                "mean_interarrival_s": 0.5,
                "duration": {"dist": "erlang", "mean_s": 1.0},
            },
        }
    }
    a = [(j.job_id, j.spec.submit_time, j.spec.size, j.app.iterations) for j in workload.build(load(doc=doc))]
    b = [(j.job_id, j.spec.submit_time, j.spec.size, j.app.iterations) for j in workload.build(load(doc=doc))]
    doc["workload"]["seed"] = 4
    c = [(j.job_id, j.spec.submit_time, j.spec.size, j.app.iterations) for j in workload.build(load(doc=doc))]
    assert a == b and a != c
    assert all(1 <= s <= 4 for _, _, s, _ in a)


def test_effective_tdf():
    scn = load(doc=MINI)
    assert scenario.effective_tdf(scn, cores=2) == pytest.approx(16 / 1.7)  # 0.3 core kept for control
    assert scenario.effective_tdf(load(doc={**MINI, "clock": {"control_reserve_cores": 0}}), cores=2) == 8.0
    assert scenario.effective_tdf(load(doc={**MINI, "cluster": {"nodes": 1}}), cores=2) == 1.0
    assert scenario.effective_tdf(load(doc={**MINI, "clock": {"tdf": 3}}), cores=2) == 3.0


def test_iters_per_unit_is_refused_saying_it_is_gone():
    with pytest.raises(ScenarioError, match=r"clock: iters_per_unit: removed: .*thread CPU time.*delete"):
        load(doc={"clock": {"iters_per_unit": 6000}, "workload": {"jobs": [{"size": 1}]}})
    # An old results folder's scenario.yaml (null there) still loads.
    scn = load(doc={"clock": {"iters_per_unit": None}, "workload": {"jobs": [{"size": 1}]}})
    assert "iters_per_unit" not in scn.clock.model_dump()
