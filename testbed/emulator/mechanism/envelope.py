"""Resource envelopes: what gives an emulated node its CPU rate and lets it be torn down whole.

docs/architecture.md, "The emulated node": it needs a *quota*, not a share: a node must not run faster because
its neighbours are idle. So a node's worker processes live in a cgroup whose CFS quota is ``cpu_rate * cores /
tdf`` real cores. Layout (each hierarchy separately, because cpu and cpuacct may or may not be co-mounted)::

    <mount of cpu>/testbed/<run_id>/node<k>       cpu.cfs_period_us (cluster.cfs_period_ms), cpu.cfs_quota_us
    <mount of cpuacct>/testbed/<run_id>/node<k>   cpuacct.usage (the node's delivered CPU)
    <cgroup2 mount>/testbed/<run_id>/node<k>      cpu.max, cpu.stat, cgroup.kill (v2)

Everything lives under a directory named ``testbed`` so that the janitor (``testbed.janitor``) and any
cleanup hook can find what a run left behind. No memory cgroup is made: moving workers out of the memory
cgroup they inherit could take them out of a limit the host put on us.

A quota makes a node a *full-speed* CPU available for ``quota`` out of every ``period``, not a slower
CPU: a worker that sleeps (I/O) while its node is throttled loses nothing, so it runs faster and measures
busier than on the slow CPU it emulates. Measured on this 2-core host (8 groups at rate 0.21; a job
that would be 50 % busy computing 10 ms of CPU between sleeps): 0.75 busy at a 100 ms period, 0.60 at
20 ms, 0.56 at 10 ms; with 2 ms bursts, 0.72-0.76 at every period; an 86 %-busy job measures 0.97-1.0
at every period (``python benchmarks/cfs_period.py``). Shorter periods help only when
the sleeps are long against the period; the rate itself held at 10 ms here (compute-bound groups 0.997).

A quota is a ceiling, not a floor: on a host where other processes are busy, CFS shares the CPU among
the root cgroup's tasks and the ``testbed`` cgroup by weight, and the nodes got far less than their
quota (measured: 8 compute-bound nodes at rate 0.21 beside 2 busy processes delivered 16-58 % of their
configured rate). So ``testbed/`` and ``testbed/<run_id>`` get ten times a nice-0 process's CPU weight
(``cpu.shares`` 10240, ``cpu.weight`` 1000): the same nodes then delivered 100 % of their rate beside 2
or 6 busy processes, and beside 2 busy nice -10 ones. Not the kernel's maximum (262144): with that the
nodes also beat the control plane's own threads (nice -10, at 9548), and a gang slot's dispatch, sent
235 ms real ahead, reached its node late in 16-174 of ~400 switches per run (gang skew p99 4-50 ms
instead of 0.4-0.7 ms with 1024 or 10240; quickstart, 2-core host). Every run sets the same weight, so
concurrent runs share as equals. Where the run's control plane sits in its own cgroup under
testbed/<run_id> (controlgroup.py), the driver raises both to controlgroup.HOST_SHARES first, and a node
never lowers them (:func:`raise_shares`).

The ``none`` envelope only tracks pids: the CPU rate is then whatever the host gives, which the caller
must say loudly in the report (``Envelope.note``).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import re
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence

from testbed.emulator.mechanism import accounting

log = logging.getLogger(__name__)

TOP = "testbed"
CFS_PERIOD_US = 100_000
MIN_QUOTA_US = 1000
#: CPU weight of testbed/ and testbed/<run_id> (v1 cpu.shares, v2 cpu.weight): 10 x a nice-0 process's.
SHARES_V1 = 10240
WEIGHT_V2 = 1000
DESTROY_TIMEOUT_S = 5.0
#: The v1 controllers the cgroup-v1 envelope makes a node's cgroup in: the CFS quota, the usage.
V1_CONTROLLERS = ("cpu", "cpuacct")
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def quota_us(period_us: int, cpu_rate: float, cores: int, tdf: float) -> int:
    """The CFS quota giving ``cpu_rate * cores / tdf`` real cores; refuses one below the kernel's minimum."""
    quota = round(period_us * cpu_rate * cores / tdf)
    if quota < MIN_QUOTA_US:
        raise ValueError(
            f"a CFS quota of {quota} us per {period_us} us period is below the kernel's minimum "
            f"({MIN_QUOTA_US} us): raise cluster.cfs_period_ms to at least "
            f"{math.ceil(MIN_QUOTA_US * tdf / (cpu_rate * cores) / 1000)} or lower the TDF"
        )
    return quota


class EnvelopeUnavailable(RuntimeError):
    """The requested envelope cannot work here; the message says why and what to do."""


# --- cgroup mounts -------------------------------------------------------------------------------------


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo.
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


def cgroup_mounts() -> list[tuple[str, str, set[str], bool]]:
    """Every cgroup mount: (mount point, fstype 'cgroup'|'cgroup2', controllers/names, writable).

    For a hierarchy mounted more than once the mount of its root is preferred, then the first.
    """
    seen: dict[str, tuple[str, str, set[str], bool, bool]] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            lf, rf = left.split(), right.split()
            if len(rf) < 3 or rf[0] not in ("cgroup", "cgroup2"):
                continue
            dev, root, mnt, mopts = lf[2], lf[3], _unescape(lf[4]), lf[5].split(",")
            sopts = rf[2].split(",")
            if rf[0] == "cgroup":
                ctrls = {o for o in sopts if "=" not in o or o.startswith("name=")}
                ctrls -= {"rw", "ro", "noprefix", "clone_children", "cpuset_v2_mode", "favordynmods", "xattr"}
            else:
                ctrls = {"cgroup2"}
            writable = "rw" in mopts and "rw" in sopts
            prev = seen.get(dev)
            if prev is None or (root == "/" and not prev[4]):
                seen[dev] = (mnt, rf[0], ctrls, writable, root == "/")
    return [(m, t, c, w) for m, t, c, w, _ in seen.values()]


def _v1_mount(controller: str) -> tuple[str | None, str | None]:
    """(mount point, None) of the v1 hierarchy holding ``controller``, or (None, reason)."""
    for mnt, fstype, ctrls, writable in cgroup_mounts():
        if fstype == "cgroup" and controller in ctrls:
            if not writable:
                return None, f"the cgroup v1 {controller} controller at {mnt} is mounted read-only"
            return mnt, None
    return None, f"no cgroup v1 hierarchy has the {controller} controller mounted (see /proc/self/mountinfo)"


def _v2_mount() -> tuple[str | None, str | None]:
    for mnt, fstype, _, writable in cgroup_mounts():
        if fstype == "cgroup2":
            if not writable:
                return None, f"the cgroup v2 hierarchy at {mnt} is mounted read-only"
            return mnt, None
    return None, "no cgroup v2 hierarchy is mounted"


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def join_files_now(paths) -> None:
    """Puts the calling process into each membership file's group ("0" = the writer). Runs between fork
    and exec, and in a fork server's child: os.open/write/close only."""
    for path in paths:
        _write(path, "0")


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _read_pids(path: str) -> list[int]:
    try:
        return [int(x) for x in _read(path).split()]
    except FileNotFoundError:
        return []


def _makedirs(path: str) -> None:
    # Another run's cleanup may rmdir an empty testbed/ between our mkdir of it and of the run dir.
    for _ in range(5):
        try:
            os.makedirs(path, exist_ok=True)
            return
        except FileNotFoundError:
            continue
    os.makedirs(path, exist_ok=True)


def raise_shares(d: str, shares: int) -> None:
    """Set ``d``'s cpu.shares to at least ``shares``, never lower: the run's control cgroup raises
    testbed/ and testbed/<run_id> to controlgroup.HOST_SHARES before the agents make their nodes."""
    f = os.path.join(d, "cpu.shares")
    if int(_read(f)) < shares:
        _write(f, str(shares))


def rmdir_up(path: str, stop_at: str) -> list[str]:
    """rmdir ``path`` and then its parents while empty, never above ``stop_at``. Returns what went."""
    removed = []
    p = path
    while len(p) > len(stop_at) and p.startswith(stop_at):
        try:
            os.rmdir(p)
        except FileNotFoundError:
            pass
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EBUSY, errno.EEXIST):
                break  # another run, or another node, still uses it: that is fine
            raise
        else:
            removed.append(p)
        p = os.path.dirname(p)
    return removed


def kill_pids(pids: list[int]) -> None:
    """SIGKILL, then SIGCONT so a stopped one is woken (SIGKILL already wakes it; this is belt and braces)."""
    for pid in pids:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                break


# --- the envelopes --------------------------------------------------------------------------------------


class Envelope(ABC):
    """One emulated node's resource envelope. Subclasses set ``kind`` and ``fixes_rate``."""

    kind: str = ""
    fixes_rate: bool = False

    def __init__(
        self,
        run_id: str,
        node: int,
        cpu_rate: float,
        tdf: float,
        cores: int = 1,
        period_us: int = CFS_PERIOD_US,
    ) -> None:
        if not _SAFE_ID.match(run_id):
            raise ValueError(f"run_id {run_id!r} must match {_SAFE_ID.pattern} (it names cgroup directories)")
        if cpu_rate <= 0 or tdf <= 0 or cores < 1 or node < 0:
            raise ValueError(
                f"need cpu_rate > 0, tdf > 0, cores >= 1, node >= 0; got {cpu_rate}, {tdf}, {cores}, {node}"
            )
        if not 1000 <= period_us <= 1_000_000:
            # The kernel's own bounds for cpu.cfs_period_us.
            raise ValueError(f"CFS period must be 1000..1000000 us; got {period_us}")
        self.run_id = run_id
        self.node = node
        self.cpu_rate = cpu_rate
        self.tdf = tdf
        self.cores = cores
        self.period_us = period_us
        # One line for the run's log and report when the envelope is weaker than asked (auto fell back).
        self.note: str | None = None

    def _quota_us(self) -> int:
        return quota_us(self.period_us, self.cpu_rate, self.cores, self.tdf)

    def weight_cpus(self, allowed: Sequence[int]) -> frozenset[int]:
        """The CPUs of ``allowed`` where this node's processes run while a policy weights them (nice).

        CFS weights act only between tasks on one run-queue. Under a quota, tasks on different CPUs each
        run until the group's quota is spent, whatever their nice: measured on this 2-core host, two busy
        processes in a cgroup with a 1-CPU quota, nice 4 and nice 0, got 0.50 and 0.50 of it; pinned to one
        CPU, 0.29 and 0.71, as their weights say (423 : 1024). So a weighted node runs on as many CPUs as
        its quota has cores (its ``cores`` where no quota is set), node k's from the (k * n)-th on."""
        if not allowed:
            raise ValueError("no CPUs allowed")
        real = self._quota_us() / self.period_us if self.fixes_rate else self.cores
        n = min(len(allowed), max(1, math.ceil(real - 1e-9)))
        first = self.node * n
        return frozenset(allowed[(first + i) % len(allowed)] for i in range(n))

    @property
    def name(self) -> str:
        return f"node{self.node}"

    @abstractmethod
    def create(self) -> None: ...

    @abstractmethod
    def join_self(self) -> None:
        """Put the calling process into the envelope. Runs between fork and exec: os.open/write/close only."""

    def join_files(self) -> list[str]:
        """The files a process writes "0" to, to join the envelope (what ``join_self`` writes): a fork
        server's child joins with them before its first worker instruction. Empty: nothing to join."""
        return []

    @abstractmethod
    def add(self, pid: int) -> None: ...

    def track(self, pid: int) -> None:  # noqa: B027 - optional hook, most envelopes need nothing
        """Told by ``spawn`` of every worker it started here (after join_self ran in the child)."""

    @abstractmethod
    def pids(self) -> list[int]: ...

    @abstractmethod
    def cpu_usage_s(self) -> float: ...

    @abstractmethod
    def configured_rate(self) -> float | None: ...

    def rate_counters(self) -> tuple[float, float, int, list[int]] | None:
        """(CPU delivered s, throttled s, throttled periods, thread ids) of the node's cgroup, for the rate
        watch (mechanism/ratewatch.py); None where no quota fixes the rate. The throttled time is the
        kernel's, summed over the CPUs on which the node's group was throttled."""
        return None

    def usage_files(self) -> tuple[str, str] | None:
        """(cpu.stat, the usage file where cpu.stat has no usage, else "") of the node's cgroup, which a
        guarded spin reads each poll (apps/spinguard.py); None where no quota fixes the rate."""
        return None

    @abstractmethod
    def destroy(self) -> None: ...

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(run_id={self.run_id!r}, node={self.node}, rate={self.configured_rate()})"
        )


class NoEnvelope(Envelope):
    """Tracks pids only. The CPU rate is NOT fixed: a node runs as fast as the host lets it."""

    kind = "none"
    fixes_rate = False

    def __init__(self, *args, **kwargs) -> None:  # Envelope's arguments
        super().__init__(*args, **kwargs)
        # pid -> (start time in ticks, last CPU seconds seen): the start time guards against pid reuse, and
        # the last value keeps a dead process's CPU in the cumulative total.
        self._procs: dict[int, tuple[int, float]] = {}
        self.note = "envelope none: CPU rate is NOT fixed (nodes run as fast as the host allows)"

    def create(self) -> None:
        pass

    def join_self(self) -> None:
        pass

    def add(self, pid: int) -> None:
        self.track(pid)

    def track(self, pid: int) -> None:
        try:
            self._procs[pid] = (accounting.start_time_ticks(pid), 0.0)
        except ProcessLookupError:
            self._procs[pid] = (-1, 0.0)

    def _alive(self, pid: int, start: int) -> bool:
        try:
            return accounting.start_time_ticks(pid) == start and accounting.proc_state(pid) != "Z"
        except ProcessLookupError:
            return False

    def pids(self) -> list[int]:
        return [p for p, (st, _) in self._procs.items() if self._alive(p, st)]

    def cpu_usage_s(self) -> float:
        total = 0.0
        for pid, (start, last) in list(self._procs.items()):
            try:
                if accounting.start_time_ticks(pid) == start:
                    last = max(last, accounting.cpu_time_s(pid))
                    self._procs[pid] = (start, last)
            except ProcessLookupError:
                pass
            total += last
        return total

    def configured_rate(self) -> float | None:
        return None

    def destroy(self) -> None:
        deadline = time.monotonic() + DESTROY_TIMEOUT_S
        while True:
            alive = self.pids()
            if not alive:
                return
            kill_pids(alive)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self!r}: processes {alive} survived SIGKILL for {DESTROY_TIMEOUT_S} s")
            time.sleep(0.005)


def v1_rate_counters(cpuacct_dir: str, cpu_dir: str) -> tuple[float, float, int, list[int]]:
    """Envelope.rate_counters of a v1 node: cpuacct.usage, cpu.stat's throttled_time (ns) and
    nr_throttled, the cpu group's ``tasks`` (every thread)."""
    usage = int(_read(os.path.join(cpuacct_dir, "cpuacct.usage"))) / 1e9
    stat = dict(line.split()[:2] for line in _read(os.path.join(cpu_dir, "cpu.stat")).splitlines())
    throttled = int(stat.get("throttled_time", 0)) / 1e9
    return usage, throttled, int(stat.get("nr_throttled", 0)), _read_pids(os.path.join(cpu_dir, "tasks"))


class _V1ProcsFiles:
    """Membership of a node held in v1 ``cgroup.procs`` files (``self._procs_files``, in join order): the
    cgroup envelope's, and the docker envelope's container cgroups."""

    _procs_files: list[str]

    def join_self(self) -> None:
        join_files_now(self._procs_files)

    def join_files(self) -> list[str]:
        return list(self._procs_files)

    def add(self, pid: int) -> None:
        for path in self._procs_files:
            _write(path, str(pid))

    def pids(self) -> list[int]:
        out: set[int] = set()
        for path in self._procs_files:
            out.update(_read_pids(path))
        return sorted(out)


class CgroupV1Envelope(_V1ProcsFiles, Envelope):
    """cpu (CFS quota) + cpuacct (usage) cgroups in the v1 hierarchies."""

    kind = "cgroup-v1"
    fixes_rate = True

    def __init__(self, *args, **kwargs) -> None:  # Envelope's arguments
        super().__init__(*args, **kwargs)
        mounts = {}
        for ctrl in V1_CONTROLLERS:
            mnt, why = _v1_mount(ctrl)
            if mnt is None:
                raise EnvelopeUnavailable(
                    f"cgroup-v1 envelope unavailable: {why}. Mount it (e.g. `mount -t "
                    f"cgroup -o {ctrl} cgroup /sys/fs/cgroup/{ctrl}` as root) or use "
                    "envelope: none"
                )
            mounts[ctrl] = mnt
        self.mounts = mounts
        rel = os.path.join(TOP, self.run_id, self.name)
        self.dirs = {c: os.path.join(m, rel) for c, m in mounts.items()}
        # Distinct directories (cpu and cpuacct are one when co-mounted), in join order.
        self._unique = list(dict.fromkeys([self.dirs["cpu"], self.dirs["cpuacct"]]))
        self.quota_us = self._quota_us()
        # Precomputed for join_self, which must not build strings between fork and exec.
        self._procs_files = [os.path.join(d, "cgroup.procs") for d in self._unique]

    def create(self) -> None:
        for d in self._unique:
            _makedirs(d)
        run_dir = os.path.dirname(self.dirs["cpu"])
        for d in (os.path.dirname(run_dir), run_dir):  # testbed/, testbed/<run_id>: see the module doc
            raise_shares(d, SHARES_V1)
        _write(os.path.join(self.dirs["cpu"], "cpu.cfs_period_us"), str(self.period_us))
        _write(os.path.join(self.dirs["cpu"], "cpu.cfs_quota_us"), str(self.quota_us))

    def cpu_usage_s(self) -> float:
        return int(_read(os.path.join(self.dirs["cpuacct"], "cpuacct.usage"))) / 1e9

    def configured_rate(self) -> float | None:
        return self.quota_us / self.period_us

    def rate_counters(self) -> tuple[float, float, int, list[int]] | None:
        return v1_rate_counters(self.dirs["cpuacct"], self.dirs["cpu"])

    def usage_files(self) -> tuple[str, str] | None:
        return os.path.join(self.dirs["cpu"], "cpu.stat"), os.path.join(self.dirs["cpuacct"], "cpuacct.usage")

    def destroy(self) -> None:
        existing = [d for d in self._unique if os.path.isdir(d)]
        if not existing:
            return
        deadline = time.monotonic() + DESTROY_TIMEOUT_S
        while True:
            left = self.pids()
            if not left:
                break
            kill_pids(left)
            if time.monotonic() > deadline:
                states = {}
                for p in left:
                    try:
                        states[p] = accounting.proc_state(p)
                    except ProcessLookupError:
                        states[p] = "gone"
                raise RuntimeError(
                    f"{self!r}: cgroup not empty {DESTROY_TIMEOUT_S} s after SIGKILL: {states}"
                )
            time.sleep(0.005)
        for ctrl, d in self.dirs.items():
            if d in existing:
                rmdir_up(d, self.mounts[ctrl])


class CgroupV2Envelope(Envelope):
    """cpu.max + cpu.stat + cgroup.kill in the unified hierarchy, from its root:

        <mount>/testbed/<run_id>/node<k>

    ``controllers``: what the node's subtree gets; without "cpu" the rate is not fixed. The tests run the
    tree with hugetlb in cpu's place where, as here, cpu is bound to cgroup v1 (tests/integration/
    test_pod_envelope.py).
    """

    kind = "cgroup-v2"
    fixes_rate = True
    #: cpu.weight of testbed/ and testbed/<run_id> (the pod envelope, as built, leaves them at the default)
    weighted = True

    def __init__(self, *args, controllers: tuple[str, ...] = ("cpu",), **kwargs) -> None:  # Envelope's args
        super().__init__(*args, **kwargs)
        self._take(controllers)
        mnt, why = _v2_mount()
        if self.need_cpu:
            why = probe_v2()
        if mnt is None or why is not None:
            raise EnvelopeUnavailable(f"cgroup-v2 envelope unavailable: {why}")
        self._root_at(mnt)

    def _take(self, controllers: tuple[str, ...]) -> None:
        self.controllers = tuple(controllers)
        self.need_cpu = "cpu" in self.controllers
        self.fixes_rate = self.need_cpu

    def _root_at(self, root: str) -> None:
        """The tree's root: the node is root/testbed/<run_id>/node<k>; nothing above root is written."""
        self.mount = root  # destroy removes directories up to this one
        self.dir = os.path.join(root, TOP, self.run_id, self.name)
        self.quota_us = self._quota_us()
        self._procs_file = os.path.join(self.dir, "cgroup.procs")

    def _enable_at_root(self, enable: str) -> None:
        # The hierarchy's root may hold processes and still hand controllers down.
        _write(os.path.join(self.mount, "cgroup.subtree_control"), enable)

    def create(self) -> None:
        run = os.path.dirname(self.dir)
        _makedirs(run)
        # A controller reaches the node only if every ancestor's subtree_control enables it, down to the
        # node's parent.
        if self.controllers:
            enable = " ".join(f"+{c}" for c in self.controllers)
            self._enable_at_root(enable)
            for d in (os.path.join(self.mount, TOP), run):
                _write(os.path.join(d, "cgroup.subtree_control"), enable)
        if self.need_cpu and self.weighted:
            for d in (os.path.join(self.mount, TOP), run):
                _write(os.path.join(d, "cpu.weight"), str(WEIGHT_V2))
        _makedirs(self.dir)
        if self.need_cpu:
            _write(os.path.join(self.dir, "cpu.max"), f"{self.quota_us} {self.period_us}")

    def join_self(self) -> None:
        join_files_now([self._procs_file])

    def join_files(self) -> list[str]:
        return [self._procs_file]

    def add(self, pid: int) -> None:
        _write(self._procs_file, str(pid))

    def pids(self) -> list[int]:
        return _read_pids(self._procs_file)

    def cpu_usage_s(self) -> float:
        for line in _read(os.path.join(self.dir, "cpu.stat")).splitlines():
            k, v = line.split()
            if k == "usage_usec":
                return int(v) / 1e6
        raise RuntimeError(f"no usage_usec in {self.dir}/cpu.stat")

    def configured_rate(self) -> float | None:
        return self.quota_us / self.period_us if self.need_cpu else None

    def rate_counters(self) -> tuple[float, float, int, list[int]] | None:
        if not self.need_cpu:
            return None
        stat = dict(line.split()[:2] for line in _read(os.path.join(self.dir, "cpu.stat")).splitlines())
        tids = _read_pids(os.path.join(self.dir, "cgroup.threads"))
        throttled = int(stat.get("throttled_usec", 0)) / 1e6
        return int(stat["usage_usec"]) / 1e6, throttled, int(stat.get("nr_throttled", 0)), tids

    def usage_files(self) -> tuple[str, str] | None:
        return (os.path.join(self.dir, "cpu.stat"), "") if self.need_cpu else None

    def _events(self) -> dict[str, str]:
        return dict(line.split() for line in _read(os.path.join(self.dir, "cgroup.events")).splitlines())

    def destroy(self) -> None:
        if not os.path.isdir(self.dir):
            return
        kill_file = os.path.join(self.dir, "cgroup.kill")
        if os.path.exists(kill_file):
            _write(kill_file, "1")
        deadline = time.monotonic() + DESTROY_TIMEOUT_S
        while self._events().get("populated") != "0":
            kill_pids(self.pids())
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self!r}: still populated {DESTROY_TIMEOUT_S} s after kill: {self.pids()}"
                )
            time.sleep(0.005)
        rmdir_up(self.dir, self.mount)


# --- probing and the factory ---------------------------------------------------------------------------


def _probe_mkdir(base: str) -> str | None:
    """Make and remove a scratch cgroup under base/testbed; None if that works, else the reason."""
    top = os.path.join(base, TOP)
    probe = os.path.join(top, f".probe-{os.getpid()}-{time.monotonic_ns()}")
    try:
        _makedirs(probe)
        os.rmdir(probe)
    except PermissionError:
        return f"cannot create cgroups under {top}: permission denied (run as root, or delegate that subtree)"
    except OSError as e:
        return f"cannot create cgroups under {top}: {e}"
    rmdir_up(top, base)
    return None


_probe_cache: dict[str, str | None] = {}


def probe_v1() -> str | None:
    if "v1" not in _probe_cache:
        _probe_cache["v1"] = _probe_v1()
    return _probe_cache["v1"]


def probe_v2() -> str | None:
    if "v2" not in _probe_cache:
        _probe_cache["v2"] = _probe_v2()
    return _probe_cache["v2"]


def _probe_v1() -> str | None:
    for ctrl in V1_CONTROLLERS:
        mnt, why = _v1_mount(ctrl)
        if mnt is None:
            return why
        why = _probe_mkdir(mnt)
        if why is not None:
            return why
    if not os.path.exists(os.path.join(_v1_mount("cpu")[0] or "", "cpu.cfs_quota_us")):
        return "the v1 cpu controller has no cpu.cfs_quota_us (kernel built without CONFIG_CFS_BANDWIDTH)"
    return None


def _probe_v2() -> str | None:
    mnt, why = _v2_mount()
    if mnt is None:
        return why
    try:
        ctrls = _read(os.path.join(mnt, "cgroup.controllers")).split()
    except OSError as e:
        return f"cannot read {mnt}/cgroup.controllers: {e}"
    if "cpu" not in ctrls:
        holder = _v1_mount("cpu")[0]
        where = f" (it is bound to the cgroup v1 hierarchy at {holder}; use cgroup-v1)" if holder else ""
        return f"the cpu controller is not available in the cgroup v2 hierarchy at {mnt}{where}"
    return _probe_mkdir(mnt)


def probe_envelopes() -> dict[str, str | None]:
    """kind -> None if usable here, else the reason it is not. Probes afresh (make_envelope, in
    testbed/emulator/mechanism/envelopes.py, reuses this)."""
    _probe_cache.clear()
    v1, v2 = probe_v1(), probe_v2()
    cg = None if v1 is None or v2 is None else f"cgroup-v1: {v1}; cgroup-v2: {v2}"
    return {"cgroup": cg, "cgroup-v1": v1, "cgroup-v2": v2, "none": None}


# --- the pod envelope: cgroup v2, in the subtree delegated to this process --------------------------------

#: The leaf that the processes of a delegated cgroup move to, so that controllers can be enabled for its
#: children (cgroup v2's "no internal processes" rule).
LEAF = "testbed-procs"


def own_v2_cgroup(proc_cgroup: str = "/proc/self/cgroup") -> tuple[str, str]:
    """(cgroup2 mount point, directory of this process's v2 cgroup under it). In a pod (cgroup namespace)
    /proc/self/cgroup says ``0::/`` and the mount's root is the pod's cgroup; under a systemd user slice it
    names the slice, which the mount shows at that path. Raises EnvelopeUnavailable saying why not."""
    rel = next((ln[3:] for ln in _read(proc_cgroup).splitlines() if ln.startswith("0::")), None)
    if rel is None:
        raise EnvelopeUnavailable(
            f"envelope pod: {proc_cgroup} has no cgroup v2 line (0::): this process is in no v2 cgroup; "
            "run it in a pod or a systemd unit with Delegate=yes, or use envelope: cgroup"
        )
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            lf, rf = left.split(), right.split()
            if rf and rf[0] == "cgroup2":
                root, mnt = _unescape(lf[3]), _unescape(lf[4])
                # The mount shows the hierarchy from its root: our cgroup must lie at or below it.
                if rel == root or rel.startswith(root.rstrip("/") + "/"):
                    return mnt, os.path.normpath(os.path.join(mnt, rel[len(root) :].lstrip("/")))
    raise EnvelopeUnavailable(
        f"envelope pod: no cgroup2 mount shows this process's cgroup {rel} (see /proc/self/mountinfo); mount "
        "cgroup2 (a pod has it at /sys/fs/cgroup), or use envelope: cgroup"
    )


class PodEnvelope(CgroupV2Envelope):
    """cgroup v2 below the cgroup this process was given (a pod's, a delegated systemd slice's), never above:

        <own cgroup>/testbed-procs           the processes that were in <own cgroup> (moved once)
        <own cgroup>/testbed/<run_id>/node<k>  cpu.max, cpu.stat, cgroup.kill

    The move is what cgroup v2 asks before a cgroup's controllers can be handed to its children. Nothing is
    written above <own cgroup>: its parent may belong to the kubelet or to systemd, and need not be writable.
    """

    kind = "pod"
    fixes_rate = True
    weighted = False

    def __init__(self, *args, controllers: tuple[str, ...] = ("cpu",), **kwargs) -> None:  # Envelope's args
        # ``controllers``: what the node's subtree gets; without "cpu" the rate is not fixed (the tests run
        # the tree logic with hugetlb, the one controller this host leaves to v2).
        Envelope.__init__(self, *args, **kwargs)
        mnt, own = own_v2_cgroup()
        # A process of this run already moved to the leaf (another node of the same agent process).
        self.base = os.path.dirname(own) if os.path.basename(own) == LEAF else own
        for fn in ("cgroup.procs", "cgroup.subtree_control"):
            if not os.access(os.path.join(self.base, fn), os.W_OK):
                raise EnvelopeUnavailable(
                    f"envelope pod: {os.path.join(self.base, fn)} is not writable: this cgroup is not "
                    "delegated to us (a pod needs privileged: true for a writable /sys/fs/cgroup; a "
                    "systemd unit, Delegate=yes), or use envelope: cgroup"
                )
        self._take(controllers)
        ctrls = _read(os.path.join(self.base, "cgroup.controllers")).split()
        for c in self.controllers:
            if c not in ctrls:
                holder = _v1_mount(c)[0]
                where = f"; it is bound to the cgroup v1 hierarchy at {holder}" if holder else ""
                raise EnvelopeUnavailable(
                    f"envelope pod: the {c} controller is not available in {self.base} (cgroup.controllers: "
                    f"{' '.join(ctrls) or 'none'}{where}); use envelope: cgroup"
                )
        self._root_at(self.base)

    def _evacuate(self) -> None:
        """Move every process of the base cgroup to its leaf: a cgroup with processes cannot enable
        controllers for its children. Repeated while some arrive (a fork during the move)."""
        leaf = os.path.join(self.base, LEAF)
        _makedirs(leaf)
        for _ in range(100):
            pids = _read_pids(os.path.join(self.base, "cgroup.procs"))
            if not pids:
                return
            for pid in pids:
                try:
                    _write(os.path.join(leaf, "cgroup.procs"), str(pid))
                except ProcessLookupError:
                    pass
        raise RuntimeError(f"{self!r}: processes keep appearing in {self.base}; cannot enable controllers")

    def _enable_at_root(self, enable: str) -> None:
        # Once per base (the leaf move is needed only before the first enable).
        ctl = os.path.join(self.base, "cgroup.subtree_control")
        if not set(self.controllers) <= set(_read(ctl).split()):
            self._evacuate()
            _write(ctl, enable)


def probe_pod() -> str | None:
    """None if envelope: pod can work in this process's cgroup, else why not (one line)."""
    try:
        PodEnvelope("probe", 0, 1.0, 1.0)
    except EnvelopeUnavailable as e:
        return str(e)
    return None
