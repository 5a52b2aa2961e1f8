"""Scheduling policies: pure, deterministic, behind the interface in :mod:`.base` (DESIGN.md, decision 1)."""
