"""The committed dashboards are exactly what the generator writes now, every panel queries something the
exporters really expose, and the shipped provisioning and compose files point at each other."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from prometheus_client import generate_latest
from testbed.monitoring import dashboards
from testbed.monitoring.metrics import CoordinatorMetrics, NodeMetrics

from ..conftest import require

MON = Path(__file__).resolve().parents[2] / "monitoring"


def test_committed_json_equals_the_generator_output():
    built = dashboards.build_all()
    committed = sorted(p.name for p in (MON / "dashboards").glob("*.json"))
    regen = "testbed dashboards generate --out monitoring/dashboards"
    assert committed == sorted(built), f"run `{regen}` and commit the result"
    for name, d in built.items():
        assert (MON / "dashboards" / name).read_text() == dashboards.render(d), (
            f"monitoring/dashboards/{name} is stale: run `{regen}` and commit it"
        )


def test_every_panel_has_a_promql_target_and_the_shape_grafana_needs():
    uids = set()
    for name, d in dashboards.build_all().items():
        assert d["schemaVersion"] == dashboards.SCHEMA_VERSION and d["uid"] not in uids
        uids.add(d["uid"])
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert (
            variables["datasource"]["type"] == "datasource"
            and variables["datasource"]["query"] == "prometheus"
        )
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)) and d["panels"], name
        for p in d["panels"]:
            assert p["targets"], (name, p["title"])
            for t in p["targets"]:
                assert t["expr"].strip() and t["datasource"]["uid"] == "${datasource}", (name, p["title"])
            g = p["gridPos"]
            assert 0 <= g["x"] and g["x"] + g["w"] <= 24
        if "$node" in json.dumps(d["panels"]):
            assert "node" in variables, name
    assert uids == {"testbed-overview", "testbed-node", "testbed-deadlines"}  # stable: push overwrites


def test_every_metric_a_panel_queries_is_exposed():
    node = NodeMetrics(0, "gang", 1.0, 1.0, 1.0, ["compute"])
    coord = CoordinatorMetrics("gang", 1.0, ["compute"])
    exposed = set()
    for r in (node.registry, coord.registry):
        exposed |= set(re.findall(r"^(testbed_\w+)[{ ]", generate_latest(r).decode(), re.M))
    for d in dashboards.build_all().values():
        for title, expr in dashboards.expressions(d):
            for name in re.findall(r"\btestbed_\w+", expr):
                assert name in exposed, (d["uid"], title, name)


def test_every_expression_is_valid_promql(tmp_path):
    """promtool parses each expression (as a recording rule) with the template variables filled in."""
    require(
        shutil.which("promtool") is not None,
        "promtool is not installed (Debian: apt-get install prometheus; .ci/run does)",
    )
    rules = []
    for d in dashboards.build_all().values():
        for i, (_, expr) in enumerate(dashboards.expressions(d)):
            e = expr.replace("$__rate_interval", "30s").replace("$node", "0").replace("$run_id", ".*")
            rules.append({"record": f"check:{d['uid'].replace('-', '_')}:{i}", "expr": e})
    f = tmp_path / "rules.yml"
    f.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    p = subprocess.run(["promtool", "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr


def test_provisioning_and_compose_files_agree():
    ds = yaml.safe_load((MON / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert ds["datasources"][0]["type"] == "prometheus"
    prov = yaml.safe_load((MON / "provisioning" / "dashboards" / "testbed.yml").read_text())
    path = prov["providers"][0]["options"]["path"]
    compose = yaml.safe_load((MON / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["prometheus"]["image"].startswith("prom/prometheus")
    assert services["grafana"]["image"].startswith("grafana/grafana")
    assert all(s["network_mode"] == "host" for s in services.values())
    assert f"./dashboards:{path}:ro" in services["grafana"]["volumes"]
    assert "./provisioning:/etc/grafana/provisioning:ro" in services["grafana"]["volumes"]
    prom = yaml.safe_load((MON / "prometheus" / "prometheus.yml").read_text())
    sd = prom["scrape_configs"][0]["file_sd_configs"][0]["files"][0]
    assert any(v.endswith(":/testbed-run:ro") for v in services["prometheus"]["volumes"])
    assert sd == "/testbed-run/prometheus/targets.json"
    if shutil.which("promtool"):
        cfg = str(MON / "prometheus" / "prometheus.yml")
        p = subprocess.run(["promtool", "check", "config", "--syntax-only", cfg],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert p.returncode == 0, p.stdout + p.stderr


def test_generate_command_writes_the_committed_files(tmp_path):
    cmd = [sys.executable, "-m", "testbed.cli", "dashboards", "generate", "--out", str(tmp_path)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for f in (MON / "dashboards").glob("*.json"):
        assert (tmp_path / f.name).read_text() == f.read_text()
