"""The communication-driven coscheduling family (docs/policies.md, "Coscheduling mechanisms"; paper 003 §2.3-4
and table 1; paper 000 §2.1): spin-only, DCS, SB, SY, PB, PB-SB, CC and HYBRID.

Each scheme is two things: how a process waits for a message (the ``wait_mode`` a :class:`Scheduler` here
declares, which the runner forces on its jobs) and what the node does about message events (the local
policy). The global side is native local scheduling's (:class:`~testbed.schedulers.local.LocalGlobal`:
up to ``mpl`` processes per node, packing optional).

What the node's OS can do is all a local policy here does: every process of the node stays runnable
(``LocalDecision.run`` is always all of them) and "boosting" a process means lowering its nice value to
``boost_nice`` (normal: ``normal_nice``), so the OS scheduler gives it most of the CPU while it wants it.
Nice values are sent as changes only: a process the policy has not touched is at nice 0, as the OS
starts it.

Several schemes boost a process because of one event (DCS on an arrival, SB/CC on waking a blocked
receiver; CC also on waking a sender blocked for the NIC's acknowledgement of its message). Such a
*wake boost* lasts until the process waits for its next message (it then has nothing
to do with the CPU: a boosted spinner would only burn it), or ``boost_ms`` after it was given (one OS
time slice: the boost gets the process scheduled now, it does not own the CPU), or the process exits,
whichever comes first. Periodic schemes (PB, CC) hold their pick until their next pick.

Time is the emulated ``now`` of each event; the policies ask for :class:`Timer` events through
``LocalDecision.wakeup`` (one pending wakeup per node: they keep their own deadlines and always ask for
the earliest).
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import ClassVar

from pydantic import model_validator

from .base import (
    CollectiveEnter,
    CollectiveLeave,
    GlobalPolicy,
    LocalDecision,
    LocalEvent,
    LocalPolicy,
    MessageArrived,
    MessageConsumed,
    Proc,
    ProcAdded,
    ProcExited,
    ReceiverBlocked,
    ReceiverWaiting,
    RunAll,
    Scheduler,
    SenderBlocked,
    SenderWoken,
    Timer,
    job_wait,  # noqa: F401 - re-exported: the rule applies to every scheduler, it lives in base
)
from .cfs import NICE_MAX, NICE_MIN
from .local import LocalGlobal, LocalParams
from .params import PolicyParams, param, rule_error

#: A Timer a little early (the real agent's event loop may fire it up to its clock resolution early)
#: still counts as on time for deadlines within this many emulated seconds.
TIMER_SLACK_S = 1e-9


# --------------------------------------------------------------------------------------------------------
# Parameters: groups the schemes compose

_NICE = {"noun": "a whole nice value", "ge": NICE_MIN, "le": NICE_MAX}
_SPIN_TIME_US = 300.0  # paper 003


class NiceParams(PolicyParams):
    normal_nice: int = param(0, "nice value of a process the scheme does not favour", **_NICE)


class BoostParams(NiceParams):
    boost_nice: int = param(-10, "nice value of a boosted process (below normal_nice)", **_NICE)

    @model_validator(mode="after")
    def _boost_below_normal(self):
        if self.boost_nice >= self.normal_nice:
            raise rule_error(
                "boost_nice",
                f"boosts by lowering the nice value, so boost_nice ({self.boost_nice}) must be below "
                f"normal_nice ({self.normal_nice}); lower boost_nice or raise normal_nice",
            )
        return self


class WakeParams(BoostParams):
    boost_ms: float = param(
        10.0,
        "a wake boost lasts at most this long (less if the process waits again)",
        noun="a number of milliseconds",
        gt=0,
    )


class SpinBlockParams(PolicyParams):
    spin_time_us: float = param(
        _SPIN_TIME_US, "a waiting process spins this long, then blocks", noun="a number of microseconds", ge=0
    )


class PeriodicParams(PolicyParams):
    interval_ms: float = param(
        1.0, "period of the pick of a process to boost", noun="a number of milliseconds", gt=0
    )


# Each scheme's parameters: NLS allocation (LocalParams) and the groups its local policy uses.


class SyParams(NiceParams, LocalParams):
    yield_nice: int = param(19, "nice value of a receiver that yielded (above normal_nice)", **_NICE)
    spin_time_us: float = param(
        _SPIN_TIME_US,
        "a receiver still waiting after this long yields",
        noun="a number of microseconds",
        ge=0,
    )

    @model_validator(mode="after")
    def _yield_above_normal(self):
        if self.yield_nice <= self.normal_nice:
            raise rule_error(
                "yield_nice",
                f"yields by raising the nice value, so yield_nice ({self.yield_nice}) must be above "
                f"normal_nice ({self.normal_nice}); raise yield_nice or lower normal_nice",
            )
        return self


class DcsParams(WakeParams, LocalParams):
    pass


class SbParams(SpinBlockParams, WakeParams, LocalParams):
    pass


class PbParams(PeriodicParams, BoostParams, LocalParams):
    pass


class PbSbParams(SpinBlockParams, PeriodicParams, WakeParams, LocalParams):
    """PB-SB's and CC's: a periodic pick plus wake boosts of spin-block waiters."""


class HybridParams(BoostParams, LocalParams):
    pass


# --------------------------------------------------------------------------------------------------------
# The common local machinery


class CoschedLocal(LocalPolicy):
    """Bookkeeping shared by the family: the node's processes in arrival order (the round-robin order),
    who waits for a message, who is blocked, how many messages each has not consumed, who is inside a
    collective; deadlines served by one Timer; nice values sent as changes.

    A wait starts at ReceiverWaiting (one receive that found no message) and ends at the MessageConsumed
    that completes it; ReceiverBlocked marks the waiting process blocked until then. A sender blocked for
    the NIC's acknowledgement (CC) is blocked from SenderBlocked to SenderWoken.
    """

    wants_message_events = True
    params: NiceParams

    def __init__(self, node: int, params: NiceParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.normal_nice = self.params.normal_nice
        self.procs: dict[Proc, None] = {}  # ordered: round-robin order
        self.waiting: set[Proc] = set()
        self.blocked: set[Proc] = set()
        self.send_blocked: set[Proc] = set()
        self.unconsumed: dict[Proc, int] = {}
        self.in_collective: set[Proc] = set()
        self.applied: dict[Proc, int] = {}  # nice the OS has for each process
        self.deadlines: dict[Hashable, float] = {}
        self.armed: float | None = None  # time of the pending wakeup

    # -- hooks for the schemes ---------------------------------------------------------------------------

    def react(self, now: float, event: LocalEvent) -> None:
        """Called after the bookkeeping for every event except Timer."""

    def expire(self, now: float, key: Hashable, at: float) -> None:
        """The deadline ``at`` set under ``key`` is due."""

    def forget(self, proc: Proc) -> None:
        """``proc`` exited: drop whatever the scheme holds about it."""

    def nice_of(self, proc: Proc) -> int:
        return self.normal_nice

    # -- the event loop ----------------------------------------------------------------------------------

    def on_event(self, now: float, event: LocalEvent) -> LocalDecision:
        if isinstance(event, Timer):
            self.armed = None
            due = sorted(
                ((t, k) for k, t in self.deadlines.items() if t <= now + TIMER_SLACK_S), key=_deadline_order
            )
            for at, key in due:
                if self.deadlines.get(key) == at:  # not moved or dropped by an earlier expiry
                    del self.deadlines[key]
                    self.expire(now, key, at)
        else:
            self._track(event)
            self.react(now, event)
        return self._decision()

    def _track(self, event: LocalEvent) -> None:
        if isinstance(event, ProcAdded):
            self.procs[event.proc] = None
            self.applied[event.proc] = 0
        elif isinstance(event, ProcExited):
            p = event.proc
            self.procs.pop(p, None)
            self.waiting.discard(p)
            self.blocked.discard(p)
            self.send_blocked.discard(p)
            self.unconsumed.pop(p, None)
            self.in_collective.discard(p)
            self.applied.pop(p, None)
            for key in [k for k in self.deadlines if isinstance(k, tuple) and p in k]:
                del self.deadlines[key]
            self.forget(p)
        elif isinstance(event, ReceiverWaiting):
            self.waiting.add(event.proc)
            self.blocked.discard(event.proc)
        elif isinstance(event, ReceiverBlocked):
            self.waiting.add(event.proc)
            self.blocked.add(event.proc)
        elif isinstance(event, MessageArrived):
            self.unconsumed[event.proc] = event.unconsumed
        elif isinstance(event, MessageConsumed):
            self.unconsumed[event.proc] = event.unconsumed
            self.waiting.discard(event.proc)
            self.blocked.discard(event.proc)
        elif isinstance(event, SenderBlocked):
            self.send_blocked.add(event.proc)
        elif isinstance(event, SenderWoken):
            self.send_blocked.discard(event.proc)
        elif isinstance(event, CollectiveEnter):
            self.in_collective.add(event.proc)
        elif isinstance(event, CollectiveLeave):
            self.in_collective.discard(event.proc)

    def _decision(self) -> LocalDecision:
        changes: dict[Proc, int] = {}
        for p in self.procs:
            want = self.nice_of(p)
            if self.applied.get(p) != want:
                changes[p] = want
                self.applied[p] = want
        wakeup = None
        if self.deadlines:
            nxt = min(self.deadlines.values())
            if self.armed is None or nxt < self.armed:
                self.armed = wakeup = nxt
        return LocalDecision(run=frozenset(self.procs), nice=changes, wakeup=wakeup)

    # -- helpers -----------------------------------------------------------------------------------------

    def useful(self, proc: Proc) -> bool:
        """PB's test: the process can use the CPU, i.e. it is computing (not waiting for a message) or a
        message it has not consumed is there, and it is not blocked for the acknowledgement of a send. A
        process in a file write counts as computing: the NIC cannot tell them apart."""
        if proc in self.send_blocked:
            return False
        return proc not in self.waiting or self.unconsumed.get(proc, 0) > 0

    def round_robin(self, after: Proc | None, pos: int) -> list[Proc]:
        """The node's processes in round-robin order starting just after ``after`` (itself last), or,
        when ``after`` is gone, at position ``pos`` (the process that took its place)."""
        order = list(self.procs)
        if not order:
            return []
        start = order.index(after) + 1 if after in self.procs else pos
        start %= len(order)
        return order[start:] + order[:start]


def _deadline_order(item: tuple[float, Hashable]) -> tuple[float, str]:
    return item[0], repr(item[1])


class WakeBoost(CoschedLocal):
    """Wake boosts (module docstring): ``boost(p)`` until p waits again, ``boost_ms`` pass or p exits."""

    params: BoostParams

    def __init__(self, node: int, params: BoostParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.boost_nice = self.params.boost_nice
        # PB has no wake boosts, hence no boost_ms (WakeParams); read by name, as a scheduler declared with
        # a plain defaults dict has it without being a WakeParams.
        boost_ms = getattr(self.params, "boost_ms", None)
        self.boost_s = math.inf if boost_ms is None else boost_ms / 1000.0
        self.woken: set[Proc] = set()

    def boost(self, now: float, proc: Proc) -> None:
        self.woken.add(proc)
        if self.boost_s < math.inf:
            self.deadlines[("boost", proc)] = now + self.boost_s

    def unboost(self, proc: Proc) -> None:
        self.woken.discard(proc)
        self.deadlines.pop(("boost", proc), None)

    def react(self, now: float, event: LocalEvent) -> None:
        if isinstance(event, (ReceiverWaiting, SenderBlocked)):
            self.unboost(event.proc)

    def expire(self, now: float, key: Hashable, at: float) -> None:
        if isinstance(key, tuple) and key[0] == "boost":
            self.woken.discard(key[1])

    def forget(self, proc: Proc) -> None:
        self.woken.discard(proc)

    def nice_of(self, proc: Proc) -> int:
        return self.boost_nice if proc in self.woken else self.normal_nice


# --------------------------------------------------------------------------------------------------------
# The schemes' local policies


class DcsLocal(WakeBoost):
    """DCS: a message for a process other than the favourite makes it the favourite (boosted; the old
    favourite goes back to normal). The favourite keeps the boost until it waits for its next message,
    ``boost_ms`` pass, another process becomes the favourite, or it exits. A message for the favourite
    itself changes nothing (the NIC only interrupts on a mismatch)."""

    def __init__(self, node: int, params: DcsParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.favourite: Proc | None = None

    def react(self, now: float, event: LocalEvent) -> None:
        super().react(now, event)
        if self.favourite is not None and self.favourite not in self.woken:
            self.favourite = None  # its boost ended
        if isinstance(event, MessageArrived) and event.proc in self.procs and event.proc != self.favourite:
            if self.favourite is not None:
                self.unboost(self.favourite)
            self.favourite = event.proc
            self.boost(now, event.proc)

    def expire(self, now: float, key: Hashable, at: float) -> None:
        super().expire(now, key, at)
        if self.favourite is not None and self.favourite not in self.woken:
            self.favourite = None

    def forget(self, proc: Proc) -> None:
        super().forget(proc)
        if self.favourite == proc:
            self.favourite = None


class SbLocal(WakeBoost):
    """SB: receivers spin ``spin_time_us`` then block (the wait mode). A message for a blocked receiver
    wakes it (the NIC hands the message over) and boosts it (a wake boost). A message for a spinning or
    computing process changes nothing."""

    def react(self, now: float, event: LocalEvent) -> None:
        super().react(now, event)
        if isinstance(event, MessageArrived) and event.proc in self.blocked:
            self.boost(now, event.proc)


class SyLocal(CoschedLocal):
    """SY: receivers spin (the wait mode); one still waiting ``spin_time_us`` after its receive began
    yields: its nice goes to ``yield_nice`` until the receive completes (MessageConsumed)."""

    params: SyParams

    def __init__(self, node: int, params: SyParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.yield_nice = self.params.yield_nice
        self.spin_s = self.params.spin_time_us / 1e6
        self.yielded: set[Proc] = set()

    def react(self, now: float, event: LocalEvent) -> None:
        if isinstance(event, ReceiverWaiting):
            self.yielded.discard(event.proc)
            self.deadlines[("yield", event.proc)] = now + self.spin_s
        elif isinstance(event, MessageConsumed):
            self.yielded.discard(event.proc)
            self.deadlines.pop(("yield", event.proc), None)

    def expire(self, now: float, key: Hashable, at: float) -> None:
        if isinstance(key, tuple) and key[0] == "yield" and key[1] in self.waiting:
            self.yielded.add(key[1])

    def forget(self, proc: Proc) -> None:
        self.yielded.discard(proc)

    def nice_of(self, proc: Proc) -> int:
        return self.yield_nice if proc in self.yielded else self.normal_nice


class PeriodicPick(WakeBoost):
    """A pick every ``interval_ms`` while the node has two processes or more (alone, a process needs no
    favour): the picked process is boosted until the next pick, the previous pick goes back to normal.
    ``pick`` is the scheme's rule; with ``wake_blocked``, SB's wake boost for blocked receivers too."""

    wake_blocked: ClassVar[bool] = False
    params: PeriodicParams  # and BoostParams, as every WakeBoost (PB's, PB-SB's, CC's and 2DCS's models)

    def __init__(self, node: int, params: PeriodicParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.interval = self.params.interval_ms / 1000.0
        self.favourite: Proc | None = None
        self.last_pick: Proc | None = None  # may have lost the favour since, or exited
        self.pos = 0  # its round-robin position

    def pick(self) -> Proc | None:
        raise NotImplementedError

    def candidates(self) -> list[Proc]:
        """Round-robin order for a pick: starting just after the last pick (the current favourite, if
        any), itself last."""
        return self.round_robin(self.last_pick, self.pos)

    def react(self, now: float, event: LocalEvent) -> None:
        super().react(now, event)
        if isinstance(event, ProcAdded) and len(self.procs) >= 2 and ("pick",) not in self.deadlines:
            self.deadlines[("pick",)] = now + self.interval
        if self.wake_blocked and isinstance(event, MessageArrived) and event.proc in self.blocked:
            self.boost(now, event.proc)

    def expire(self, now: float, key: Hashable, at: float) -> None:
        if key != ("pick",):
            super().expire(now, key, at)
            return
        if len(self.procs) < 2:
            self.favourite = None  # the timer stops until a second process comes
            return
        self.favourite = self.pick()
        if self.favourite is not None:
            self.last_pick = self.favourite
            self.pos = list(self.procs).index(self.favourite)
        # On the period's grid; a late timer skips to now + interval rather than catching up.
        due = at + self.interval
        self.deadlines[("pick",)] = due if due > now else now + self.interval

    def forget(self, proc: Proc) -> None:
        super().forget(proc)
        if self.favourite == proc:
            self.favourite = None

    def nice_of(self, proc: Proc) -> int:
        if proc == self.favourite or proc in self.woken:
            return self.boost_nice
        return self.normal_nice


class PbLocal(PeriodicPick):
    """PB: every ``interval_ms``, scan the processes round-robin starting just after the last pick (the
    current favourite, itself last) and favour the first with useful work (computing, or a message it
    has not consumed is there); none: no favourite. Nothing happens on an arrival."""

    def pick(self) -> Proc | None:
        return next((p for p in self.candidates() if self.useful(p)), None)


class PbSbLocal(PbLocal):
    """PB-SB: PB's periodic scan, plus SB's wake boost of a blocked receiver when its message arrives."""

    wake_blocked = True


class CcLocal(PeriodicPick):
    """CC: SB's wake boost of a blocked receiver on arrival, and the same for a sender blocked for the
    NIC's acknowledgement of its message when the acknowledgement comes (SenderWoken; its sends wait so:
    :class:`Cc`'s ``send_wait``); every ``interval_ms``, favour the process with the most unconsumed
    incoming messages (ties: the first in round-robin order after the current favourite); none has any:
    no favourite."""

    wake_blocked = True

    def react(self, now: float, event: LocalEvent) -> None:
        super().react(now, event)
        if isinstance(event, SenderWoken) and event.proc in self.procs:
            self.boost(now, event.proc)

    def pick(self) -> Proc | None:
        best, most = None, 0
        for p in self.candidates():
            n = self.unconsumed.get(p, 0)
            if n > most:
                best, most = p, n
        return best


class HybridLocal(CoschedLocal):
    """HYBRID: a process is boosted from CollectiveEnter to CollectiveLeave and at normal priority
    otherwise; point-to-point messages change nothing (receivers block at once: the wait mode)."""

    params: HybridParams

    def __init__(self, node: int, params: HybridParams, seed: int = 0) -> None:
        super().__init__(node, params, seed)
        self.boost_nice = self.params.boost_nice

    def nice_of(self, proc: Proc) -> int:
        return self.boost_nice if proc in self.in_collective else self.normal_nice


# --------------------------------------------------------------------------------------------------------
# The registered schedulers


class _Cosched(Scheduler):
    global_policy: ClassVar[type[GlobalPolicy]] = LocalGlobal


class Spin(_Cosched):
    name = "spin"
    summary = "spin-only: every process runs, receivers busy-wait (NLS allocation, mpl per node)"
    local_policy = RunAll
    Params = LocalParams
    wait_mode = "spin"


class Dcs(_Cosched):
    name = "dcs"
    summary = "demand-based coscheduling: spinning receivers, a message for another process boosts it"
    local_policy = DcsLocal
    Params = DcsParams
    wait_mode = "spin"
    allows_wait_mode_override = False


class Sb(_Cosched):
    name = "sb"
    summary = "spin-block: receivers spin spin_time_us then block; a message wakes and boosts them"
    local_policy = SbLocal
    Params = SbParams
    wait_mode = "spin-block"
    spin_time_us = _SPIN_TIME_US
    allows_wait_mode_override = False


class Sy(_Cosched):
    name = "sy"
    summary = "spin-yield: receivers spin; after spin_time_us a waiting receiver drops to yield_nice"
    local_policy = SyLocal
    Params = SyParams
    wait_mode = "spin"


class Pb(_Cosched):
    name = "pb"
    summary = "periodic boost: spinning receivers; every interval_ms boost the next process with useful work"
    local_policy = PbLocal
    Params = PbParams
    wait_mode = "spin"
    allows_wait_mode_override = False


class PbSb(_Cosched):
    name = "pbsb"
    summary = "PB + SB: spin-block receivers woken and boosted on arrival, plus PB's periodic boost"
    local_policy = PbSbLocal
    Params = PbSbParams
    wait_mode = "spin-block"
    spin_time_us = _SPIN_TIME_US


class Cc(_Cosched):
    name = "cc"
    summary = (
        "coordinated: spin-block receivers and senders (NIC ack) boosted on wake; "
        "every interval_ms favour most unconsumed"
    )
    local_policy = CcLocal
    Params = PbSbParams
    wait_mode = "spin-block"
    spin_time_us = _SPIN_TIME_US
    allows_wait_mode_override = False
    send_wait = "spin-block"  # paper 003, table 1: the sender spins for the NIC's ack, then blocks


class Hybrid(_Cosched):
    name = "hybrid"
    summary = "HYBRID: immediate blocking; a process is boosted from collective entry to exit"
    local_policy = HybridLocal
    Params = HybridParams
    wait_mode = "block"
    allows_wait_mode_override = False
