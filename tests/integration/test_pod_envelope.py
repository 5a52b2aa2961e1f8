"""envelope: pod, in a delegated cgroup v2 subtree, as a pod sees it (issue 13).

A pod is given its own cgroup, seen through a cgroup namespace: ``/proc/self/cgroup`` says ``0::/`` and
``/sys/fs/cgroup`` (cgroup2) shows the pod's cgroup as the root. The test builds exactly that around a
real process: a cgroup D made for it in this host's cgroup2 hierarchy (the kubelet's part), then
``unshare --cgroup --mount`` and a fresh cgroup2 mount inside, where the envelope runs.

What this host cannot show: every controller but hugetlb is bound to cgroup v1 here, so the cpu controller
cannot be enabled in v2, and neither cpu.max (the node's rate) nor its accuracy can be tested. The tree
logic is tested with hugetlb in the cpu controller's place: finding the base cgroup, moving the base's
processes to a leaf so that controllers can be handed down, enabling them down to the node, joining,
CPU accounting (cpu.stat usage_usec is core v2), cgroup.kill, and removal up to, never above, the base.
The refusal of the cpu controller is tested as the one line it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from testbed.emulator.mechanism import envelope as envmod

from ..conftest import require

HELPER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    from testbed.emulator.mechanism import envelope as envmod
    from testbed.emulator.mechanism.process import spawn
    out = {"proc_cgroup": open("/proc/self/cgroup").read()}
    try:
        envmod.PodEnvelope("podrun", 0, 1.0, 1.0)
    except envmod.EnvelopeUnavailable as e:
        out["cpu_refusal"] = str(e)
    env = envmod.PodEnvelope("podrun", 2, 1.0, 1.0, controllers=("hugetlb",))
    out["base"] = env.base
    env.create()
    out["after_create"] = sorted(os.listdir(env.base))
    out["base_procs"] = open(os.path.join(env.base, "cgroup.procs")).read().split()
    leaf = os.path.join(env.base, "testbed-procs", "cgroup.procs")
    out["leaf_has_me"] = str(os.getpid()) in open(leaf).read().split()
    out["node_controllers"] = open(os.path.join(env.dir, "cgroup.controllers")).read().split()
    busy = spawn([sys.executable, "-c", "while True: pass"], env=None, cwd=None, stdout=None, stderr=None,
                 envelope=env)
    time.sleep(0.4)
    out["worker_cgroup"] = open(f"/proc/{busy.pid}/cgroup").read().strip()
    out["pids_ok"] = env.pids() == [busy.pid]
    u0 = env.cpu_usage_s(); time.sleep(0.2)
    out["cpu"] = [u0, env.cpu_usage_s()]
    # A second node of the same agent process: found from the leaf, the base is still the pod's cgroup.
    env2 = envmod.PodEnvelope("podrun", 3, 1.0, 1.0, controllers=("hugetlb",))
    env2.create()
    out["second_base"] = env2.base
    env.destroy()  # cgroup.kill: the worker dies
    out["worker_rc"] = busy.reap(5)
    env2.destroy()
    out["after_destroy"] = sorted(d for d in os.listdir(env.base) if os.path.isdir(os.path.join(env.base, d)))
    print(json.dumps(out))
    """
)


def _v2_root() -> str | None:
    for mnt, fstype, _, writable in envmod.cgroup_mounts():
        if fstype == "cgroup2" and writable:
            return mnt
    return None


@pytest.mark.cgroup
def test_pod_envelope_in_a_delegated_cgroup_namespace(tmp_path):
    root = _v2_root()
    require(root is not None, "no writable cgroup2 mount here")
    require(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare(1)")
    hugetlb = "hugetlb" in open(os.path.join(root, "cgroup.controllers")).read().split()
    require(hugetlb, "the cgroup2 hierarchy here offers no controller to test the tree logic with")
    d = os.path.join(root, f"testbed-podtest-{uuid.uuid4().hex[:8]}")
    subtree = os.path.join(root, "cgroup.subtree_control")
    had = "hugetlb" in open(subtree).read().split()
    os.mkdir(d)
    script = tmp_path / "helper.py"
    script.write_text(HELPER)
    try:
        if not had:
            # The kubelet's part: the pod's cgroup is offered the controller (enabled for root's children).
            with open(subtree, "w") as f:
                f.write("+hugetlb")
        # Enter D, then a new cgroup namespace rooted there and a private mount namespace with cgroup2
        # mounted afresh: what a container sees.
        inner = f"umount -l {root} && mount -t cgroup2 cgroup2 {root} && exec {sys.executable} {script}"
        launcher = (
            f"import os; open({os.path.join(d, 'cgroup.procs')!r}, 'w').write(str(os.getpid())); "
            "os.execvp('unshare', ['unshare', '--cgroup', '--mount', '--propagation', 'private', "
            f"'sh', '-c', {inner!r}])"
        )
        p = subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        out = json.loads(p.stdout.strip().splitlines()[-1])
        # Inside, the process's cgroup is the namespace's root and the mount shows only D.
        assert "0::/\n" in out["proc_cgroup"] and out["base"] == root
        assert "the cpu controller is not available" in out["cpu_refusal"]
        assert "bound to the cgroup v1 hierarchy" in out["cpu_refusal"] and "\n" not in out["cpu_refusal"]
        # The base's processes moved to the leaf, then hugetlb was handed down to the node.
        assert out["base_procs"] == [] and out["leaf_has_me"]
        assert out["after_create"].count("testbed-procs") == 1 and "testbed" in out["after_create"]
        assert out["node_controllers"] == ["hugetlb"]
        assert "0::/testbed/podrun/node2" in out["worker_cgroup"].splitlines()
        assert out["pids_ok"]
        u0, u1 = out["cpu"]
        assert u1 > u0 > 0
        assert out["second_base"] == root
        assert out["worker_rc"] == -9
        assert out["after_destroy"] == ["testbed-procs"]  # node, run and testbed/ went; the pod's leaf stays
        # Seen from the host: everything stayed inside D.
        assert sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))) == ["testbed-procs"]
        assert not os.path.exists(os.path.join(root, "testbed", "podrun"))
    finally:
        for sub in ("testbed-procs", ""):
            path = os.path.join(d, sub) if sub else d
            if os.path.isdir(path):
                for pid in open(os.path.join(path, "cgroup.procs")).read().split():
                    subprocess.run(["kill", "-9", pid], check=False)
        for path in (os.path.join(d, "testbed-procs"), d):
            for _ in range(50):
                try:
                    if os.path.isdir(path):
                        os.rmdir(path)
                    break
                except OSError:
                    import time

                    time.sleep(0.05)
        if not had:
            with open(subtree, "w") as f:
                f.write("-hugetlb")


def test_pod_envelope_refuses_outside_a_v2_cgroup(tmp_path):
    fake = tmp_path / "cgroup"
    fake.write_text("4:memory:/x\n1:cpu:/\n")
    with pytest.raises(envmod.EnvelopeUnavailable, match=r"no cgroup v2 line \(0::\).*Delegate=yes"):
        envmod.own_v2_cgroup(str(fake))


@pytest.mark.cgroup
def test_cgroup_v2_envelope_builds_its_tree_from_the_hierarchys_root():
    """envelope: cgroup-v2 (a host whose controllers are all in v2) on this host's real cgroup2 mount,
    hugetlb in cpu's place (see the module doc): the tree from the root, joining, accounting, cgroup.kill,
    and removal of everything it made."""
    from testbed.emulator.mechanism.process import spawn

    root = _v2_root()
    require(root is not None, "no writable cgroup2 mount here")
    hugetlb = "hugetlb" in open(os.path.join(root, "cgroup.controllers")).read().split()
    require(hugetlb, "the cgroup2 hierarchy here offers no controller to test the tree logic with")
    run = f"v2test-{uuid.uuid4().hex[:8]}"
    with pytest.raises(envmod.EnvelopeUnavailable) as ei:
        envmod.CgroupV2Envelope(run, 0, 1.0, 1.0)
    assert "the cpu controller is not available" in str(ei.value) and "\n" not in str(ei.value)
    subtree = os.path.join(root, "cgroup.subtree_control")
    had = "hugetlb" in open(subtree).read().split()
    env = envmod.CgroupV2Envelope(run, 1, 1.0, 1.0, controllers=("hugetlb",))
    assert not env.fixes_rate and env.configured_rate() is None
    busy = None
    try:
        env.create()
        assert env.dir == os.path.join(root, "testbed", run, "node1")
        assert open(os.path.join(env.dir, "cgroup.controllers")).read().split() == ["hugetlb"]
        busy = spawn([sys.executable, "-c", "while True: pass"], env=None, cwd=None, stdout=None, stderr=None,
                     envelope=env)  # fmt: skip
        assert f"0::/testbed/{run}/node1" in open(f"/proc/{busy.pid}/cgroup").read().splitlines()
        assert env.pids() == [busy.pid]
        deadline = time.monotonic() + 5
        while env.cpu_usage_s() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        u1 = env.cpu_usage_s()
        time.sleep(0.2)
        assert env.cpu_usage_s() > u1 > 0
        env.destroy()  # cgroup.kill: the worker dies
        assert busy.reap(5) == -9
        busy = None
        assert not os.path.exists(os.path.join(root, "testbed", run))
    finally:
        if busy is not None:
            busy.kill()
        env.destroy()
        if not had:
            with open(subtree, "w") as f:
                f.write("-hugetlb")
