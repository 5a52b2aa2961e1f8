"""Paper 001's task generator (testbed/scenario/divisible.py), the bad inputs of a divisible workload, and
the results it feeds (finish_spread_s, reject and miss ratios) through the simulator."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from testbed.schedulers.divisible import Load, exec_time, fastest

from testbed import runner
from testbed.scenario import ScenarioError, load, workload

BASE = {"cluster": {"nodes": 8}, "scheduler": {"name": "mcdf"}}


def scn(**divisible):
    return load(
        doc={**BASE, "workload": {"seed": 3, "divisible": {"arrivals": 400, "load": 0.5, **divisible}}}
    )


def test_tasks_follow_the_papers_distributions():
    jobs = workload.build(scn(setup_link=2, setup_compute=3))
    arrivals = Counter(j.spec.submit_time for j in jobs)
    assert len(arrivals) == 400 and set(arrivals.values()) <= set(range(1, 11))
    assert len(set(arrivals.values())) == 10  # every count from 1 to 10 occurs in 400 arrivals
    for j in jobs:
        a, s, d = j.app, j.spec, j.spec.divisible
        assert a.sigma > 0 and d.data_size == a.sigma and s.moldable and s.size == 8
        ld = Load(a.sigma, 1, 1, 2, 3)
        assert exec_time(ld, fastest(ld, 8)) <= a.deadline_s <= exec_time(ld, 1)
        assert d.deadline == a.deadline_s and a.arrival_s == s.submit_time
        assert (d.setup_link, d.setup_compute) == (2, 3)
    # sigma ~ Normal(100, 100) kept positive: the mean of the truncated normal is about 128.8.
    sig = [j.app.sigma for j in jobs]
    assert 115 < sum(sig) / len(sig) < 145
    assert workload.build(scn(setup_link=2, setup_compute=3)) == jobs  # the same seed, the same tasks


@pytest.mark.parametrize("counts", ["tasks", "arrivals"])
def test_offered_load(counts):
    # Load = sum of the shortest execution times / the time they arrive over. Counting tasks, that is the
    # nominal load; counting arrivals (the paper as written), the nominal load times the tasks per arrival.
    jobs = workload.build(scn(arrivals=3000, load=0.4, load_counts=counts))
    short = sum(exec_time(Load(j.app.sigma, 1, 1), 8) for j in jobs)
    span = jobs[-1].spec.submit_time - jobs[0].spec.submit_time
    per_arrival = len(jobs) / 3000
    expect = 0.4 if counts == "tasks" else 0.4 * per_arrival
    # 3000 exponential gaps: their mean is within 2 % (one standard deviation) of the rule's; 8 % is 4.
    assert short / span == pytest.approx(expect, rel=0.08)


@pytest.mark.parametrize(
    ("where", "value", "field"),
    [
        ("app", {"sigma": 0, "deadline_s": 10}, "sigma"),
        ("app", {"sigma": 10, "deadline_s": 0}, "deadline_s"),
        ("app", {"sigma": 10, "deadline_s": 5, "cms": 0}, "cms"),
        ("app", {"sigma": 10, "deadline_s": 5, "cps": -1}, "cps"),
        ("divisible", {"cms": 0}, "workload.divisible.cms"),
        ("divisible", {"cps": 0}, "workload.divisible.cps"),
        ("divisible", {"sigma": {"mean": 0}}, "workload.divisible.sigma.mean"),
        ("divisible", {"nodes": 9}, "workload.divisible.nodes"),
    ],
)
def test_bad_input_names_the_field(where, value, field):
    if where == "app":
        doc = {**BASE, "workload": {"jobs": [{"size": 4, "app": {"kind": "divisible", **value}}]}}
    else:
        doc = {**BASE, "workload": {"divisible": {"arrivals": 2, "load": 0.5, **value}}}
    with pytest.raises(ScenarioError) as e:
        load(doc=doc)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and field in msg, msg


def _events(out):
    return [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]


def test_a_task_that_can_never_meet_its_deadline_is_rejected_at_arrival(tmp_path):
    # sigma 100, Cms = Cps = 1 on 8 nodes: the shortest execution is 100 / (1 - 2^-8) = 100.4 s > D = 50.
    app = {"kind": "divisible", "sigma": 100, "deadline_s": 50}
    s = load(doc={**BASE, "workload": {"jobs": [{"id": "late", "size": 8, "app": app}]}})
    [summary] = runner.run(s, "sim", tmp_path)
    assert summary["reject_ratio"] == 1.0 and summary["jobs_not_as_planned"] == []  # a policy's decision
    [rej] = [e for e in _events(tmp_path) if e["kind"] == "job_rejected"]
    assert (
        rej["job"] == "late"
        and "can never meet its deadline" in rej["reason"]
        and "100.392 s on 8 node(s)" in rej["reason"]
    )


@pytest.mark.parametrize("name", ["mcdf", "fifo-anna"])
def test_summary_of_a_simulated_divisible_run(tmp_path, name):
    doc = {
        **BASE,
        "scheduler": {"name": name},
        "workload": {"seed": 1, "divisible": {"arrivals": 30, "load": 0.5}},
    }
    [s] = runner.run(load(doc=doc), "sim", tmp_path)
    assert s["finish_spread_s"] == pytest.approx(0.0, abs=1e-6)  # the OPR: all finish together
    assert "deadline_miss_ratio" in s and "reject_ratio" in s
    assert not any(k.startswith("finish_s_per_s") for k in s)  # a time is not a progress count
    if name == "mcdf":
        assert s["deadline_miss_ratio"] == 0.0 < s["reject_ratio"]  # admitted tasks meet their deadlines
    else:
        assert s["reject_ratio"] == 0.0 < s["deadline_miss_ratio"]  # every task runs; some late
