"""Shared fixtures for tests on real processes and cgroups."""

from __future__ import annotations

import uuid

import pytest

from testbed.janitor import cleanup_run


@pytest.fixture
def run_id():
    """A fresh run id; whatever the test left under it (processes, cgroups) is swept afterwards."""
    rid = f"test-{uuid.uuid4().hex[:10]}"
    yield rid
    report = cleanup_run(rid)
    assert not report["errors"], report
