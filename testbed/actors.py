"""The Ray actor classes. Kept apart from ``testbed.cluster`` so an actor process imports only what a node
agent or the coordinator needs (start-up time is per actor, 16+ of them on 2 cores)."""

from __future__ import annotations

from testbed.agent import NodeAgent
from testbed.coordinator import Coordinator, NodeProxy


class AgentActor(NodeAgent):
    """NodeAgent as a Ray actor: process exits are reported to the coordinator actor's handle."""

    def set_run(self, t0, coordinator=None):  # type: ignore[override]
        notify = None
        if coordinator is not None:

            def notify(kind, payload, _h=coordinator):
                _h.on_node_event.remote(kind, payload)

        return super().set_run(t0, notify)


class RayProxy(NodeProxy):
    def __init__(self, handle) -> None:
        self.handle = handle

    def call(self, method: str, *args):
        return getattr(self.handle, method).remote(*args).future()


class CoordinatorActor(Coordinator):
    def __init__(self, *args, handles=(), **kwargs):
        super().__init__(*args, proxies=[RayProxy(h) for h in handles], **kwargs)
