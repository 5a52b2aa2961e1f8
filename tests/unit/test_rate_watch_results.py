"""The rate watch in the results (testbed/results/summary.py rate_watch, rate_warning; the table, the
report): each node's worst window, the run's worst, one warning line over 5 %, nothing where no node was
watched (the simulator, whose rate is exact)."""

from __future__ import annotations

import io

from rich.console import Console

from testbed.core import events as ev
from testbed.results import report
from testbed.results import summary as results

FACTS = results.RunFacts(2, 0.5, 1, 100.0, 50.0, 2.0, "cgroup-v1", "ray", "gang")


def _window(node, t, error):
    return {"t": t, "kind": ev.RATE_WINDOW, "node": node, "w": 1.0, "error": error}


def _table(s: dict) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(results.table([s]))
    return out.getvalue()


def test_each_nodes_worst_window_and_the_runs_worst():
    events = [
        _window(0, 1.0, 0.01),
        _window(0, 2.0, 0.12),
        _window(0, 3.0, None),  # not judged: not counted, not the worst
        _window(1, 1.0, -0.002),
        _window(1, 2.0, 0.03),
    ]
    s = results.summarize(events, FACTS)
    assert s[results.RATE_WINDOW_ERROR_MAX] == 0.12
    assert s[results.RATE_WINDOW_WORST] == {
        "0": {"t": 2.0, "error": 0.12, "windows": 2, "over": 1},
        "1": {"t": 2.0, "error": 0.03, "windows": 2, "over": 0},
    }
    line = results.rate_warning(s)
    assert line.startswith("node 0 fell 12.0% below its CPU rate in its worst window at t=2.0 s; 1 nodes "), (
        line
    )
    assert "in 1 of the run's 4 windows" in line, line
    rows = [r for r in _table(s).splitlines() if "CPU-rate error, worst window" in r]
    assert len(rows) == 1 and "0.120" in rows[0], rows
    texts = [t for t, serious in report.run_warnings(s) if serious]
    assert any(t.startswith("Node 0 fell 12.0%") for t in texts), texts


def test_no_warning_at_or_below_five_percent_and_a_count_of_the_others():
    quiet = results.summarize([_window(0, 1.0, 0.05), _window(1, 1.0, 0.02)], FACTS)
    assert results.rate_warning(quiet) is None
    assert not [t for t, _ in report.run_warnings(quiet) if "CPU rate in its worst window" in t]
    two = results.summarize([_window(0, 1.0, 0.2), _window(1, 4.0, 0.3)], FACTS)
    line = results.rate_warning(two)
    assert line.startswith("node 1 fell 30.0%") and "2 nodes fell more than 5%" in line, line


def test_absent_where_no_node_was_watched():
    """The simulator (its rate is exact) and envelope none: no figure at all, not a zero."""
    s = results.summarize([], FACTS)
    assert results.RATE_WINDOW_ERROR_MAX not in s and results.RATE_WINDOW_WORST not in s
    assert results.rate_warning(s) is None
    # Watched, but never busy enough to judge: the nodes are listed, the run's figure is None.
    s = results.summarize([_window(0, 1.0, None)], FACTS)
    assert s[results.RATE_WINDOW_ERROR_MAX] is None
    assert s[results.RATE_WINDOW_WORST] == {"0": {"t": None, "error": None, "windows": 0, "over": 0}}
