"""k8s/: every shipped scenario renders to manifests that validate without a cluster, and k8s/base is the
render of the quickstart (issue 13).

Built-in kinds (the ConfigMaps, and every pod template of the RayJob as a PodTemplate) are checked by
kubernetes-validate in strict mode against the Kubernetes OpenAPI schema it ships; RayJob and PodMonitor
against k8s/schemas/crds.schema.json, written from the CRDs' documented fields. ``kubectl kustomize`` (not a
Python package: .ci/run installs Debian's kubernetes-client, 1.20, whose kustomize builds the same objects)
must build the objects the tests validate; without kubectl the test skips, and fails under CI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate as kv
import pytest
import yaml

from testbed.deploy import k8s
from testbed.scenario import load

from ..conftest import require

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))
SCHEMA = json.loads((ROOT / "k8s" / "schemas" / "crds.schema.json").read_text())
K8S_VERSION = kv.latest_version()


def crd_errors(obj: dict) -> list[str]:
    schema = {**SCHEMA, "$ref": f"#/$defs/{obj['kind']}"}
    v = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(obj)]


def builtin_errors(obj: dict) -> str | None:
    try:
        kv.validate(obj, K8S_VERSION, strict=True)
    except kv.ValidationError as e:
        return str(e)
    return None


def pod_templates(rayjob: dict) -> list[dict]:
    spec = rayjob["spec"]["rayClusterSpec"]
    return [spec["headGroupSpec"]["template"], *(g["template"] for g in spec["workerGroupSpecs"])]


def as_pod_template(template: dict) -> dict:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template}


def validate_all(objs: list[dict]) -> None:
    for obj in objs:
        if obj["kind"] in ("RayJob", "RayCluster", "PodMonitor"):
            assert crd_errors(obj) == [], obj["kind"]
        else:
            assert builtin_errors(obj) is None, (obj["kind"], builtin_errors(obj))
        if obj["kind"] == "RayJob":
            for t in pod_templates(obj):
                assert builtin_errors(as_pod_template(t)) is None, builtin_errors(as_pod_template(t))


def test_base_is_the_render_of_the_quickstart():
    files = k8s.render(ROOT / "scenarios" / "quickstart.yaml")
    shipped = {p.name for p in k8s.BASE.iterdir()}
    fix = "run `testbed k8s render scenarios/quickstart.yaml --out k8s/base --force` and commit it"
    assert shipped == set(files), fix
    for name, content in files.items():
        assert (k8s.BASE / name).read_text() == content, f"k8s/base/{name} is stale: {fix}"


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_shipped_scenario_renders_to_valid_manifests(path, tmp_path):
    files = k8s.render(path)
    objs = k8s.objects(files)
    validate_all(objs)
    by_kind = {o["kind"]: o for o in objs if o["kind"] != "ConfigMap"}
    cms = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    job, mon = by_kind["RayJob"], by_kind.get("PodMonitor")
    # The scenario in the ConfigMap is valid and is what the entrypoint runs, in pods.
    k8s.write(files, tmp_path / "out")
    scn = load(tmp_path / "out" / "scenario.yaml")
    assert scn.cluster.envelope == "pod" and scn.cluster.nodes_per_process == 1
    assert scn.cluster.ray_address == "auto"  # the entrypoint joins the RayJob's cluster
    assert job["spec"]["entrypoint"].startswith(f"testbed run {k8s.MOUNT}/scenario.yaml ")
    assert "scenario.yaml" in cms["testbed-scenario"]["data"]
    if scn.workload.trace is not None:
        assert set(cms["testbed-scenario"]["binaryData"]) == {Path(scn.workload.trace.path).name}
    # One emulated node per worker pod (and one for a head node: paper 001's divisible-load head, an MPI
    # job's process manager); every pod has the named metrics port the scenario binds; each worker pod
    # offers one agent process's place.
    (group,) = job["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    from testbed.scenario.workload import build

    pods = scn.cluster.nodes + (1 if any(j.kind.head for j in build(scn)) else 0)
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == pods
    assert json.loads(group["rayStartParams"]["resources"]) == {"testbed_node": 1}
    # A scenario without monitoring gets no PodMonitor and no dashboards: nothing would be scraped.
    assert (mon is not None) == scn.monitoring.enabled == ("testbed-grafana-dashboards" in cms)
    for t in pod_templates(job):
        (c,) = t["spec"]["containers"]
        assert {"name": "metrics", "containerPort": k8s.METRICS_PORT, "protocol": "TCP"} in c["ports"]
        assert c["securityContext"] == {"privileged": True}
        assert c["resources"]["requests"] == c["resources"]["limits"]  # Guaranteed QoS: a CFS quota
        assert {v["configMap"]["name"] for v in t["spec"]["volumes"] if "configMap" in v} <= set(cms)
        if mon is not None:
            # The exporters bind the port the pods name, and the PodMonitor selects every pod of the job.
            assert scn.monitoring.port == k8s.METRICS_PORT and scn.monitoring.host == "0.0.0.0"
            assert mon["spec"]["selector"]["matchLabels"].items() <= t["metadata"]["labels"].items()
    if mon is not None:
        assert mon["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
        board = json.loads(cms["testbed-grafana-dashboards"]["data"]["overview.json"])
        assert {"panels", "uid"} <= set(board)


def test_the_schemas_catch_what_they_are_for():
    objs = k8s.objects(k8s.render(ROOT / "scenarios" / "quickstart.yaml"))
    job = next(o for o in objs if o["kind"] == "RayJob")
    mon = next(o for o in objs if o["kind"] == "PodMonitor")
    bad = json.loads(json.dumps(job))
    cluster = bad["spec"]["rayClusterSpec"]
    cluster["workerGroupSpec"] = cluster.pop("workerGroupSpecs")  # misspelt
    assert any("workerGroupSpec" in e for e in crd_errors(bad))
    bad = json.loads(json.dumps(job))
    bad["spec"]["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0  # not a string
    assert any("rayStartParams/num-cpus" in e for e in crd_errors(bad))
    bad = json.loads(json.dumps(mon))
    bad["spec"]["podMetricsEndpoints"][0]["interval"] = "0.5s"  # Prometheus durations are integers
    assert crd_errors(bad)
    t = json.loads(json.dumps(pod_templates(job)[1]))
    t["spec"]["containers"][0]["securityContex"] = t["spec"]["containers"][0].pop("securityContext")
    assert "securityContex" in (builtin_errors(as_pod_template(t)) or "")
    t["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "one"
    assert builtin_errors(as_pod_template(t))


def test_render_command_writes_the_folder_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "k"
    cmd = [sys.executable, "-m", "testbed.cli", "k8s", "render", str(ROOT / "scenarios" / "quickstart.yaml")]
    p = subprocess.run([*cmd, "--out", str(out), "--image", "reg.example/testbed:1"], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert f"kubectl apply -k {out}" in p.stdout
    assert "image: reg.example/testbed:1" in (out / "rayjob.yaml").read_text()
    p = subprocess.run([*cmd, "--out", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    (line,) = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert "--out" in line and "--force" in line


def test_render_refuses_a_bad_scenario_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "b", "cluster": {"nodes": 0}}))
    with pytest.raises(Exception, match=r"cluster\.nodes"):
        k8s.render(bad)


def test_kubectl_kustomize_builds_the_objects_validated_here():
    kubectl = shutil.which("kubectl")
    require(kubectl is not None, "kubectl is not installed (Debian: apt-get install kubernetes-client)")
    built = subprocess.run([kubectl, "kustomize", str(k8s.BASE)], capture_output=True, text=True, timeout=60)
    assert built.returncode == 0, built.stderr
    objs = list(yaml.safe_load_all(built.stdout))
    ours = k8s.objects({p.name: p.read_text() for p in k8s.BASE.iterdir()})
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(objs, key=key) == sorted(ours, key=key)


def test_the_ray_dashboard_stays_on_the_head_pods_loopback():
    objs = k8s.objects(k8s.render(ROOT / "scenarios" / "quickstart.yaml"))
    (job,) = [o for o in objs if o["kind"] == "RayJob"]
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]
    # The dashboard's job API runs code: it listens on the pod's loopback only, where the submitter that
    # SidecarMode puts in the head pod reaches it, and its port is not among the pod's named ports.
    assert head["rayStartParams"]["dashboard-host"] == "127.0.0.1"
    assert job["spec"]["submissionMode"] == "SidecarMode"
    (c,) = head["template"]["spec"]["containers"]
    assert 8265 not in {p["containerPort"] for p in c["ports"]}
    assert head["template"]["spec"]["restartPolicy"] == "Never"  # SidecarMode's head must not restart


def test_the_rayjobs_cluster_uses_token_authentication():
    # KubeRay then gives every Ray container RAY_AUTH_MODE=token and the cluster's token: without it the
    # entrypoint's run refuses to join (cluster.ray_address), and Ray's servers take anyone's code.
    for path in SCENARIOS:
        (job,) = [o for o in k8s.objects(k8s.render(path)) if o["kind"] == "RayJob"]
        assert job["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}, path.name
    bad = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "x"}}
    bad["spec"] = {
        "headGroupSpec": job["spec"]["rayClusterSpec"]["headGroupSpec"],
        "authOptions": {"mode": "on"},
    }
    assert crd_errors(bad)  # the schema knows the field's values
