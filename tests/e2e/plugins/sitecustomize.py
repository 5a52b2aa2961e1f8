"""Test-only: makes chosen workers of a run misbehave, for the fault tests (tests/e2e/test_faults.py).

Every Python interpreter started with this folder on PYTHONPATH imports this module at start-up. It acts
only in a worker process (TB_JOB and TB_RANK set by the node agent) of a job named in TB_TEST_MISBEHAVE
(``job=behaviour[,job=behaviour...]``), and otherwise does nothing. A worker started by exec acts at its
interpreter's start; one forked from its node's fork server (whose interpreter started long before, with
no TB_JOB) acts when the synthetic program's ``run`` is called, which this module wraps in every child the
server forks.

* ``fork``: the worker forks a child that computes until killed (a worker that starts helpers);
* ``ignore-term``: the worker ignores SIGTERM and SIGINT;
* ``hog-memory``: the worker allocates and touches TB_TEST_HOG_MB MiB (default 512) before it starts.

The worker itself is the real synthetic program: the misbehaviour is added on top of it.
"""

from __future__ import annotations

import os
import signal


def _plan() -> str | None:
    job = os.environ.get("TB_JOB")
    if job is None or "TB_RANK" not in os.environ:
        return None
    for item in os.environ.get("TB_TEST_MISBEHAVE", "").split(","):
        name, _, what = item.partition("=")
        if name == job:
            return what
    return None


def _misbehave(what: str) -> None:
    if what == "fork":
        if os.fork() == 0:
            # The child: a helper that outlives its parent unless someone kills it.
            while True:
                sum(i * i for i in range(10_000))
    elif what == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    elif what == "hog-memory":
        mb = int(os.environ.get("TB_TEST_HOG_MB", "512"))
        hog = bytearray(mb << 20)
        for i in range(0, len(hog), 4096):
            hog[i] = 1
        globals()["_hog"] = hog  # kept alive while the worker runs


def _wrap_synthetic_run() -> None:
    import importlib
    import sys

    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is None or spec.name != "testbed.emulator.mechanism.forkserver":
        return  # only in a fork server's children
    mod = importlib.import_module("testbed.apps.synthetic")
    if getattr(mod.Synthetic.run, "_misbehaves", False):
        return
    plain = mod.Synthetic.run.__func__

    def run(cls, cfg, ctx):
        what = _plan()
        if what:
            _misbehave(what)
        return plain(cls, cfg, ctx)

    run._misbehaves = True
    mod.Synthetic.run = classmethod(run)


_what = _plan()
if _what:
    _misbehave(_what)
else:
    os.register_at_fork(after_in_child=_wrap_synthetic_run)
