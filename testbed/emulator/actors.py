"""The Ray actor classes. Kept apart from ``testbed.emulator.backend`` so an actor process imports only
what a node
agent or the coordinator needs (start-up time is per actor, 16+ of them on 2 cores).

Node agents live ``cluster.nodes_per_process`` to an actor process (:class:`AgentHost`): an idle Ray actor
process costs CPU of its own (its core-worker threads poll; about 0.006 core each here), so one process
per node put the control plane over 5 % of a 2-core host before it did any work. The agents of one
process are independent (each its own loop thread, NIC, spawner and fork server) and share the GIL;
each agent's timer thread runs SCHED_FIFO, so a slot switch is prompt on every one of them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import dataclasses
import os
import shutil

import ray  # only in a Ray actor

from testbed.core.clock import localize
from testbed.emulator.agent import NodeAgent, NodeConfig
from testbed.emulator.control import BATCHED, NodeCommand, execute
from testbed.emulator.coordinator import Coordinator

#: What :meth:`AgentHost.collect` leaves behind: the workers' scratch files (``TB_IO_DIR``), not results.
_NOT_COLLECTED = ("io",)


#: An address in a NodeConfig (the NIC's, the exporter's) that means "this host's, as the other hosts of a
#: joined Ray cluster reach it": only the actor knows which host it landed on (cluster.py).
AT_RAY_NODE = "ray-node"


def _at_host(cfg: NodeConfig) -> NodeConfig:
    """``cfg`` with :data:`AT_RAY_NODE` replaced by this host's Ray address."""
    mon = cfg.monitoring or {}
    if AT_RAY_NODE not in (cfg.nic_host, mon.get("host")):
        return cfg

    ip = ray.util.get_node_ip_address()
    return dataclasses.replace(
        cfg,
        nic_host=ip if cfg.nic_host == AT_RAY_NODE else cfg.nic_host,
        monitoring={**mon, "host": ip} if mon.get("host") == AT_RAY_NODE else cfg.monitoring,
    )


class AgentHost:
    """Several NodeAgents (the nodes of ``cfgs``) in one Ray actor process; the coordinator's commands
    reach each through :meth:`run` / :meth:`run_many`, and process exits go to the coordinator actor's
    handle."""

    def __init__(self, cfgs: list[NodeConfig]) -> None:
        cfgs = [_at_host(c) for c in cfgs]
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
        self._pool = cf.ThreadPoolExecutor(len(agents), thread_name_prefix="agent-calls")

    def _each(self, fn) -> list:
        """fn(agent) for every agent of this process at once, results in node order."""
        agents = [self.agents[n] for n in sorted(self.agents)]
        if len(agents) == 1:
            return [fn(agents[0])]
        with cf.ThreadPoolExecutor(len(agents)) as pool:
            return list(pool.map(fn, agents))

    def run(self, node: int, cmd: NodeCommand):
        return execute(self.agents[node], cmd)

    def run_many(self, cmds: list[tuple[int, NodeCommand]]) -> list[tuple[bool, object]]:
        """Several commands in one Ray call (a job's ranks on this process's nodes, a slot's switches):
        each node's in order, the nodes' side by side (a rank's start waits for its fork). Per command,
        (True, result) or (False, the exception)."""
        results: list = [None] * len(cmds)
        by_node: dict[int, list] = {}
        for i, (node, cmd) in enumerate(cmds):
            by_node.setdefault(node, []).append((i, cmd))

        def run(item):
            node, todo = item
            for i, cmd in todo:
                try:
                    results[i] = (True, execute(self.agents[node], cmd))
                except Exception as exc:  # noqa: BLE001 - handed to that command's sender
                    results[i] = (False, exc)

        if len(by_node) == 1:
            run(next(iter(by_node.items())))
        else:
            list(self._pool.map(run, by_node.items()))
        return results

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> dict:
        """Where this process runs: its Ray node and address (a joined cluster's placement, for the
        summary)."""

        return {
            "nodes": sorted(self.agents),
            "pid": os.getpid(),
            "ray_node": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
        }

    def collect(self) -> dict[str, bytes]:
        """The files of this process's agents written under their scratch folders (NodeConfig.scratch),
        by path relative to the run folder; the folders are removed. Called after :meth:`shutdown`."""
        files: dict[str, bytes] = {}
        for a in self.agents.values():
            if not a.cfg.scratch:
                continue
            root = a.run_dir
            for path in sorted(root.rglob("*")):
                rel = path.relative_to(root)
                if path.is_file() and rel.parts[0] not in _NOT_COLLECTED:
                    files[str(rel)] = path.read_bytes()
            shutil.rmtree(root, ignore_errors=True)
            try:
                root.parent.rmdir()  # the run's folder on this host, once its last node's is gone
            except OSError:
                pass
        return files

    def info(self) -> list[dict]:
        return self._each(lambda a: a.info())

    def probe(self, seconds: float, start_at: float, where: tuple[str, float]) -> list[dict]:
        """``start_at``: a CLOCK_MONOTONIC reading on the host ``where`` (the driver's clock.origin())."""
        start_at = localize(start_at, where)
        return self._each(lambda a: a.probe(seconds, start_at))

    def record_probe(self, results: list[dict]) -> None:
        for r in results:
            self.agents[r["node"]].record_probe(r)

    def set_run(self, t0: float, where: tuple[str, float], coordinator=None) -> None:
        """``t0``: emulated time 0, a CLOCK_MONOTONIC reading on the host ``where`` (clock.origin())."""
        t0 = localize(t0, where)
        notify = None
        if coordinator is not None:

            def notify(msg, _h=coordinator):
                _h.on_node_event.remote(msg)

        for a in self.agents.values():
            a.set_run(t0, notify)

    def shutdown(self) -> list[dict]:
        try:
            return self._each(lambda a: a.shutdown())
        finally:
            self._pool.shutdown(wait=False)


class _HostCalls:
    """The coordinator's commands to one AgentHost. The :data:`~testbed.emulator.control.BATCHED` commands
    made in one turn of the coordinator's loop (a job's ranks, a slot's nodes) go as one Ray call per
    host; anything else goes at once."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.pending: list[tuple[int, NodeCommand, cf.Future]] = []
        self.flush_armed = False

    def send(self, node: int, cmd: NodeCommand) -> cf.Future:
        if isinstance(cmd, BATCHED):
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None  # not on the coordinator's loop (then nothing else is batched with it)
            if loop is not None:
                fut: cf.Future = cf.Future()
                self.pending.append((node, cmd, fut))
                if not self.flush_armed:
                    self.flush_armed = True
                    loop.call_soon(self._flush)
                return fut
        return self.handle.run.remote(node, cmd).future()

    def _flush(self) -> None:
        self.flush_armed = False
        batch, self.pending = self.pending, []
        ref = self.handle.run_many.remote([(n, c) for n, c, _ in batch]).future()

        def done(f: cf.Future) -> None:
            exc = f.exception()
            for i, (*_, fut) in enumerate(batch):
                if exc is not None:
                    fut.set_exception(exc)  # the host itself failed (died): every command did
                    continue
                ok, value = f.result()[i]
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

        ref.add_done_callback(done)


class RayHandle:
    """Node ``node`` of an AgentHost actor, through that host's :class:`_HostCalls`."""

    def __init__(self, host: _HostCalls, node: int) -> None:
        self.host = host
        self.node = node

    def send(self, cmd: NodeCommand) -> cf.Future:
        return self.host.send(self.node, cmd)


class CoordinatorActor(Coordinator):
    def __init__(self, *args, hosts=(), nodes=(), **kwargs):
        """``hosts``: the AgentHost handles; ``nodes``: per node, in node order, (host index, node)."""
        calls = [_HostCalls(h) for h in hosts]
        super().__init__(*args, handles=[RayHandle(calls[i], n) for i, n in nodes], **kwargs)
