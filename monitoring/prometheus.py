"""Discovery and a local Prometheus for a run.

A run with monitoring on writes ``<run_dir>/prometheus/targets.json`` (Prometheus file_sd: one target group
per exporter, labelled ``role`` = node | coordinator, ``node``, ``run_id``) and a ready
``<run_dir>/prometheus/prometheus.yml`` that scrapes them. ``testbed run --prometheus`` starts a local
Prometheus on that file (:class:`LocalPrometheus`); anyone else can point theirs at the targets file.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

JOB_NAME = "testbed"
INSTALL_HINT = (
    "Prometheus is not installed (no 'prometheus' on PATH). Install it, then run again:\n"
    "  Debian/Ubuntu:  sudo apt-get install prometheus   (also installs promtool)\n"
    "  elsewhere:      https://prometheus.io/download/ (put the 'prometheus' binary on PATH)\n"
    "or run without --prometheus and point your own Prometheus at RUN_DIR/prometheus/targets.json."
)


def folder(run_dir: str | Path) -> Path:
    return Path(run_dir) / "prometheus"


def _atomic_write(path: Path, text: str) -> None:
    # Prometheus watches the folder: a rename is one event with the whole file behind it.
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def config_text(targets_file: str | Path, scrape_interval_s: float) -> str:
    iv = f"{max(1, round(scrape_interval_s * 1000))}ms"
    # honor_labels: the exporters' own node label is the truth; the file_sd labels add role and run_id.
    return (
        "# Written by testbed for one run: scrapes the exporters listed in targets.json (file_sd).\n"
        "global:\n"
        f"  scrape_interval: {iv}\n"
        f"  evaluation_interval: {iv}\n"
        "scrape_configs:\n"
        f"  - job_name: {JOB_NAME}\n"
        "    honor_labels: true\n"
        f"    scrape_timeout: {iv}\n"
        "    file_sd_configs:\n"
        f"      - files: [{json.dumps(str(Path(targets_file).resolve()))}]\n"
        "        refresh_interval: 5s\n"
    )


def write_targets(
    run_dir: str | Path,
    run_id: str | None,
    nodes: list[tuple[int, str]] = (),
    coordinator: str | None = None,
    scrape_interval_s: float = 1.0,
    head: tuple[int, str] | None = None,
) -> Path:
    """Writes (atomically) targets.json and prometheus.yml under ``run_dir/prometheus``; returns the
    folder. Call it again as exporters come up: Prometheus picks the change up by itself."""
    d = folder(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    groups = []
    base = {"run_id": run_id} if run_id else {}
    for n, addr in nodes:
        if addr:
            groups.append({"targets": [addr], "labels": {**base, "role": "node", "node": str(n)}})
    if head and head[1]:  # paper 001's head node: its workers' progress and deadlines, no node gauges
        groups.append({"targets": [head[1]], "labels": {**base, "role": "head", "node": str(head[0])}})
    if coordinator:
        groups.append({"targets": [coordinator], "labels": {**base, "role": "coordinator"}})
    _atomic_write(d / "targets.json", json.dumps(groups, indent=2) + "\n")
    _atomic_write(d / "prometheus.yml", config_text(d / "targets.json", scrape_interval_s))
    return d


def read_targets(run_dir: str | Path) -> list[dict]:
    """[{"address": "host:port", "role": ..., "node": ..., "run_id": ...}, ...] from targets.json."""
    groups = json.loads((folder(run_dir) / "targets.json").read_text())
    return [{"address": t, **g.get("labels", {})} for g in groups for t in g["targets"]]


def binary() -> str | None:
    return shutil.which("prometheus")


def free_port(host: str = "127.0.0.1", preferred: int = 9090) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError("no free port")  # pragma: no cover


def _die_with_parent() -> None:  # runs in the child between fork and exec
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class LocalPrometheus:
    """A Prometheus child process on a run's prometheus.yml, storing under ``run_dir/prometheus/data``.

    It gets SIGTERM if this process dies outright (PR_SET_PDEATHSIG); :meth:`stop` ends it on every other
    path (use it as a context manager)."""

    def __init__(self, run_dir: str | Path, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.dir = folder(run_dir)
        self.host = host
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.proc: subprocess.Popen | None = None

    def argv(self, exe: str) -> list[str]:
        """The command line. Without ``--web.enable-lifecycle`` or ``--web.enable-admin-api``: those let
        any local user who reaches the port POST ``/-/quit`` or delete the stored series; :meth:`stop`
        ends the process with a signal instead."""
        return [
            exe,
            f"--config.file={self.dir / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address={self.host}:{self.port}",
        ]

    def start(self, timeout: float = 30.0) -> str:
        exe = binary()
        if exe is None:
            raise RuntimeError(INSTALL_HINT)
        log = open(self.dir / "prometheus.log", "ab")  # noqa: SIM115 - the child keeps it
        try:
            self.proc = subprocess.Popen(
                self.argv(exe),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                preexec_fn=_die_with_parent,
                start_new_session=True,  # Ctrl-C reaches the run, which stops Prometheus in order
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = (self.dir / "prometheus.log").read_text(errors="replace").strip().splitlines()[-3:]
                self.proc = None
                raise RuntimeError(f"Prometheus exited at start-up: {' | '.join(tail)}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self.url
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"Prometheus did not become ready on {self.url} within {timeout:g} s")

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)

    def __enter__(self) -> LocalPrometheus:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
