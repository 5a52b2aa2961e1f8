"""Ctrl-C during a run (testbed/core/interrupts.py): the first one stops the run where the backend lets it
through, and one landing anywhere after (the teardown, the results, the gap between them) waits for the
results to be written. Real signals to this process, and the real simulator."""

from __future__ import annotations

import os
import signal

import pytest

from testbed import runner
from testbed.core.interrupts import interruptible, interrupts_deferred
from testbed.results import summary as results
from testbed.scenario import load
from testbed.sim import Simulation

TINY = {
    "name": "tiny",
    "cluster": {"nodes": 2},
    "workload": {"jobs": [{"id": f"j{i}", "size": 1, "app": {"iterations": 50}} for i in range(4)]},
}


def _ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_the_first_ctrl_c_goes_through_where_the_run_is_interruptible_later_ones_wait():
    order = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_deferred():
            _ctrl_c()  # before the run may be stopped: held
            order.append("held")
            try:
                with interruptible():  # ... and raised as it starts
                    order.append("never")
            except KeyboardInterrupt:
                order.append("stopped")
            try:
                with interruptible():
                    _ctrl_c()
                    order.append("never")
            except KeyboardInterrupt:
                order.append("stopped again")
                _ctrl_c()  # in the teardown: held to the end
                with interrupts_deferred():  # a nested block leaves the raising to the outer one
                    _ctrl_c()
                order.append("teardown done")
    assert order == ["held", "stopped", "stopped again", "teardown done"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


@pytest.mark.parametrize("where", ["after the backend", "in the results"])
def test_a_ctrl_c_after_the_run_waits_for_its_results(tmp_path, monkeypatch, where):
    # The window that lost a run's results: a Ctrl-C landing after the backend had handled the first one
    # (its teardown done) and before the results were being written, or while they were.
    scn = load(doc=TINY)
    run_scenario, write = Simulation.run_scenario, results.write

    def backend_then_ctrl_c(*args, **kwargs):
        outcome = run_scenario(*args, **kwargs)
        _ctrl_c()
        return outcome

    def write_after_ctrl_c(*args, **kwargs):
        _ctrl_c()
        return write(*args, **kwargs)

    if where == "after the backend":
        monkeypatch.setattr(Simulation, "run_scenario", backend_then_ctrl_c)
    else:
        monkeypatch.setattr(results, "write", write_after_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        runner.run_once(scn, "sim", tmp_path / "out")
    assert (tmp_path / "out" / "jobs.csv").read_text().count("\n") == 5  # a header and 4 jobs
    assert (tmp_path / "out" / "summary.json").exists()
