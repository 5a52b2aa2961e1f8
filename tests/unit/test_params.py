"""Typed scheduler parameters: every registered scheduler refuses bad values with one line that names
``scheduler.params.<name>``, what is wrong and the fix; good values reach the policies as an instance of
the scheduler's model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from testbed.schedulers import registry
from testbed.schedulers.base import PolicyConfigError, Scheduler
from testbed.schedulers.local import LocalGlobal
from testbed.schedulers.params import PolicyParams, param

from testbed.scenario import ScenarioError, load

SCHEDULERS = registry.names()

# What each parameter accepts, as the refusal says it. Written out by hand, not derived from the models:
# a model whose bounds or wording change must change this table too.
NEEDS = {
    "memory_aware": "true or false",
    "backfill": "true or false",
    "packing": "true or false",
    "alternate": "true or false",
    "quantum_ms": "a number of milliseconds >= 1",
    "lead_ms": "a number of milliseconds >= 0",
    "margin_pct": "a percentage >= 0 and <= 100",
    "band_pct": "a percentage > 0 and <= 100",
    "sharp_change_pct": "a percentage >= 0 and <= 100",
    "matching": "'fair' or 'best-fit'",
    "normal_nice": "a whole nice value in -20..19",
    "boost_nice": "a whole nice value in -20..19",
    "yield_nice": "a whole nice value in -20..19",
    "boost_ms": "a number of milliseconds > 0",
    "interval_ms": "a number of milliseconds > 0",
    "spin_time_us": "a number of microseconds >= 0",
    # paper 000's multiclass schemes
    "fairness_x": "a number > 0",
    "fairness_y": "a number > 0",
    "admission": "true or false",
    "context_switch_us": "a number of microseconds >= 0",
    "sync_ms": "a number of milliseconds >= 0",
    "interrupt_us": "a number of microseconds >= 0",
    "rows": "a whole number in 2..256",
    "gamma_ms": "a number of milliseconds > 0",
    "rt_first_nice": "a whole nice value in -20..19",
    "rt_nice": "a whole nice value in -20..19",
    "borrow_nice": "a whole nice value in -20..19",
    # paper 001's AN / ANNA
    "all_nodes": "'fastest' or 'every'",
    # paper 001's admission-controlled schemes, and the FIFO/EDF baselines among them
    "batch": "'joint' or 'each'",
    "admission_test": "'queue' or 'walk'",
    # paper 004's DYNAMIC and CCS
    "boost_per_message": "a whole number in 0..39",
    "share_l": "a fraction > 0 and < 1",
    "memory_pool": "a fraction > 0 and <= 1 or null",
    "pool_oversize": "'alone' or 'reject'",
}
MPL_NEEDS = {
    "gang": "a whole number of matrix rows in 1..256",
    "paired": "a whole number of matrix rows in 1..256",
}
# Values each kind of parameter must refuse (beside a bound, each takes a value of the wrong type).
BAD = {
    "true or false": [1, "yes", None],
    "a whole number": [0, -1, 1.5, "3", True],
    "a number of milliseconds > 0": [0, -5.0, "100", True, float("nan")],
    "a number of milliseconds >= 0": [-1, "25", float("nan")],
    "a number of microseconds >= 0": [-1, "300"],
    "a percentage >= 0 and <= 100": [-1, 101, "1"],
    "a percentage > 0 and <= 100": [0, 100.5],
    "'fair' or 'best-fit'": ["greedy", 1],
    "a whole nice value in -20..19": [-21, 20, 1.0, "0"],
    "a number > 0": [0, -1.0, "2", True, float("nan")],
    "a whole number in 2..256": [1, 0, 257, 10**8, 1.5, "6", True],
    "a number of milliseconds >= 1": [0, 0.5, 1e-9, -5.0, "100", True, float("nan")],
    "'fastest' or 'every'": ["all", 16, None],
    "'joint' or 'each'": ["together", True],
    "'queue' or 'walk'": ["backfill", 1],
    "a whole number in 0..39": [-1, 40, 1.5, "5", True],
    "a fraction > 0 and < 1": [0, 1, 1.5, -0.1, "0.5", True, float("nan")],
    "a fraction > 0 and <= 1 or null": [0, 1.5, -0.1, "0.5", True, float("nan")],
    "'alone' or 'reject'": ["refuse", "Reject", None, 1],
}


def _needs(sched: str, name: str) -> str:
    return MPL_NEEDS.get(sched, "a whole number of processes per node >= 1") if name == "mpl" else NEEDS[name]


def _shown(v) -> str:
    if v is None:
        return "null"
    return str(v).lower() if isinstance(v, bool) else repr(v)


def _bad_cases():
    for sched in SCHEDULERS:
        cls = registry.get(sched)
        for name, default in cls.all_defaults().items():
            needs = _needs(sched, name)
            kind = "a whole number" if name == "mpl" else needs
            for value in BAD[kind]:
                yield pytest.param(sched, name, value, needs, default, id=f"{sched}-{name}-{value!r}")


@pytest.mark.parametrize(("sched", "name", "value", "needs", "default"), list(_bad_cases()))
def test_every_parameter_refuses_bad_values_with_one_line(sched, name, value, needs, default):
    cls = registry.get(sched)
    with pytest.raises(PolicyConfigError) as exc:
        cls.check_params({name: value})
    assert str(exc.value) == (
        f"scheduler.params.{name}: {sched} needs {needs}, got {value!r} (default {_shown(default)})"
    )
    with pytest.raises(PolicyConfigError):  # the owners build their policies through the same check
        cls.make_global(4, {name: value}, 0)


def test_every_parameter_of_every_scheduler_is_covered_here():
    for sched in SCHEDULERS:
        for name in registry.get(sched).all_defaults():
            assert _needs(sched, name), (sched, name)  # KeyError: a new parameter needs its row in NEEDS


@pytest.mark.parametrize("sched", ["gang", "paired"])
def test_lead_must_be_shorter_than_the_quantum(sched):
    cls = registry.get(sched)
    for lead, quantum in [(100.0, 100), (30, 20.0)]:
        with pytest.raises(PolicyConfigError) as exc:
            cls.check_params({"lead_ms": lead, "quantum_ms": quantum})
        assert str(exc.value) == (
            f"scheduler.params.lead_ms: {sched} plans each slot lead_ms ahead, so it must be shorter than "
            f"quantum_ms ({lead:g} >= {quantum:g}); lower lead_ms"
        )
    with pytest.raises(PolicyConfigError, match="lead_ms"):
        cls.check_params({"quantum_ms": 20})  # the default lead (25 ms) does not fit a 20 ms quantum
    assert cls.check_params({"quantum_ms": 20, "lead_ms": 19.5})["lead_ms"] == 19.5


@pytest.mark.parametrize("sched", ["dcs", "sb", "pb", "pbsb", "cc", "hybrid", "dynamic", "ccs"])
def test_boost_nice_must_be_below_normal_nice(sched):
    cls = registry.get(sched)
    with pytest.raises(PolicyConfigError) as exc:
        cls.check_params({"boost_nice": 5, "normal_nice": 5})
    assert str(exc.value) == (
        f"scheduler.params.boost_nice: {sched} boosts by lowering the nice value, so boost_nice (5) must "
        "be below normal_nice (5); lower boost_nice or raise normal_nice"
    )
    assert cls.check_params({"boost_nice": 4, "normal_nice": 5})["boost_nice"] == 4


def test_yield_nice_must_be_above_normal_nice():
    with pytest.raises(PolicyConfigError) as exc:
        registry.get("sy").check_params({"yield_nice": 0})
    assert str(exc.value) == (
        "scheduler.params.yield_nice: sy yields by raising the nice value, so yield_nice (0) must be above "
        "normal_nice (0); raise yield_nice or lower normal_nice"
    )


@pytest.mark.parametrize("sched", ["local", "dcs", "dynamic", "ccs"])
def test_pool_oversize_reject_needs_a_memory_pool(sched):
    # Without a pool there is no M_D: 'reject' would admit every job and say nothing.
    with pytest.raises(PolicyConfigError) as exc:
        registry.get(sched).check_params({"pool_oversize": "reject"})
    assert str(exc.value) == (
        f"scheduler.params.pool_oversize: {sched} rejects a job larger than M_D = memory_pool x the "
        "smallest node's memory, so it needs memory_pool; set memory_pool or remove pool_oversize"
    )
    assert (
        registry.get(sched).check_params({"pool_oversize": "reject", "memory_pool": 0.5})["pool_oversize"]
        == "reject"
    )


def test_several_problems_one_line_each_unknown_names_listing_the_known_ones():
    with pytest.raises(PolicyConfigError) as exc:
        registry.get("gang").check_params({"mpl": 0, "quantum": 5, "alternate": "no", "lead": 1})
    assert exc.value.lines == (
        "scheduler.params: unknown parameter(s) quantum, lead for scheduler 'gang'; did you mean "
        "'quantum_ms' for 'quantum', 'lead_ms' for 'lead'? known parameters: alternate, lead_ms, "
        "memory_aware, mpl, packing, quantum_ms",
        "scheduler.params.mpl: gang needs a whole number of matrix rows in 1..256, got 0 (default 3)",
        "scheduler.params.alternate: gang needs true or false, got 'no' (default true)",
    )
    with pytest.raises(PolicyConfigError) as exc:
        registry.get("batch").check_params({"mpl": 2})
    assert str(exc.value) == (
        "scheduler.params: unknown parameter(s) mpl for scheduler 'batch'; known parameters: backfill, "
        "memory_aware, packing"
    )


# --------------------------------------------------------------------------------------------------------
# Good values


GOOD = {
    "memory_aware": False,
    "backfill": True,
    "packing": False,
    "alternate": False,
    "mpl": 1,
    "quantum_ms": 50,  # an int where a float goes is fine
    "lead_ms": 0,
    "margin_pct": 0,
    "band_pct": 100,
    "sharp_change_pct": 100.0,
    "matching": "best-fit",
    "normal_nice": 19,
    "boost_nice": -20,
    "yield_nice": 19,
    "boost_ms": 0.5,
    "interval_ms": 2,
    "spin_time_us": 0,
    "fairness_x": 3,
    "fairness_y": 1.5,
    "admission": True,
    "context_switch_us": 0,
    "sync_ms": 0.5,
    "interrupt_us": 10,
    "rows": 4,
    "gamma_ms": 300,
    "rt_first_nice": -19,
    "rt_nice": -5,
    "borrow_nice": 15,
    "all_nodes": "every",
    "batch": "each",
    "admission_test": "walk",
    "boost_per_message": 0,
    "share_l": 0.2,
    "memory_pool": 0.5,
    "pool_oversize": "reject",
}


@pytest.mark.parametrize("sched", SCHEDULERS)
def test_good_values_reach_the_policies_as_the_schedulers_typed_model(sched):
    cls = registry.get(sched)
    assert cls.check_params({}) == cls.all_defaults() == dict(cls.defaults)
    given = {k: GOOD[k] for k in cls.all_defaults()}
    if sched == "sy":
        given["normal_nice"] = 0  # yield_nice 19 must stay above it
    checked = cls.check_params(given)
    assert checked == given
    for name, info in cls.Params.model_fields.items():  # numbers come out as the type declared
        assert type(checked[name]) is info.annotation or info.annotation not in (int, float, bool)
    policy = cls.make_global(4, given, 0)
    assert type(policy.params) is cls.Params and policy.params.model_dump() == checked
    local = cls.make_local(0, given, 0)
    assert type(local.params) is cls.Params and local.params.model_dump() == checked
    for name, value in checked.items():  # each an attribute, of the type the dict shows
        assert getattr(policy.params, name) == value and type(getattr(policy.params, name)) is type(value)


def test_the_shared_groups_are_defined_once():
    from testbed.schedulers.cosched import BoostParams, WakeParams
    from testbed.schedulers.local import NlsParams
    from testbed.schedulers.placement import MemoryAwareParams

    for sched in SCHEDULERS:
        params = registry.get(sched).Params
        assert issubclass(params, MemoryAwareParams)
        if "normal_nice" in params.model_fields and "boost_nice" in params.model_fields:
            assert issubclass(params, BoostParams)
        if "boost_ms" in params.model_fields:
            assert issubclass(params, WakeParams)
        if registry.get(sched).global_policy is LocalGlobal:
            assert issubclass(params, NlsParams)


# --------------------------------------------------------------------------------------------------------
# Schedulers declared otherwise


def test_a_scheduler_with_plain_defaults_gets_its_names_checked():
    class Plain(Scheduler):
        name = "plain"
        summary = "test"
        global_policy = LocalGlobal
        defaults = {"mpl": 2, "packing": True, "memory_aware": False}

    assert Plain.all_defaults() == {"mpl": 2, "packing": True, "memory_aware": False}
    assert Plain.check_params({"mpl": 5}) == {"mpl": 5, "packing": True, "memory_aware": False}
    with pytest.raises(PolicyConfigError, match=r"unknown parameter\(s\) mlp .* did you mean 'mpl'"):
        Plain.check_params({"mlp": 5})
    # Its policies read the values as attributes, and by name as when policies got a dict (third-party
    # policies written that way); the memory check follows the parameter though the model is untyped.
    policy = Plain.make_global(4, {"mpl": 5}, 0)
    assert policy.params.mpl == 5 and policy.params["mpl"] == 5 and policy.params.get("mpl") == 5
    assert "packing" in policy.params and "nonsense" not in policy.params
    assert policy.params.get("nonsense", 7) == 7
    with pytest.raises(KeyError):
        policy.params["nonsense"]
    assert policy.mem.aware is False


def test_a_policy_built_directly_from_a_mapping_gets_those_values_unchecked():
    policy = LocalGlobal(4, {"mpl": 2, "packing": False}, 0)
    assert policy.params.mpl == 2 and policy.params["packing"] is False
    assert policy.mem.aware is True  # no memory_aware given: the check stays on
    with pytest.raises(TypeError, match="PolicyParams model or a mapping"):
        LocalGlobal(4, [("mpl", 2)], 0)


def test_a_scheduler_extends_a_model_and_its_rules_still_hold():
    base = registry.get("gang")

    class Wider(base):
        name = "wider"

        class Params(base.Params):
            width: int = param(2, "test", ge=2)

    assert Wider.defaults["width"] == 2 and Wider.defaults["quantum_ms"] == 100.0
    with pytest.raises(PolicyConfigError) as exc:
        Wider.check_params({"width": 1})
    assert str(exc.value) == "scheduler.params.width: wider needs a whole number >= 2, got 1 (default 2)"
    with pytest.raises(PolicyConfigError, match="lead_ms"):
        Wider.check_params({"lead_ms": 200})


def test_declaring_both_a_model_and_defaults_is_refused():
    with pytest.raises(TypeError, match="Params or defaults"):

        class Both(Scheduler):
            name = "both"
            Params = PolicyParams
            defaults = {"x": 1}


# --------------------------------------------------------------------------------------------------------
# The scenario and the command line


MINI = {"cluster": {"nodes": 4}, "workload": {"jobs": [{"size": 2}]}}


def test_scenario_errors_give_one_line_per_bad_parameter():
    doc = {**MINI, "scheduler": {"name": "paired", "params": {"mpl": 0, "matching": "greedy"}}}
    with pytest.raises(ScenarioError) as exc:
        load(doc=doc)
    assert str(exc.value) == (
        "invalid scenario: 2 problems:\n"
        "  scheduler.params.mpl: paired needs a whole number of matrix rows in 1..256, got 0 (default 3)\n"
        "  scheduler.params.matching: paired needs 'fair' or 'best-fit', got 'greedy' (default 'fair')"
    )
    with pytest.raises(ScenarioError, match="scheduler.params.quantum_ms: gang needs"):
        load(doc={**MINI, "scheduler": {"name": "gang"}}, overrides=["scheduler.params.quantum_ms=-1"])


def test_a_sweep_names_the_variant_and_each_bad_parameter():
    doc = {
        **MINI,
        "scheduler": {"name": "gang"},
        "sweep": [{"name": "v", "set": {"scheduler.params.mpl": 0, "scheduler.params.lead_ms": -1}}],
    }
    with pytest.raises(ScenarioError) as exc:
        load(doc=doc)
    lines = str(exc.value).splitlines()
    assert lines[0] == "invalid sweep: 2 problems:"
    assert lines[1:] == [
        "  variant 'v': scheduler.params.mpl: gang needs a whole number of matrix rows in 1..256, got 0 "
        "(default 3)",
        "  variant 'v': scheduler.params.lead_ms: gang needs a number of milliseconds >= 0, got -1 "
        "(default 25.0)",
    ]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, timeout=120
    )


def test_validate_exits_2_naming_the_bad_parameter(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**MINI, "scheduler": {"name": "local", "params": {"mpl": 0}}}))
    p = _cli("validate", str(bad))
    assert p.returncode == 2, p.stdout + p.stderr
    named = [line for line in p.stderr.splitlines() if "scheduler.params" in line]
    # One problem: one line (the issue-12 format: "error: invalid scenario: <the problem>").
    assert named == [
        "error: invalid scenario: scheduler.params.mpl: "
        "local needs a whole number of processes per node >= 1, got 0 (default 3)"
    ]
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({**MINI, "scheduler": {"name": "local", "params": {"mpl": 1}}}))
    p = _cli("validate", str(good))
    assert p.returncode == 0, p.stdout + p.stderr
    assert yaml.safe_load(p.stdout)["scheduler"]["params"] == {"mpl": 1}


@pytest.mark.parametrize(
    ("params", "expect"),
    [
        (
            {"memory_pool": 0.5, "pool_oversize": "refuse"},
            "scheduler.params.pool_oversize: ccs needs 'alone' or 'reject', got 'refuse' (default 'alone')",
        ),
        (
            {"pool_oversize": "reject"},
            "scheduler.params.pool_oversize: ccs rejects a job larger than M_D = memory_pool x the smallest "
            "node's memory, so it needs memory_pool; set memory_pool or remove pool_oversize",
        ),
    ],
)
def test_validate_exits_2_on_a_bad_pool_oversize_in_one_line(tmp_path: Path, params, expect):
    doc = {**MINI, "cluster": {"nodes": 4, "memory_mb": 128}}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**doc, "scheduler": {"name": "ccs", "params": params}}))
    p = _cli("validate", str(bad))
    assert p.returncode == 2, p.stdout + p.stderr
    assert [line for line in p.stderr.splitlines() if "pool_oversize" in line] == [
        f"error: invalid scenario: {expect}"
    ]
    # The same value set by a sweep variant is refused too, naming the variant.
    variant = {"name": "w", "set": {"scheduler.params": params}}
    swept = {**doc, "scheduler": {"name": "ccs"}, "sweep": [variant]}
    bad.write_text(yaml.safe_dump(swept))
    p = _cli("validate", str(bad))
    assert p.returncode == 2 and "variant 'w': scheduler.params.pool_oversize" in p.stderr, p.stderr


def test_schedulers_command_shows_each_parameter_with_its_default_and_meaning():
    p = _cli("schedulers", "paired")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("paired: ")
    rows = {line.split()[0]: line for line in lines[2:]}
    assert set(rows) == set(registry.get("paired").all_defaults())
    assert rows["band_pct"].split()[1] == "20.0"
    assert "a percentage > 0 and <= 100" in rows["band_pct"] and "slot homogeneity" in rows["band_pct"]
    p = _cli("schedulers", "fifo")
    assert p.returncode == 2 and "unknown scheduler 'fifo'" in p.stderr
