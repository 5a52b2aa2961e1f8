"""The docker envelope: one container per emulated node, through the Docker SDK (issue 13).

Each node is a container ``testbed-<run_id>-node<k>`` whose resident process (``sleep infinity``) only holds
the container's cgroups open; the node's workers (and, with the fork server, the server they are forked
from) *join those cgroups* between fork and exec, exactly as they join the cgroup envelope's. So the
container's limits are the node's limits, and the agent keeps its direct hold on every worker: they stay
its children (PR_SET_PDEATHSIG, pidfds), so SIGSTOP/SIGCONT, nice and per-process CPU time work as with
the cgroup envelope. ``docker exec`` would instead make every worker a child of containerd's shim, out of
the agent's reach. What the container sets, and Docker applies:

* ``cpu_period`` + ``cpu_quota`` (not ``nano_cpus``: a container made with it refuses period/quota
  updates, docker/docker-py#2034), updated with ``container.update`` (:meth:`DockerEnvelope.set_rate`);
* ``pids_limit`` and, when the scenario gives ``cluster.memory_mb``, ``mem_limit`` = ``memswap_limit``;
* ``cgroup_parent=/testbed-docker/<run_id>``: Docker's own parent, apart from the cgroup envelope's
  ``testbed/`` that the janitor empties and removes itself (Docker must remove its cgroups itself);
* ``network_mode=host`` (the NICs listen on loopback) and ``pid_mode=host`` (the agent's pids are the
  container's, and on removal runc kills whatever is still in the container's cgroups);
* labels ``testbed.run_id`` and ``testbed.node``: the janitor removes a run's containers by label
  (:func:`remove_containers`), and the resident carries ``TESTBED_RUN_ID`` like every worker.

The workers share the host's pid, network and mount namespaces with the agent: they see the same files
(the venv, the run folder), which the container itself does not need.

Image: no registry is reachable, so the image is made here, once per daemon: ``docker import`` of a tar
that holds only empty directories (the mount points), labelled ``testbed.image``. The resident runs the
host's own ``/usr/bin/sleep`` from the host's ``/usr``, ``/lib`` and ``/lib64`` bind-mounted read-only.
Nothing is copied, so the image is a few hundred bytes, builds in 0.1 s, and needs no builder (``FROM
scratch`` would need BuildKit or the legacy builder and a context carrying the same nothing).
"""

from __future__ import annotations

import fcntl
import io
import logging
import os
import tarfile
import time
from typing import Any

from testbed.apps.environ import MARK_NODE, MARK_RUN_ID
from testbed.emulator.mechanism.envelope import (
    DESTROY_TIMEOUT_S,
    SHARES_V1,
    Envelope,
    EnvelopeUnavailable,
    _read,
    _V1ProcsFiles,
    _write,
    cgroup_mounts,
    kill_pids,
    rmdir_up,
    v1_rate_counters,
)

log = logging.getLogger(__name__)

IMAGE = "testbed-node:1"
DOCKER_TOP = "testbed-docker"
LABEL_RUN = "testbed.run_id"
LABEL_NODE = "testbed.node"
LABEL_IMAGE = "testbed.image"
RESIDENT = ["/usr/bin/sleep", "infinity"]
#: Tasks a node may hold: its workers' threads count (Ray-free Python workers use a few each).
PIDS_LIMIT = 1024
API_TIMEOUT_S = 30
#: The janitor's patience with a daemon that does not answer: it must not hold up every run's cleanup.
JANITOR_TIMEOUT_S = 5
START_HINT = (
    "start it as root with `dockerd --iptables=false --ip6tables=false --bridge=none &` "
    "(Debian: apt-get install docker.io), or use envelope: cgroup"
)
_IMAGE_DIRS = ("usr", "lib", "lib64", "bin", "proc", "sys", "dev", "tmp", "etc")
_HOST_RO = ("/usr", "/lib", "/lib64")


def client(timeout: float = API_TIMEOUT_S):
    """A client of the local daemon, pinged; EnvelopeUnavailable with one line when it is absent or down."""
    try:
        import docker
    except ImportError as e:  # pragma: no cover - a dependency of the package
        raise EnvelopeUnavailable(
            f"envelope docker: the Docker SDK is not installed ({e}): pip install docker"
        ) from None
    try:
        c = docker.from_env(timeout=timeout)
        c.ping()
    except Exception as e:  # noqa: BLE001 - every way of not reaching the daemon is the same one line
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        why = " ".join(str(e).split())
        if len(why) > 160:
            why = why[:160] + "..."
        raise EnvelopeUnavailable(
            f"envelope docker: dockerd is not reachable at {where} ({why}); {START_HINT}"
        ) from None
    return c


def probe() -> str | None:
    """None if the docker envelope can work here, else why not (one line)."""
    try:
        c = client()
    except EnvelopeUnavailable as e:
        return str(e)
    try:
        info = c.info()
    finally:
        c.close()
    if info.get("CgroupVersion", "1") != "1" or info.get("CgroupDriver") != "cgroupfs":
        return (
            f"envelope docker: dockerd uses cgroup v{info.get('CgroupVersion')} with the "
            f"{info.get('CgroupDriver')} driver; this envelope joins workers into the container's cgroup v1 "
            "directories and needs cgroup v1 with the cgroupfs driver (use envelope: cgroup)"
        )
    return None


def ensure_image(c) -> str:
    """The node image, imported once per daemon (see the module docstring); a lock keeps concurrent agents
    from importing it twice."""
    import docker

    with open("/tmp/testbed-docker-image.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            c.images.get(IMAGE)
            return IMAGE
        except docker.errors.ImageNotFound:
            pass
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for d in _IMAGE_DIRS:
                ti = tarfile.TarInfo(d)
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
        repo, tag = IMAGE.split(":")
        c.api.import_image_from_data(
            buf.getvalue(), repository=repo, tag=tag, changes=[f"LABEL {LABEL_IMAGE}=1"]
        )
        return IMAGE


def _mount_of() -> dict[frozenset[str], str]:
    """controllers of a hierarchy (as /proc/PID/cgroup names them; {} for the v2 one) -> its mount point."""
    out: dict[frozenset[str], str] = {}
    for mnt, fstype, ctrls, _ in cgroup_mounts():
        out[frozenset() if fstype == "cgroup2" else frozenset(ctrls)] = mnt
    return out


def cgroup_dirs(pid: int) -> dict[str, str]:
    """hierarchy name ('cpu,cpuacct', 'freezer', '' for v2, ...) -> directory of ``pid``'s cgroup there,
    for every mounted hierarchy where that is not the root."""
    mounts = _mount_of()
    dirs: dict[str, str] = {}
    for line in _read(f"/proc/{pid}/cgroup").splitlines():
        _, ctrls, path = line.split(":", 2)
        mnt = mounts.get(frozenset(ctrls.split(",")) if ctrls else frozenset())
        if mnt is None or path == "/":
            continue
        dirs[ctrls] = os.path.join(mnt, path.lstrip("/"))
    return dirs


class DockerEnvelope(_V1ProcsFiles, Envelope):
    """A container per node (module docstring)."""

    kind = "docker"
    fixes_rate = True

    def __init__(self, *args, memory_mb: float | None = None, pids_limit: int = PIDS_LIMIT, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.memory_mb = memory_mb
        self.pids_limit = pids_limit
        self.quota_us = self._quota_us()
        self.container_name = f"testbed-{self.run_id}-{self.name}"
        self.cgroup_parent = f"/{DOCKER_TOP}/{self.run_id}"
        self._client: Any = None
        self.container: Any = None
        self.resident_pid: int | None = None
        self.dirs: dict[str, str] = {}
        self._procs_files: list[str] = []
        self.startup_s: float | None = None

    # --- life cycle ------------------------------------------------------------------------------------

    def create(self) -> None:
        t0 = time.monotonic()
        self._client = client()
        image = ensure_image(self._client)
        import docker

        mounts = [docker.types.Mount(p, p, type="bind", read_only=True) for p in _HOST_RO if os.path.isdir(p)]
        mem = {}
        if self.memory_mb is not None:
            limit = int(self.memory_mb * 2**20)
            mem = {"mem_limit": limit, "memswap_limit": limit}
        self.container = self._client.containers.run(
            image,
            RESIDENT,
            name=self.container_name,
            detach=True,
            labels={LABEL_RUN: self.run_id, LABEL_NODE: str(self.node)},
            environment={MARK_RUN_ID: self.run_id, MARK_NODE: str(self.node)},
            network_mode="host",
            pid_mode="host",
            cgroup_parent=self.cgroup_parent,
            cpu_period=self.period_us,
            cpu_quota=self.quota_us,
            pids_limit=self.pids_limit,
            mounts=mounts,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            **mem,
        )
        try:
            self.container.reload()
            self.resident_pid = int(self.container.attrs["State"]["Pid"])
            if not self.resident_pid:
                raise RuntimeError(f"container {self.container_name} is {self.container.status}, not running")
            self.dirs = cgroup_dirs(self.resident_pid)
            need = {"cpu", "cpuacct"}
            have = {c for k in self.dirs for c in k.split(",")}
            if not need <= have:
                raise EnvelopeUnavailable(
                    f"envelope docker: container {self.container_name} has no cgroup v1 "
                    f"{sorted(need - have)} (dockerd must use cgroup v1 and the cgroupfs driver); "
                    "use envelope: cgroup"
                )
            # The cgroup envelope's weight for testbed-docker/ and testbed-docker/<run_id> (Docker made them
            # with the default 1024), for the cgroup envelope's reason: a quota is a ceiling, and beside busy
            # processes nodes at the default weight get far less than their rate (envelope.py's docstring).
            run_dir = os.path.dirname(self._dir("cpu"))
            for d in (os.path.dirname(run_dir), run_dir):
                _write(os.path.join(d, "cpu.shares"), str(SHARES_V1))
            got = int(_read(os.path.join(self._dir("cpu"), "cpu.cfs_quota_us")))
            if got != self.quota_us:
                raise RuntimeError(f"{self.container_name}: cpu.cfs_quota_us is {got}, not {self.quota_us}")
            # A worker joins every cgroup of the container (its pids and memory limits too).
            self._procs_files = [os.path.join(d, "cgroup.procs") for d in self.dirs.values()]
        except BaseException:
            self.destroy()
            raise
        self.startup_s = time.monotonic() - t0

    def _dir(self, controller: str) -> str:
        for k, d in self.dirs.items():
            if controller in k.split(","):
                return d
        raise KeyError(controller)

    # join_self, join_files, add: _V1ProcsFiles's. The fork server stays in the agent's cgroup, as with the
    # cgroup envelope; each forked worker joins the container's cgroups before its first instruction.

    def pids(self) -> list[int]:
        """The node's processes: everything in the container's cgroups but its resident."""
        return [p for p in super().pids() if p != self.resident_pid]

    def cpu_usage_s(self) -> float:
        return int(_read(os.path.join(self._dir("cpuacct"), "cpuacct.usage"))) / 1e9

    def configured_rate(self) -> float | None:
        return self.quota_us / self.period_us

    def rate_counters(self) -> tuple[float, float, int, list[int]] | None:
        usage, throttled, periods, tids = v1_rate_counters(self._dir("cpuacct"), self._dir("cpu"))
        return usage, throttled, periods, [t for t in tids if t != self.resident_pid]

    def set_rate(self, cpu_rate: float) -> None:
        """A new CPU rate for the node, through the daemon (``docker update``), checked in the cgroup."""
        old = self.cpu_rate
        self.cpu_rate = cpu_rate
        try:
            quota = self._quota_us()
        except ValueError:
            self.cpu_rate = old
            raise
        self.container.update(cpu_period=self.period_us, cpu_quota=quota)
        got = int(_read(os.path.join(self._dir("cpu"), "cpu.cfs_quota_us")))
        if got != quota:
            raise RuntimeError(f"{self!r}: docker update left cpu.cfs_quota_us at {got}, not {quota}")
        self.quota_us = quota

    def destroy(self) -> None:
        """Kill the workers, remove the container, remove the run's parent cgroups if empty. Idempotent."""
        deadline = time.monotonic() + DESTROY_TIMEOUT_S
        while self._procs_files:
            left = self.pids()
            if not left:
                break
            kill_pids(left)
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self!r}: processes {left} survived SIGKILL for {DESTROY_TIMEOUT_S} s")
            time.sleep(0.005)
        if self._client is not None:
            remove_containers(self.run_id, client_=self._client, name=self.container_name)
            self._client.close()
            self._client = None
        self.container = None
        self._procs_files = []
        remove_parent_cgroups(self.run_id)


def remove_containers(run_id: str | None, client_=None, name: str | None = None) -> dict[str, list[str]]:
    """Remove (force: SIGKILL) the containers labelled with ``run_id`` (any run's when None); paused ones
    are unpaused first. Returns {"removed": names, "errors": lines}. Without a reachable daemon: nothing
    is done, and an error line says so only if the run left a cgroup under testbed-docker/."""
    report: dict[str, list[str]] = {"removed": [], "errors": []}
    own = client_ is None
    try:
        c = client_ if client_ is not None else client(JANITOR_TIMEOUT_S)
    except EnvelopeUnavailable as e:
        if leftover_run_ids(run_id):
            report["errors"].append(f"containers of run {run_id or '*'} may be left: {e}")
        return report
    try:
        flt = {"label": f"{LABEL_RUN}={run_id}" if run_id else LABEL_RUN}
        if name is not None:
            flt["name"] = name
        for ct in c.containers.list(all=True, filters=flt):
            try:
                if ct.status == "paused":
                    ct.unpause()
                ct.remove(force=True)
                report["removed"].append(ct.name)
            except Exception as e:  # noqa: BLE001 - one container's failure must not stop the others
                if "No such container" not in str(e):
                    report["errors"].append(f"remove container {ct.name}: {e}")
    finally:
        if own:
            c.close()
    return report


def leftover_run_ids(run_id: str | None = None) -> set[str]:
    """Run ids with a directory under testbed-docker/ in some cgroup hierarchy."""
    out: set[str] = set()
    for mnt, _, _, _ in cgroup_mounts():
        top = os.path.join(mnt, DOCKER_TOP)
        if os.path.isdir(top):
            out |= {n for n in os.listdir(top) if os.path.isdir(os.path.join(top, n))}
    return out if run_id is None else out & {run_id}


def remove_parent_cgroups(run_id: str) -> list[str]:
    """rmdir testbed-docker/<run_id> (and testbed-docker/ when empty) in every hierarchy; the containers'
    own cgroups are Docker's to remove: a non-empty parent is left and reported by the caller."""
    removed: list[str] = []
    for mnt, _, _, _ in cgroup_mounts():
        d = os.path.join(mnt, DOCKER_TOP, run_id)
        if os.path.isdir(d):
            removed += rmdir_up(d, mnt)
    return removed
