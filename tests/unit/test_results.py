"""How a run's jobs ended against what the scenario planned (the exit status of `testbed run`)."""

from __future__ import annotations

from testbed import events as ev
from testbed import results


def _row(job, state, reason=""):
    return {"job_id": job, "final_state": state, "reason": reason}


def test_planned_ends_are_completed_rejected_and_killed_by_the_duration():
    rows = [
        _row("a", results.COMPLETED),
        _row("b", results.REJECTED, "size 9 above 8 nodes"),
        _row("c", results.KILLED, ev.DURATION_REACHED),
        _row("d", results.KILLED, f"{ev.DURATION_REACHED} before it started"),
        _row("e", results.KILLED, f"{ev.POLICY_KILL}: over budget"),
        _row("f", results.FAILED, f"node 3 went down ({ev.SCRIPTED_FAULT})"),
    ]
    assert results.unplanned(rows) == []


def test_errors_interrupts_and_jobs_left_queued_are_not_planned():
    rows = [
        _row("a", results.FAILED, "rank 6 on node 6 failed: [Errno 2] No such file"),
        _row("b", results.KILLED, "interrupted (Ctrl-C)"),
        _row("c", results.NOT_STARTED),
        _row("d", results.COMPLETED),
        _row("e", results.FAILED, "node 3 went down (its agent died (ActorDiedError))"),
    ]
    bad = results.unplanned(rows)
    assert [b["job"] for b in bad] == ["a", "b", "c", "e"]
    assert [results.unplanned_line(b) for b in bad] == [
        "job a failed: rank 6 on node 6 failed: [Errno 2] No such file",
        "job b was killed: interrupted (Ctrl-C)",
        "job c never started",
        "job e failed: node 3 went down (its agent died (ActorDiedError))",
    ]
