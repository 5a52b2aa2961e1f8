"""Kubernetes manifests for a scenario: a kustomize folder that runs it on KubeRay (issue 13).

``testbed k8s render SCENARIO --out DIR`` writes, for ``kubectl apply -k DIR``:

* ``kustomization.yaml``: the resources below, and a ``configMapGenerator`` making ``testbed-scenario`` from
  ``scenario.yaml`` (and the SWF trace a trace scenario replays), mounted at ``/etc/testbed`` in every pod;
* ``rayjob.yaml``: a RayJob (``ray.io/v1``) whose entrypoint is ``testbed run /etc/testbed/scenario.yaml``,
  with a ``rayClusterSpec``: a head group (the driver and the coordinator; ``num-cpus: "0"`` so no work is
  placed there) and one worker group, ``nodes`` pods of one emulated node each (one more for the head node
  of a workload whose program has one: paper 001's divisible-load head);
* ``podmonitor.yaml``: a PodMonitor (``monitoring.coreos.com/v1``) scraping the named port ``metrics`` of
  every pod of the job;
* ``grafana-dashboards.yaml``: the dashboards of ``monitoring/dashboards`` as a ConfigMap labelled
  ``grafana_dashboard: "1"`` (the Grafana sidecar's convention), generated from ``monitoring.dashboards``.

``k8s/base`` is this render of ``scenarios/quickstart.yaml``, and a test keeps it equal to it.

**One emulated node per worker pod.** A pod's CPU limit is then the node's CPU rate, enforced by the
kubelet as a CFS quota, exactly the quota the cgroup envelope sets (a quota, not a share); the node's
exporter binds the one fixed port the pod names ``metrics``, which a PodMonitor can select (several
agents in one pod would each need a port of their own); and a node fault is a pod fault, which Kubernetes
reports and restarts. The price is one raylet per node (about 0.1 core and 150 MB idle), which a cluster
that runs a scenario at TDF 1 (a real CPU per emulated CPU) can afford.

**Security context.** ``privileged: true``: Kubernetes mounts ``/sys/fs/cgroup`` read-only in any other
pod, and the node's envelope writes its subtree there (``envelope: pod``); privileged also grants SYS_NICE,
which negative nice values need. No capability list can make the cgroup mount writable.

**Across pods.** The pods' scenario sets ``cluster.ray_address: auto``: the entrypoint joins the RayJob's
cluster, each agent process goes to a Ray node offering the ``testbed_node`` resource (a worker pod declares
one in ``rayStartParams.resources``), the coordinator stays beside the driver on the head pod, and the
agents' events and logs come back to the driver's run folder through Ray at the end (docs/architecture.md,
"Across hosts"). tests/e2e/test_ray_join.py runs that on a multi-node Ray cluster of this host.

The manifests are validated (tests/unit/test_k8s.py) but were never applied to a Kubernetes cluster: none
can run on the machine this was written on.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import yaml

from testbed.monitoring import dashboards
from testbed.scenario import load
from testbed.scenario.model import read_doc
from testbed.scenario.workload import build

#: The image every pod runs: Ray plus this package (k8s/image/Dockerfile builds it).
IMAGE = "testbed:0.1.0"
RAY_VERSION = "2.60.0"  # the Ray this package is tested with (and the image is built on)
METRICS_PORT = 9400
MOUNT = "/etc/testbed"
RESULTS = "/results"
#: Kubernetes refuses a ConfigMap over 1 MiB; a trace is stored base64-encoded (4/3 of its size).
MAX_TRACE_BYTES = 700_000
LABEL = "app.kubernetes.io/name"
BASE = Path(__file__).resolve().parents[2] / "k8s" / "base"
_DNS = re.compile(r"[^a-z0-9-]+")
_MANIFESTS = ("rayjob.yaml", "podmonitor.yaml", "grafana-dashboards.yaml", "kustomization.yaml")


class RenderError(ValueError):
    """The scenario cannot be rendered; the message names the field and the fix."""


def _dns_name(name: str) -> str:
    s = _DNS.sub("-", name.lower()).strip("-")[:40].strip("-")
    return s or "scenario"


def pod_scenario(doc: dict) -> dict:
    """The scenario as the pods run it: the pod envelope, one node per agent process, TDF 1 unless the
    scenario fixes one, exporters on the fixed ``metrics`` port bound to the pod's address (Prometheus
    scrapes from another pod), the trace next to the scenario file."""
    doc = json.loads(json.dumps(doc))  # a deep copy of plain data
    cluster = doc.setdefault("cluster", {})
    cluster["envelope"] = "pod"
    cluster["nodes_per_process"] = 1  # one node per pod, each its own agent process
    cluster["ray_address"] = "auto"  # the RayJob's cluster: agents on the worker pods
    clock = doc.setdefault("clock", {})
    if clock.get("tdf", "auto") == "auto":
        # A node is a pod with a CPU of its own: no dilation. ("auto" would divide by the host's cores.)
        clock["tdf"] = 1.0
    mon = doc.setdefault("monitoring", {})
    if mon.get("enabled", True):
        mon.update(host="0.0.0.0", port=METRICS_PORT)
    trace = (doc.get("workload") or {}).get("trace")
    if isinstance(trace, dict) and isinstance(trace.get("path"), str):
        trace["path"] = Path(trace["path"]).name
    return doc


def _resources(cpu: float, memory_mb: float | None) -> dict:
    mem = f"{int(memory_mb)}Mi" if memory_mb else "1Gi"
    q = {"cpu": f"{round(cpu * 1000)}m", "memory": mem}
    # Requests equal to limits: the Guaranteed QoS class, so the kubelet's CFS quota is the node's rate.
    return {"requests": dict(q), "limits": dict(q)}


def _container(name: str, image: str, resources: dict, ports: list[dict]) -> dict:
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": ports,
        "resources": resources,
        "securityContext": {"privileged": True},
        "env": [{"name": "TESTBED_IN_POD", "value": "1"}],
        "volumeMounts": [
            {"name": "scenario", "mountPath": MOUNT, "readOnly": True},
            {"name": "results", "mountPath": RESULTS},
        ],
    }


def _pod_template(labels: dict, container: dict, restart: str | None = None) -> dict:
    return {
        "metadata": {"labels": labels},
        "spec": {
            **({"restartPolicy": restart} if restart else {}),
            "containers": [container],
            "volumes": [
                {"name": "scenario", "configMap": {"name": "testbed-scenario"}},
                {"name": "results", "emptyDir": {}},
            ],
        },
    }


def rayjob(name: str, scn: dict, image: str, head_node: bool = False) -> dict:
    """``head_node``: a program of the workload has a head process (ProgramKind.head), which runs on a node
    agent of its own beside the cluster's: one more worker pod."""
    c = scn.get("cluster") or {}
    groups = c.get("groups") or []
    nodes = int(c.get("nodes", sum(g["count"] for g in groups) or 16)) + (1 if head_node else 0)
    cores = int(c.get("cores_per_node", 1))
    # Heterogeneous nodes (cluster.groups) share one worker group: every pod is sized for the largest node
    # (each node's envelope then fixes its own rate inside its pod).
    rate = max((float(g.get("cpu_rate", 1.0)) for g in groups), default=float(c.get("cpu_rate", 1.0)))
    memory_mb = max((g["memory_mb"] for g in groups if g.get("memory_mb")), default=c.get("memory_mb"))
    labels = {LABEL: "testbed", "testbed/scenario": name}
    metrics = {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}
    head_ports = [
        {"name": "gcs-server", "containerPort": 6379},
        {"name": "client", "containerPort": 10001},
        metrics,
    ]
    # The head hosts the driver, the coordinator and Ray's control plane: 1 core, 2 GiB.
    head = _container("ray-head", image, _resources(1.0, 2048), head_ports)
    # A node pod: the emulated node's CPU (rate x cores) plus 0.25 core for its agent and raylet.
    worker = _container("ray-worker", image, _resources(rate * cores + 0.25, memory_mb), [metrics])
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": f"testbed-{name}", "labels": labels},
        "spec": {
            "entrypoint": f"testbed run {MOUNT}/scenario.yaml --out {RESULTS}/{name}",
            # The submitter runs beside the head, in its pod, and reaches the dashboard on the pod's loopback:
            # the dashboard's job API runs code, so it listens nowhere else (K8sJobMode's submitter pod would
            # need it on the pod's address).
            "submissionMode": "SidecarMode",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 3600,
            "rayClusterSpec": {
                "rayVersion": RAY_VERSION,
                # Ray's servers take RPCs (code to run) from anyone who reaches them unless the cluster uses
                # token authentication; KubeRay (1.5.1 and later) then makes a Secret with a random token
                # and gives every Ray container RAY_AUTH_MODE and RAY_AUTH_TOKEN, which the entrypoint's
                # run checks before joining (testbed/emulator/ray_auth.py).
                "authOptions": {"mode": "token"},
                "headGroupSpec": {
                    "serviceType": "ClusterIP",
                    "rayStartParams": {"num-cpus": "0", "dashboard-host": "127.0.0.1"},
                    # SidecarMode ties the submitter to the head pod, which therefore must not restart.
                    "template": _pod_template(labels, head, restart="Never"),
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "nodes",
                        "replicas": nodes,
                        "minReplicas": nodes,
                        "maxReplicas": nodes,
                        "rayStartParams": {
                            "num-cpus": str(cores),
                            "resources": json.dumps({"testbed_node": 1}),
                        },
                        "template": _pod_template(labels, worker),
                    }
                ],
            },
        },
    }


def _duration(seconds: float) -> str:
    """A Prometheus duration (integers only: 1s, 500ms)."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def podmonitor(name: str, scn: dict) -> dict:
    interval = float((scn.get("monitoring") or {}).get("scrape_interval_s", 1.0))
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": f"testbed-{name}", "labels": {LABEL: "testbed"}},
        "spec": {
            "selector": {"matchLabels": {LABEL: "testbed", "testbed/scenario": name}},
            "podMetricsEndpoints": [{"port": "metrics", "interval": _duration(interval), "path": "/metrics"}],
        },
    }


def dashboards_configmap() -> dict:

    built = dashboards.build_all()
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "testbed-grafana-dashboards",
            "labels": {LABEL: "testbed", "grafana_dashboard": "1"},
        },
        "data": {fn: dashboards.render(d) for fn, d in sorted(built.items())},
    }


def kustomization(files: list[str]) -> dict:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [r for r in ("rayjob.yaml", "podmonitor.yaml", "grafana-dashboards.yaml") if r in files],
        # The RayJob names the ConfigMap; kustomize cannot rewrite names inside a custom resource.
        "generatorOptions": {"disableNameSuffixHash": True},
        "configMapGenerator": [
            {"name": "testbed-scenario", "files": [f for f in files if f not in _MANIFESTS]}
        ],
    }


class _Dumper(yaml.SafeDumper):
    """No anchors (each manifest reads on its own), and multi-line strings (the dashboards' JSON) as
    literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, s: str) -> yaml.Node:
    style = "|" if "\n" in s else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)


_Dumper.add_representer(str, _str)


def _dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=110)


def render(scenario: str | Path, image: str = IMAGE) -> dict[str, str | bytes]:
    """file name -> content of the kustomize folder for ``scenario`` (validated first)."""

    path = Path(scenario)
    head_node = any(j.kind.head for j in build(load(path)))  # load: ScenarioError names the field and fix
    doc = read_doc(path)
    name = _dns_name(str(doc.get("name") or path.stem))
    scn = pod_scenario(doc)
    header = (
        f"# Generated by `testbed k8s render {path.name}` from {path.name}: the scenario as its pods run it\n"
        "# (envelope pod, one node per pod, TDF 1 unless set, exporters on the pod's `metrics` port).\n"
        "# Edit the source and render again.\n"
    )
    files: dict[str, str | bytes] = {"scenario.yaml": header + _dump(scn)}
    trace = (doc.get("workload") or {}).get("trace")
    if isinstance(trace, dict) and isinstance(trace.get("path"), str):
        src = (path.parent / trace["path"]).resolve()
        data = src.read_bytes()
        if len(data) > MAX_TRACE_BYTES:
            raise RenderError(
                f"workload.trace.path: {src} is {len(data)} bytes; a ConfigMap holds at most "
                f"{MAX_TRACE_BYTES} (1 MiB base64-encoded): cut the trace (workload.trace.max_jobs) into a "
                "smaller file, or mount it from a volume"
            )
        files[src.name] = data
    gen = "# Generated by `testbed k8s render` (testbed/deploy/k8s.py); do not edit.\n"
    files["rayjob.yaml"] = gen + _dump(rayjob(name, scn, image, head_node))
    if (scn.get("monitoring") or {}).get("enabled", True):
        # A scenario that turns monitoring off has no exporter to scrape: no PodMonitor, no dashboards.
        files["podmonitor.yaml"] = gen + _dump(podmonitor(name, scn))
        files["grafana-dashboards.yaml"] = gen + _dump(dashboards_configmap())
    files["kustomization.yaml"] = gen + _dump(kustomization(sorted(files)))
    return files


def write(files: dict[str, str | bytes], out: Path, force: bool = False) -> list[Path]:
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not force:
        raise RenderError(f"--out: {out} exists and is not empty; give another folder, or --force")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for fn, content in sorted(files.items()):
        p = out / fn
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        written.append(p)
    return written


def objects(files: dict[str, str | bytes]) -> list[dict]:
    """The objects ``kubectl apply -k`` would create from a rendered folder, built the way kustomize
    builds them (its resources, then its ConfigMap generator), for validation without kubectl."""
    kz = yaml.safe_load(files["kustomization.yaml"])
    objs = [yaml.safe_load(files[r]) for r in kz["resources"]]
    for gen in kz.get("configMapGenerator", []):
        cm: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}}
        for fn in gen["files"]:
            content = files[fn]
            if isinstance(content, bytes):
                cm.setdefault("binaryData", {})[fn] = base64.b64encode(content).decode()
            else:
                cm.setdefault("data", {})[fn] = content
        objs.append(cm)
    return objs
