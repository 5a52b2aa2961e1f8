"""Every bad input gets one line that names the field or the fix, exit status 2, no traceback and no
results folder (issue 12, Found 4). ``testbed validate`` and ``testbed run`` share the checks made before
Ray starts (runner.preflight), so each case is tried with both. Hosts that cannot run a scenario are
made real, not mocked: a read-only file system and read-only cgroup mounts come from a private mount
namespace (``unshare --mount``), so nothing outside the test sees them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ..conftest import require

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
TINY = {
    "name": "tiny",
    "cluster": {"nodes": 2},
    "clock": {"rate_probe_s": 0.3},
    "scheduler": {"name": "gang", "params": {"mpl": 2, "quantum_ms": 50}},
    "workload": {"seed": 1, "jobs": [{"id": "a", "size": 2, "app": {"iterations": 3, "gcomp": 5}}]},
}


# Paper 000's real-time pipeline (issue 10): two stages on two nodes, 5 ms of work per frame of 33 ms.
VISION = {
    **TINY,
    "scheduler": {"name": "2dcs-ps"},
    "workload": {
        "jobs": [
            {"id": "rt", "size": 2, "app": {"kind": "vision", "stages": ["decode", "edges"], "work_units": 5}}
        ]
    },
}
_APP = "workload.jobs.0.app"


def cli(args: list[str], cwd: Path, prefix: list[str] = (), env: dict | None = None, timeout: float = 120):
    return subprocess.run(
        [*prefix, sys.executable, "-m", "testbed.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line(p: subprocess.CompletedProcess, code: int = 2) -> str:
    """The one error line of a refused command (checks: exit status, nothing else on stderr)."""
    assert p.returncode == code, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stdout + p.stderr
    return lines[0].removeprefix("error: ")


def write(path: Path, doc) -> Path:
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str | bytes) else doc)
    return path


def _nothing_written(tmp_path: Path, out: Path | None = None) -> None:
    assert not (tmp_path / "results").exists(), "a default results folder was made for a bad input"
    if out is not None:
        assert not out.exists(), f"{out} was made for a bad input"


# Each case: (id, how to make the scenario file, extra arguments, a part of the one line it must give).
def _cases(tmp: Path) -> list[tuple[str, Path, list[str], str]]:
    bad_utf8 = tmp / "latin1.yaml"
    bad_utf8.write_bytes("name: caf\xe9\n".encode("latin-1"))
    tiny = write(tmp / "tiny.yaml", TINY)
    a_file = write(tmp / "a-file", "x")
    vision = write(tmp / "vision.yaml", VISION)
    full = tmp / "full"
    full.mkdir()
    (full / "notes.txt").write_text("mine")
    return [
        ("directory", tmp, [], f"scenario file {tmp} is a directory; give a YAML file"),
        ("missing", tmp / "nope.yaml", [], "does not exist"),
        ("not-utf8", bad_utf8, [], "not UTF-8 text (byte 0xe9 at offset 9); save the scenario as UTF-8"),
        ("not-yaml", write(tmp / "broken.yaml", "cluster: {nodes: 4\n"), [], "not valid YAML: "),
        ("top-level-list", write(tmp / "list.yaml", "- 1\n- 2\n"), [], "the top level must be a mapping"),
        ("unknown-field", tiny, ["--set", "cluster.nodez=4"], "cluster.nodez: unknown field; did you mean"),
        ("mpl-0", tiny, ["--set", "scheduler.params.mpl=0"], "scheduler.params.mpl: gang needs a whole"),
        (
            "paging-cost-negative",
            tiny,
            ["--set", "cluster.paging_cost=-1"],
            "cluster.paging_cost: Input should be greater than or equal to 0",
        ),
        (
            "quantum-0",
            tiny,
            ["--set", "scheduler.params.quantum_ms=0"],
            "scheduler.params.quantum_ms: gang needs a number of milliseconds >= 1",
        ),
        (
            "lead-above-quantum",
            tiny,
            ["--set", "scheduler.params.lead_ms=80"],
            "scheduler.params.lead_ms: gang plans each slot lead_ms ahead",
        ),
        ("unknown-param", tiny, ["--set", "scheduler.params.quantum=5"], "unknown parameter(s) quantum"),
        (
            "quota-200-nodes",
            tiny,
            ["--set", "cluster.nodes=200", "--set", "clock.control_reserve_cores=0.3"],
            "cluster.cfs_period_ms: a node's CPU quota would be",
        ),
        (
            "vision-more-stages-than-nodes",
            vision,
            ["--set", f"{_APP}.stages=[decode,edges,label]", "--set", "workload.jobs.0.size=3"],
            f"{_APP}.stages: 3 stages, one process each, but the cluster has 2 nodes; use fewer stages",
        ),
        (
            "vision-phi-above-d",
            vision,
            ["--set", f"{_APP}.work_units=[5,40]"],
            f"{_APP}.work_units.1: stage 1 needs 40 ms of CPU per frame on a node of rate 1 but a frame "
            "comes every period_ms = 33.3333 ms: no node can keep up (infeasible)",
        ),
        (
            "vision-unknown-operation",
            vision,
            ["--set", f"{_APP}.stages=[decode,sharpen]"],
            f"{_APP}.stages.1: Input should be 'decode', 'denoise',",
        ),
        (
            "vision-b-0",
            vision,
            ["--set", f"{_APP}.buffer=0"],
            f"{_APP}.buffer: b = 0: the display must buffer",
        ),
        (
            "vision-size-not-stages",
            vision,
            ["--set", "workload.jobs.0.size=1"],
            "workload.jobs.0.size: 1, but its vision program has 2 processes; set size: 2",
        ),
        ("bad-set", tiny, ["--set", "cluster.nodes"], "--set 'cluster.nodes': expected KEY=VALUE"),
        (
            "trace-path-too-long",
            tiny,
            ["--set", "workload.trace.path=" + "t" * 300 + ".swf"],  # one name over the OS's 255 bytes
            "workload.trace.path: the system refuses it: file name too long (304 characters); give the path",
        ),
        ("unknown-backend", tiny, ["--backend", "k8s"], "--backend: unknown backend 'k8s'"),
        ("out-is-a-file", tiny, ["--out", str(a_file)], f"--out {a_file}: is a file, not a folder"),
        ("out-below-a-file", tiny, ["--out", str(a_file / "x")], "is a file, so nothing can be created"),
        ("out-not-empty", tiny, ["--out", str(full)], "already holds 1 entry (notes.txt); results are never"),
        (
            "force-not-results",
            tiny,
            ["--out", str(full), "--force"],
            "--force replaces only a folder a testbed run made",
        ),
    ]


@pytest.mark.parametrize("command", ["validate", "run"])
def test_every_bad_input_gives_one_line_exit_2_and_writes_nothing(tmp_path, command):
    work, inputs = tmp_path / "work", tmp_path / "inputs"
    work.mkdir()
    inputs.mkdir()
    seen = []
    for name, scenario, extra, expect in _cases(inputs):
        args = [command, str(scenario), *extra] + (["-q"] if command == "run" else [])
        line = one_line(cli(args, cwd=work))
        assert expect in line, (name, line)
        _nothing_written(work)
        seen.append((name, line))
    assert (inputs / "full" / "notes.txt").read_text() == "mine"  # refused, so untouched
    print("\n".join(f"{command} {n}: {ln}" for n, ln in seen))  # the list for the closing note


def test_validate_refuses_to_join_a_ray_cluster_without_token_authentication(tmp_path):
    tiny = write(tmp_path / "tiny.yaml", TINY)
    joined = [str(tiny), "--set", "cluster.ray_address=127.0.0.1:6379", "--set", "clock.tdf=1"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    line = one_line(cli(["validate", *joined], cwd=tmp_path, env=env))
    assert line.startswith("cluster.ray_address: a joined Ray cluster must use token authentication, but "
                           "RAY_AUTH_MODE is not set here; start every node of the cluster and this run with "
                           "RAY_AUTH_MODE=token"), line  # fmt: skip
    p = cli(["validate", *joined], cwd=tmp_path, env={**env, "RAY_AUTH_MODE": "token"})
    assert p.returncode == 0, p.stdout + p.stderr
    _nothing_written(tmp_path)


def test_the_quota_error_at_the_automatic_tdf_names_the_period_or_the_way_out(tmp_path):
    tiny = write(tmp_path / "tiny.yaml", TINY)
    line = one_line(cli(["validate", str(tiny), "--set", "cluster.nodes=200"], cwd=tmp_path))
    assert "raise cluster.cfs_period_ms to at least" in line
    # Beyond what the kernel's longest period (1 s) can give.
    line = one_line(cli(["validate", str(tiny), "--set", "cluster.nodes=4000"], cwd=tmp_path))
    assert "no CFS period can give it" in line and "--backend sim" in line
    # The simulator has no quota: the same scenario is fine there.
    assert (
        cli(["validate", str(tiny), "--set", "cluster.nodes=4000", "--backend", "sim"], tmp_path).returncode
        == 0
    )


# ------------------------------------------------------------------------------------------------------
# Hosts that cannot run it: a private mount namespace with read-only mounts


def _unshare_prefix(tmp_path: Path, ro: list[str]) -> list[str]:
    require(shutil.which("unshare") is not None, "needs unshare (util-linux) for a private mount namespace")
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, text=True)
    require(probe.returncode == 0, f"cannot make a mount namespace here ({probe.stderr.strip()}); needs root")
    script = tmp_path / "ro.sh"
    lines = ["set -e"]
    for path in ro:
        # A mount point (a cgroup hierarchy) is remounted as it is; a plain folder is made a mount first.
        lines.append(f"mountpoint -q '{path}' || mount --bind '{path}' '{path}'")
        lines.append(f"mount -o remount,bind,ro '{path}'")
    lines.append('exec "$@"')
    script.write_text("\n".join(lines) + "\n")
    return ["unshare", "--mount", "--propagation", "private", "sh", str(script)]


def _cgroup_mounts() -> list[str]:
    from testbed.emulator.mechanism.envelope import cgroup_mounts

    return [m for m, _, _, _ in cgroup_mounts()]


def test_an_unwritable_out_folder_is_refused_before_anything_starts(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    tiny = write(tmp_path / "tiny.yaml", TINY)
    prefix = _unshare_prefix(tmp_path, [str(ro)])
    for command in ("validate", "run"):
        line = one_line(cli([command, str(tiny), "--out", str(ro / "x")], cwd=tmp_path, prefix=prefix))
        assert line.startswith(f"--out {ro / 'x'}: cannot write in {ro} (Read-only file system)"), line
    # The default folder: results/ below a read-only working directory.
    line = one_line(cli(["run", str(tiny), "-q"], cwd=ro, prefix=prefix))
    assert line.startswith("results folder results/ (default; --out chooses another): cannot write"), line
    assert list(ro.iterdir()) == []


def test_a_cgroup_envelope_without_writable_cgroups_is_refused_naming_the_fix(tmp_path):
    tiny = write(tmp_path / "tiny.yaml", TINY)
    prefix = _unshare_prefix(tmp_path, _cgroup_mounts())
    for command in ("validate", "run"):
        out = tmp_path / f"out-{command}"
        p = cli([command, str(tiny), "--set", "cluster.envelope=cgroup", "--out", str(out)], tmp_path, prefix)
        line = one_line(p)
        assert line.startswith("cluster.envelope: cgroup is not available here (")
        assert "mounted read-only" in line and "or set cluster.envelope: none" in line
        _nothing_written(tmp_path, out)
    # auto falls back to none and says so (a note, not an error).
    p = cli(["validate", str(tiny)], tmp_path, prefix)
    assert p.returncode == 0, p.stderr
    assert "note: cluster.envelope auto: no usable cgroup here" in p.stdout
    assert "CPU rate is NOT fixed" in p.stdout


@pytest.mark.slow
def test_ray_failing_to_start_gives_one_line_and_a_summary_with_the_error(tmp_path):
    tiny = write(tmp_path / "tiny.yaml", TINY)
    blocker = write(tmp_path / "not-a-dir", "x")
    out = tmp_path / "out"
    env = {**os.environ, "RAY_TMPDIR": str(blocker / "ray")}
    p = cli(["run", str(tiny), "--out", str(out), "-q"], tmp_path, env=env, timeout=180)
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(errors) == 1 and errors[0].startswith("error: Ray failed to start: NotADirectoryError"), (
        p.stderr
    )
    assert "Traceback" not in p.stdout + p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert s["error"].startswith("Ray failed to start: NotADirectoryError")
    assert s["ended"] == f"error: {s['error']}"
    assert (out / "jobs.csv").exists()


@pytest.mark.slow
def test_an_agent_that_cannot_start_is_one_line_not_rays_whole_error(tmp_path):
    """What preflight cannot see still reaches the user as the agent's own reason: Ray wraps an actor's
    constructor error in ActorDiedError with the traceback in its text (issue 12, Found 4)."""
    import ray

    from testbed.emulator.actors import AgentHost
    from testbed.emulator.agent import NodeConfig
    from testbed.emulator.backend import root_cause

    cfg = NodeConfig(run_id="test-rootcause", node=0, run_dir="relative/run", tdf=1.0, envelope="none")
    ray.init(address="local", include_dashboard=False, log_to_driver=False, namespace="test-rootcause")
    try:
        agent = ray.remote(num_cpus=0)(AgentHost).remote([cfg])
        with pytest.raises(Exception) as ei:
            ray.get(agent.info.remote(), timeout=120)
    finally:
        ray.shutdown()
    assert len(str(ei.value).splitlines()) > 3  # Ray's own text: many lines
    assert root_cause(ei.value) == "ValueError: run_dir must be absolute, got 'relative/run'"
