"""Wake-up turns: the kernel's delay between a process becoming runnable and running, on a node whose
other processes hold the CPU (docs/architecture.md, "Wake-up turns in the simulator").

The simulator shares a node's CPU by weighted processor sharing, so a woken process computes at once, at
its weight's share. The kernel runs one task at a time on a run queue: a task woken from a block (its
message came, its write ended, its send was acknowledged) waits for its turn behind the running task
unless its weight lets it preempt (a nice value below every other runnable process's of the node). The
model: such a process waits ``turn_s`` CPU-seconds (at rate 1; ``turn_s / rate`` emulated seconds) when
at least ``crowd`` other processes of its node want the CPU. Under a node's CFS quota a single other
runnable process costs a woken one no turn: the wait is the quota's throttling, the same at every nice
value (benchmarks/wakeup_latency.py; docs/measurements.md, "Wake-up latency"). A wait on every wake
beside one other process, boosted or not, is what remains of the blocking schemes' error on real
processes; a uniprocessor without a quota waits a fifth of it, so most of it is the emulator's, not
modelled here (docs/measurements.md, "A woken process's wait beside another").

:class:`WakeTurns` holds the woken processes of each node until the node's local policy has heard of the
instant's events (a boost given on the message's arrival counts), then says how long each waits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from testbed.apps.base import Recv

if TYPE_CHECKING:
    from .engine import _Node, _Process


def blocked_for(p: _Process, tag: int) -> bool:
    """Whether ``p`` is blocked in a receive that a message of ``tag`` wakes."""
    return type(p.op) is Recv and p.waiting and not p.spinning and p.tag == tag


class WakeTurns:
    """``turn_s``: how long, in CPU-seconds at rate 1, a woken process that cannot preempt waits for its
    turn. ``crowd``: how many other processes of its node must want the CPU for it to wait."""

    def __init__(self, turn_s: float, crowd: int) -> None:
        if not turn_s > 0 or crowd < 1:
            raise ValueError(f"wake-up turns need turn_s > 0 and crowd >= 1, got {turn_s}, {crowd}")
        self.turn_s = turn_s
        self.crowd = crowd
        self._woken: dict[int, list[_Process]] = {}

    def woke(self, p: _Process) -> None:
        """``p`` was blocked and may run again from now (its turn is judged at :meth:`holds`)."""
        if not p.held:
            self._woken.setdefault(p.node.idx, []).append(p)

    def holds(self, node: _Node) -> list[tuple[_Process, float]]:
        """The processes woken on ``node`` at this instant that must wait, each with its wait (emulated s)."""
        woken = self._woken.pop(node.idx, None)
        if not woken:
            return []
        # A stopped process is not woken (SIGSTOP): it runs when continued, as any other.
        wait = self.turn_s / node.rate
        return [(p, wait) for p in woken if p.allowed and not p.done and self._waits(p, node)]

    def _waits(self, p: _Process, node: _Node) -> bool:
        others = [q.nice for q in node.procs.values() if q is not p and not q.held and q.wants_cpu()]
        return len(others) >= self.crowd and p.nice >= min(others)
