"""The Prometheus exporters' own cost at 16 nodes: CPU per scrape, CPU per metric update, CPU per second.

One process holds 16 NodeMetrics registries and one CoordinatorMetrics, each served by its own exporter
(prometheus_client.start_http_server on 127.0.0.1, as in a run, where each lives in its agent's process),
filled like a busy gang run (histograms with observations, progress for two job classes). Measured with
this process's CPU time (every thread, the exporters' included):

- idle: the baseline of the same process with the exporters up and nothing happening;
- update: one node's per-interval update (what the agent's loop does every scrape interval), and the
  coordinator's;
- scrape: a separate process scrapes all 17 exporters over and over; this process's CPU over the scrapes,
  less the idle baseline, per scrape (the scraper's own CPU is not counted: Prometheus pays that);
- per second at 16 nodes with 1 s scrapes: 17 scrapes + 16 node updates + 1 coordinator update.

    python benchmarks/exporter.py [--seconds 5] [--rounds 200]

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time

from testbed.monitoring.metrics import CoordinatorMetrics, NodeMetrics, serve, utilization

NODES = 16
SCRAPER = r"""
import sys, time, urllib.request
addrs, rounds = sys.argv[1].split(","), int(sys.argv[2])
size, t = 0, time.monotonic()
for _ in range(rounds):
    for a in addrs:
        with urllib.request.urlopen(f"http://{a}/metrics", timeout=5) as r:
            size += len(r.read())
wall = time.monotonic() - t
print(size / (rounds * len(addrs)), wall / (rounds * len(addrs)))
"""


def build() -> tuple[list[NodeMetrics], CoordinatorMetrics, list, list[str]]:
    classes = ["compute", "io"]
    nodes = [NodeMetrics(n, "gang", 219.1, 18.968, 9.4, classes) for n in range(NODES)]
    coord = CoordinatorMetrics("gang", 9.4, classes)
    servers, addrs = [], []
    for reg in [m.registry for m in nodes] + [coord.registry]:
        srv, addr = serve(reg, "127.0.0.1", None)
        servers.append(srv)
        addrs.append(addr)
    return nodes, coord, servers, addrs


def node_update(m: NodeMetrics, rng: random.Random) -> None:
    """What NodeAgent._metrics_tick does once per interval (without reading the cgroup)."""
    m.sample(utilization(rng.random() * 0.1, 0.1), 0.1)
    m.set_processes(1, 2, 0)
    m.dispatches.inc(10)
    m.add_progress("compute", "barriers", 12)
    m.add_progress("io", "barriers", 3)
    m.observe_decisions([rng.random() * 2e-5 for _ in range(25)])  # 10 slots/s + process events


def coord_update(c: CoordinatorMetrics, rng: random.Random) -> None:
    c.set_jobs({("running", "compute"): 3, ("queued", "io"): 2, ("finished", "compute"): 5})
    for _ in range(10):
        c.skew.observe(rng.random() * 5e-3)
    c.observe_decisions([rng.random() * 5e-5 for _ in range(12)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0, help="idle baseline length")
    ap.add_argument("--rounds", type=int, default=200, help="scrapes of each exporter")
    ap.add_argument("--updates", type=int, default=2000, help="update rounds timed")
    args = ap.parse_args()
    rng = random.Random(1)
    nodes, coord, servers, addrs = build()
    for _ in range(60):  # a minute of a busy run: every histogram bucket populated
        for m in nodes:
            node_update(m, rng)
        coord_update(coord, rng)

    c0, w0 = time.process_time(), time.monotonic()
    time.sleep(args.seconds)
    idle_cpu_per_s = (time.process_time() - c0) / (time.monotonic() - w0)

    c0 = time.process_time()
    for _ in range(args.updates):
        node_update(nodes[0], rng)
    node_update_cpu = (time.process_time() - c0) / args.updates
    c0 = time.process_time()
    for _ in range(args.updates):
        coord_update(coord, rng)
    coord_update_cpu = (time.process_time() - c0) / args.updates

    c0, w0 = time.process_time(), time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", SCRAPER, ",".join(addrs), str(args.rounds)], capture_output=True, text=True
    )
    wall = time.monotonic() - w0
    cpu = time.process_time() - c0
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    size, latency = (float(x) for x in out.stdout.split())
    scrapes = args.rounds * len(addrs)
    per_scrape = max(0.0, cpu - idle_cpu_per_s * wall) / scrapes
    per_second = (NODES + 1) * per_scrape + NODES * node_update_cpu + coord_update_cpu
    for s in servers:
        s.shutdown()
        s.server_close()

    print(f"exporters: {NODES} node registries + 1 coordinator, one process, each on its own port")
    print(f"idle baseline (exporters up, nothing happening): {idle_cpu_per_s * 1e3:.3f} ms CPU per s")
    print(f"node update (once per interval): {node_update_cpu * 1e6:.1f} us CPU; "
          f"coordinator update: {coord_update_cpu * 1e6:.1f} us CPU")  # fmt: skip
    print(f"scrape: {per_scrape * 1e3:.3f} ms CPU per scrape (exporter side), {size / 1024:.1f} KiB, "
          f"{latency * 1e3:.2f} ms wall each, {scrapes} scrapes")  # fmt: skip
    print(f"at {NODES} nodes, 1 s scrapes: {per_second * 1e3:.2f} ms CPU per second "
          f"= {per_second * 100:.2f} % of one core")  # fmt: skip
    print(
        json.dumps(
            {
                "nodes": NODES,
                "idle_cpu_ms_per_s": round(idle_cpu_per_s * 1e3, 4),
                "node_update_cpu_us": round(node_update_cpu * 1e6, 2),
                "coordinator_update_cpu_us": round(coord_update_cpu * 1e6, 2),
                "scrape_cpu_ms": round(per_scrape * 1e3, 4),
                "scrape_bytes": round(size),
                "scrape_wall_ms": round(latency * 1e3, 3),
                "scrapes": scrapes,
                "cpu_ms_per_s_at_16_nodes_1s_scrapes": round(per_second * 1e3, 3),
                "core_fraction": round(per_second, 5),
            }
        )
    )


if __name__ == "__main__":
    main()
