"""Test-only plug-ins for the fault tests (tests/e2e/test_faults.py). Not part of the testbed: the tests
put this folder on PYTHONPATH and register the scheduler through the ``testbed.schedulers`` entry-point
group, as a third party registers a policy (conftest.plugin_env).

``faulty``: gang scheduling whose global policy (``fault: global``, at its first tick at or after
``after_s`` emulated seconds) or local policy on node ``node`` (``fault: local``, at its first event at or
after ``after_s``) raises, so a test can watch what a policy error does to a run."""

from __future__ import annotations

from testbed.schedulers.gang import Gang, GangGlobal, GangLocal


class InjectedFault(RuntimeError):
    pass


class _Global(GangGlobal):
    def tick(self, now):
        if self.params["fault"] == "global" and now >= self.params["after_s"]:
            raise InjectedFault(f"injected global-policy fault at t={now:.3f}")
        return super().tick(now)


class _Local(GangLocal):
    def on_event(self, now, event):
        p = self.params
        if p["fault"] == "local" and self.node == p["node"] and now >= p["after_s"]:
            raise InjectedFault(f"injected local-policy fault on node {self.node} at t={now:.3f}")
        return super().on_event(now, event)


class FaultyGang(Gang):
    name = "faulty"
    summary = "gang scheduling that raises on purpose (fault tests only)"
    global_policy = _Global
    local_policy = _Local
    defaults = {**Gang.defaults, "fault": "global", "after_s": 0.5, "node": 0}
