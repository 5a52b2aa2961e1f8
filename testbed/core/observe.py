"""Observer hooks: what a node agent or the coordinator lets others watch, without knowing who watches.

A component hands every event it logs to its observers (testbed/core/events.py, ``EventWriter.subscribe``) and
calls the hooks below for the few facts no event carries. ``monitoring/`` subscribes its Prometheus
metrics this way (monitoring/observers.py); anything else that wants to watch a run live (a progress
feed, a test) can too. Hooks run on the component's loop thread and must return quickly: they buffer, and
do their slower work in :meth:`tick`, which the component calls every :attr:`period_s` real seconds.
"""

from __future__ import annotations

from typing import Any


class Observer:
    """Every hook is optional (a no-op here)."""

    #: Real seconds between :meth:`tick` calls; None: never ticked.
    period_s: float | None = None

    def begin(self) -> None:
        """The run's clock has started."""

    def event(self, rec: dict[str, Any]) -> None:
        """An event the component logged (the record as written: t, kind and its fields)."""

    def decided(self, seconds: float) -> None:
        """One call of the component's policy took ``seconds`` of real time."""

    def continued(self, n: int) -> None:
        """A node's local decision continued ``n`` stopped processes."""

    def dispatched(self, slot: int, nodes: list[int]) -> None:
        """The coordinator sent slot ``slot``'s plan to ``nodes``."""

    def reported(self, msg: Any) -> None:
        """A node's report reached the coordinator (testbed/core/messages.py)."""

    def tick(self) -> None:
        """Periodic work: push buffered observations wherever they go."""

    def close(self) -> None:
        """The component is shutting down."""
