"""The Ray actor classes. Kept apart from ``testbed.cluster`` so an actor process imports only what a node
agent or the coordinator needs (start-up time is per actor, 16+ of them on 2 cores).

Node agents live ``cluster.nodes_per_process`` to an actor process (:class:`AgentHost`): an idle Ray actor
process costs CPU of its own (its core-worker threads poll; about 0.006 core each here), so one process
per node put the control plane over 5 % of a 2-core host before it did any work. The agents of one
process are independent (each its own loop thread, NIC, spawner and fork server) and share the GIL;
each agent's timer thread runs SCHED_FIFO, so a slot switch is prompt on every one of them.
"""

from __future__ import annotations

import concurrent.futures as cf
import os

from testbed.agent import NodeAgent
from testbed.coordinator import Coordinator, NodeProxy


class AgentHost:
    """Several NodeAgents (the nodes of ``cfgs``) in one Ray actor process; the coordinator reaches each
    through :meth:`call`, and process exits go to the coordinator actor's handle."""

    def __init__(self, cfgs: list[dict]) -> None:
        # In parallel: an agent's start waits for its fork server to import the worker modules.
        with cf.ThreadPoolExecutor(len(cfgs), thread_name_prefix="agent-init") as pool:
            futs = [pool.submit(NodeAgent, cfg) for cfg in cfgs]
        agents, errors = [], []
        for f in futs:
            try:
                agents.append(f.result())
            except Exception as exc:  # noqa: BLE001 - the others are shut down, then it is raised
                errors.append(exc)
        if errors:
            for a in agents:
                try:
                    a.shutdown()
                except Exception:  # noqa: BLE001 - the janitor sweeps what is left
                    pass
            raise errors[0]
        self.agents = {a.node: a for a in agents}

    def _each(self, fn) -> list:
        """fn(agent) for every agent of this process at once, results in node order."""
        agents = [self.agents[n] for n in sorted(self.agents)]
        if len(agents) == 1:
            return [fn(agents[0])]
        with cf.ThreadPoolExecutor(len(agents)) as pool:
            return list(pool.map(fn, agents))

    def call(self, node: int, method: str, *args):
        return getattr(self.agents[node], method)(*args)

    def pid(self) -> int:
        return os.getpid()

    def info(self) -> list[dict]:
        return self._each(lambda a: a.info())

    def probe(self, seconds: float, start_at: float) -> list[dict]:
        return self._each(lambda a: a.probe(seconds, start_at))

    def record_probe(self, results: list[dict]) -> None:
        for r in results:
            self.agents[r["node"]].record_probe(r)

    def set_run(self, t0: float, coordinator=None) -> None:
        notify = None
        if coordinator is not None:

            def notify(kind, payload, _h=coordinator):
                _h.on_node_event.remote(kind, payload)

        for a in self.agents.values():
            a.set_run(t0, notify)

    def shutdown(self) -> list[dict]:
        return self._each(lambda a: a.shutdown())


class RayProxy(NodeProxy):
    """Node ``node`` of the AgentHost actor ``handle``."""

    def __init__(self, handle, node: int) -> None:
        self.handle = handle
        self.node = node

    def call(self, method: str, *args):
        return self.handle.call.remote(self.node, method, *args).future()


class CoordinatorActor(Coordinator):
    def __init__(self, *args, handles=(), **kwargs):
        """``handles``: per node, in node order, (AgentHost handle, node)."""
        super().__init__(*args, proxies=[RayProxy(h, n) for h, n in handles], **kwargs)
