"""The run's control cgroup: its control plane (Ray, the node agents, the coordinator) weighted as its nodes.

docs/architecture.md, "The control plane's CPU". A node's processes live in
``testbed/<run_id>/node<k>``, whose ancestors carry ten times a nice-0 process's weight
(envelope.SHARES_V1), so a busy process elsewhere on the host takes little from a node. The processes
that drive the nodes (gcs_server, the raylet, the actor processes of the agents and the coordinator, the
agents' fork servers, the driver) ran in the root cgroup, raised only through the driver's session
autogroup (priority.raise_session_group), which raises every process of that session with them: two busy
loops started at nice 19 from the same shell as the run then weighed, together, as much as the whole
testbed cgroup (measured: docs/measurements.md, "Issue 25: a busy host"). So the driver moves itself,
before it starts Ray, into::

    <mount of cpu>/testbed/<run_id>/control       cpu.shares CONTROL_SHARES, cpu.rt_runtime_us
    <mount of cpuacct>/testbed/<run_id>/control   cpuacct.usage (what the control plane cost)

and every process Ray starts for the run inherits it (a node's worker leaves it for its node's cgroup
between fork and exec, envelope.join_self). It sits beside the nodes, under the run's cgroup, so a busy
host meets the run's whole weight, and inside it control and nodes share as they did at the root (control
10240 against the nodes' 1024 each, as the session's 9548 stood against the testbed cgroup's 10240). With
the control plane inside, testbed/ and testbed/<run_id> get ``HOST_SHARES`` (100 x nice-0) instead of
10240: the reason envelope.py gives against a higher weight (the nodes then beat the control plane's own
threads) is gone once the control plane is under the same weight.

Real-time: the agents' loops and NIC threads and the coordinator's run SCHED_FIFO (priority.py). With
``CONFIG_RT_GROUP_SCHED`` a child cpu cgroup has no RT runtime unless it is given some, and SCHED_FIFO is
refused there. So the control cgroup gets ``RT_RUNTIME_US`` of every ``cpu.rt_period_us`` (1 s), and its
ancestors as much as their children need (testbed/ is grown from what the root has left, never shrunk
while a run uses it). Measured: an 8-node run's FIFO threads used 127 ms/s of the 2-core host; what a group
exceeds stalls its RT threads to the end of the period, hence the margin. Where the budget cannot be had
(the root's is spent: other runs, other software), the group is made without it, the agents fall back to
nice -10 (their ``run_info`` priority says so), and :attr:`ControlGroup.note` says so too.

The driver moves back to where it was before the run's cgroups are removed (:meth:`ControlGroup.leave`);
the janitor (testbed/janitor.py) removes ``control`` with the run's other cgroups whatever happens, and
kills what is still in it.
"""

from __future__ import annotations

import errno
import logging
import os

from testbed.emulator.mechanism.envelope import (
    SHARES_V1,
    TOP,
    V1_CONTROLLERS,
    EnvelopeUnavailable,
    _makedirs,
    _read,
    _read_pids,
    _v1_mount,
    _write,
    raise_shares,
    rmdir_up,
)

log = logging.getLogger(__name__)

NAME = "control"
#: cpu.shares of testbed/<run_id>/control: 10 x nice-0; against its sibling nodes (1024 each) it stands
#: as the session's autogroup at nice -10 (9548) stood against the testbed cgroup (10240) before it.
CONTROL_SHARES = SHARES_V1
#: cpu.shares of testbed/ and testbed/<run_id> while the run's control plane is in its control cgroup:
#: 100 x nice-0, against the host's other work (every other session's autogroup weighs 1024 whatever its
#: processes' nice). envelope.py keeps them at 10240 otherwise: there the control plane stands outside
#: (docs/measurements.md, "Issue 25: a busy host").
HOST_SHARES = 10 * SHARES_V1
#: RT runtime (us per cpu.rt_period_us) a run's control cgroup asks for: its SCHED_FIFO threads used
#: 127 ms/s over 2 CPUs for 8 nodes; a group that exceeds its runtime has its RT threads stalled.
RT_RUNTIME_US = 400_000
#: Below this much left, none is taken: a small budget would stall the loops, worse than nice -10.
RT_MIN_US = 100_000


def _rt_children_sum(d: str) -> int:
    total = 0
    for name in os.listdir(d):
        f = os.path.join(d, name, "cpu.rt_runtime_us")
        if os.path.isfile(f):
            total += max(0, int(_read(f)))
    return total


def _has_rt(d: str) -> bool:
    return os.path.exists(os.path.join(d, "cpu.rt_runtime_us"))


class ControlGroup:
    """cgroup v1 ``cpu`` + ``cpuacct`` group ``testbed/<run_id>/control`` for the run's control plane."""

    def __init__(self, run_id: str, shares: int = CONTROL_SHARES, rt_runtime_us: int = RT_RUNTIME_US) -> None:
        mounts = {}
        for ctrl in V1_CONTROLLERS:
            mnt, why = _v1_mount(ctrl)
            if mnt is None:
                raise EnvelopeUnavailable(f"no control cgroup: {why}")
            mounts[ctrl] = mnt
        self.run_id = run_id
        self.mounts = mounts
        self.shares = shares
        self.rt_wanted = rt_runtime_us
        self.rt_runtime_us = 0  # what it got (create)
        self.dirs = {c: os.path.join(m, TOP, run_id, NAME) for c, m in mounts.items()}
        self._unique = list(dict.fromkeys(self.dirs[c] for c in V1_CONTROLLERS))
        # (controller dir -> the cgroup path the process was in) for leave()
        self._was: dict[str, str] = {}
        self.note = ""

    # --------------------------------------------------------------------------------------------------

    def create(self) -> None:
        """Make the group, weighted and with RT runtime where there is any to have. Raises OSError (the
        caller says so loudly) if the directories or the weight cannot be written."""
        for d in self._unique:
            _makedirs(d)
        cpu = self.dirs["cpu"]
        run = os.path.dirname(cpu)
        top = os.path.dirname(run)
        for d in (top, run):
            raise_shares(d, HOST_SHARES)
        _write(os.path.join(cpu, "cpu.shares"), str(self.shares))
        why = self._take_rt(top, run, cpu) if _has_rt(cpu) else None
        if self.rt_runtime_us:
            rt = f"RT runtime {self.rt_runtime_us} us/s"
        elif why is None:
            rt = "no RT group scheduling"
        else:
            rt = f"NO RT runtime ({why}): SCHED_FIFO refused there"
        self.note = f"control cgroup {cpu} (cpu.shares {self.shares}; {rt})"
        if self.rt_runtime_us == 0 and why is not None:
            log.warning("%s: the agents' loops fall back to nice -10", self.note)

    def _take_rt(self, top: str, run: str, cpu: str) -> str | None:
        """Give the control group RT runtime, growing its ancestors top-down; None when done, else why not."""
        root = os.path.dirname(top)
        want = self.rt_wanted
        try:
            have_top = int(_read(os.path.join(top, "cpu.rt_runtime_us")))
            free_top = have_top - _rt_children_sum(top)
            if free_top < want:
                # testbed/ grows by what is missing, out of what the root has left.
                root_rt = int(_read(os.path.join(root, "cpu.rt_runtime_us")))
                left = root_rt - _rt_children_sum(root)
                grow = min(want - free_top, left)
                if free_top + grow < RT_MIN_US:
                    return f"{max(0, free_top + grow)} us/s left under {root} and {top}"
                want = free_top + grow
                _write(os.path.join(top, "cpu.rt_runtime_us"), str(have_top + grow))
            _write(os.path.join(run, "cpu.rt_runtime_us"), str(want))
            _write(os.path.join(cpu, "cpu.rt_runtime_us"), str(want))
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.EBUSY):
                raise
            return f"writing cpu.rt_runtime_us: {e.strerror}"
        self.rt_runtime_us = want
        return None

    def join(self, pid: int = 0) -> None:
        """Move process ``pid`` (0: this one), all its threads, into the group; :meth:`leave` moves this
        process back. Its children from now on are born in it."""
        me = pid in (0, os.getpid())
        for ctrl in V1_CONTROLLERS:
            d = self.dirs[ctrl]
            if me and d not in self._was:
                self._was[d] = self._own_path(ctrl)
        for d in self._unique:
            _write(os.path.join(d, "cgroup.procs"), str(pid))

    @staticmethod
    def _own_path(ctrl: str) -> str:
        for line in _read("/proc/self/cgroup").splitlines():
            _, ctrls, path = line.split(":", 2)
            if ctrl in ctrls.split(","):
                return path
        raise EnvelopeUnavailable(f"/proc/self/cgroup names no {ctrl} cgroup")

    def leave(self) -> None:
        """Move this process back to the cgroups it was in before :meth:`join` (the mount's root if that
        one is gone). Raises if it cannot: the group could then not be removed."""
        for ctrl in V1_CONTROLLERS:
            d = self.dirs[ctrl]
            was = self._was.pop(d, None)
            if was is None:
                continue
            back = os.path.join(self.mounts[ctrl], was.lstrip("/"))
            if not os.path.isdir(back):
                log.warning("cgroup %s is gone: this process goes back to %s", back, self.mounts[ctrl])
                back = self.mounts[ctrl]
            _write(os.path.join(back, "cgroup.procs"), "0")

    def pids(self) -> list[int]:
        out: set[int] = set()
        for d in self._unique:
            out.update(_read_pids(os.path.join(d, "cgroup.procs")))
        return sorted(out)

    def cpu_usage_s(self) -> float:
        """CPU the control plane used (cpuacct.usage), seconds."""
        return int(_read(os.path.join(self.dirs["cpuacct"], "cpuacct.usage"))) / 1e9

    def destroy(self) -> list[str]:
        """Remove the group (and the run's and testbed/ if empty). Kills nothing: what is in it is the
        caller's to end (the janitor kills it). Returns what went."""
        removed = []
        for ctrl, d in self.dirs.items():
            if os.path.isdir(d):
                removed += rmdir_up(d, self.mounts[ctrl])
        return removed
