"""Scheduling policies: pure, deterministic, behind the interface in :mod:`.base` (docs/architecture.md,
"Policy and mechanism")."""
