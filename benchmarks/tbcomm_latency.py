"""tbcomm one-way latency against raw loopback TCP, measured in the same run.

``python benchmarks/tbcomm_latency.py [--iterations N] [--runs R]``

* raw: two Python processes ping-pong one small message over a plain loopback TCP socket (TCP_NODELAY);
* tbcomm: two worker processes, each on its own NIC (each NIC in a LoopThread of this process, as in a
  node agent), ping-pong through tbcomm with wait mode block: sender -> receiving node's NIC -> receiver;
* tbcomm_reporting: the same with report_messages=True (the NIC reports every arrival, wait and
  consumption to a hook, as under a coscheduling policy).

One-way latency = median round trip / 2. Target (DESIGN.md, decision 4): tbcomm <= 3 x raw, where raw is
the unpinned figure (both processes free to run on any CPU, like the workers and NICs). For reference the
raw ping-pong is also measured pinned, both processes on one CPU and on two different CPUs; those are not
the baseline of the ratio (pinning changes wake-up costs several-fold on a VM, MEASUREMENTS.md).

Without report_messages the NIC uses a standing receive (no RECV frame per message); with it, every
receive is request/response so that the reported events stay exact (testbed/nic.py).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

WARMUP = 200

RAW_SERVER = r"""
import socket, sys
srv = socket.create_server(("127.0.0.1", 0))
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    data = conn.recv(64)
    if not data:
        break
    conn.sendall(data)
"""

RAW_CLIENT = r"""
import socket, statistics, sys, time
port, n, warm = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts = []
for i in range(n + warm):
    t0 = time.perf_counter()
    s.sendall(b"x" * 8)
    got = 0
    while got < 8:
        got += len(s.recv(64))
    if i >= warm:
        rtts.append(time.perf_counter() - t0)
s.close()
print(statistics.median(rtts) * 1e6, flush=True)
"""

TBCOMM_WORKER = r"""
import statistics, sys, time
from testbed.apps.tbcomm import Comm
n, warm = int(sys.argv[1]), int(sys.argv[2])
c = Comm.from_env()
rtts = []
for i in range(n + warm):
    if c.rank == 0:
        t0 = time.perf_counter()
        c.send(1, b"x" * 8)
        c.recv(1)
        if i >= warm:
            rtts.append(time.perf_counter() - t0)
    else:
        c.send(0, c.recv(0))
c.close()
if c.rank == 0:
    print(statistics.median(rtts) * 1e6, flush=True)
"""


def _wait(procs: list[subprocess.Popen], timeout: float = 120.0) -> str:
    out = ""
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"benchmark process failed ({p.returncode}): {stderr.strip()}")
            out += stdout
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def _pinned(cpu: int | None):
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def raw_rtt_us(iterations: int, cpus: tuple[int, int] | None = None) -> float:
    """Raw loopback TCP round trip; ``cpus`` pins (server, client) to those CPUs."""
    server_cpu, client_cpu = cpus if cpus is not None else (None, None)
    server = subprocess.Popen(
        [sys.executable, "-c", RAW_SERVER],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_pinned(server_cpu),
    )
    try:
        port = server.stdout.readline().strip()
        client = subprocess.Popen(
            [sys.executable, "-c", RAW_CLIENT, port, str(iterations), str(WARMUP)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_pinned(client_cpu),
        )
        return float(_wait([client, server]).split()[0])
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


class _Hooks:
    def __init__(self) -> None:
        self.nic = None
        self.events = 0

    def on_hello(self, proc, pid: int) -> None:
        self.nic.go(proc)

    def on_local_event(self, event) -> None:
        self.events += 1

    def on_progress(self, proc, unit: str, value: float) -> None:
        pass

    def on_disconnect(self, proc) -> None:
        pass


def tbcomm_rtt_us(iterations: int, report_messages: bool = False) -> float:
    from testbed.clock import Clock
    from testbed.loop import LoopThread
    from testbed.nic import Nic

    clock = Clock.starting_now(1.0)
    threads, nics, addrs = [], [], []
    try:
        for node in range(2):
            lt = LoopThread(f"bench-nic{node}")
            threads.append(lt)
            hooks = _Hooks()
            nic = lt.call(lambda n=node, h=hooks: Nic(n, h, clock, report_messages=report_messages))
            hooks.nic = nic
            nics.append(nic)
            addrs.append(lt.call(nic.start))
        procs = []
        for rank in range(2):
            env = dict(os.environ)
            env.update(clock.to_env())
            env.update(
                TB_JOB="bench",
                TB_RANK=str(rank),
                TB_SIZE="2",
                TB_NICS=",".join(addrs),
                TB_NODE_NIC=addrs[rank],
                TB_WAIT_MODE="block",
            )
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", TBCOMM_WORKER, str(iterations), str(WARMUP)],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        return float(_wait(procs).split()[0])
    finally:
        for lt, nic in zip(threads, nics, strict=False):
            lt.call(nic.close, timeout=5)
        for lt in threads:
            lt.stop()


def measure(iterations: int = 2000) -> dict:
    """One run: one-way latencies (us) of raw loopback TCP and of tbcomm, and their ratio."""
    raw = raw_rtt_us(iterations) / 2
    tb = tbcomm_rtt_us(iterations) / 2
    tb_rep = tbcomm_rtt_us(iterations, report_messages=True) / 2
    cpus = sorted(os.sched_getaffinity(0))
    same = raw_rtt_us(iterations, (cpus[0], cpus[0])) / 2
    two = raw_rtt_us(iterations, (cpus[0], cpus[1])) / 2 if len(cpus) > 1 else float("nan")
    return {
        "raw_one_way_us": round(raw, 1),
        "raw_pinned_one_cpu_one_way_us": round(same, 1),
        "raw_pinned_two_cpus_one_way_us": round(two, 1),
        "tbcomm_one_way_us": round(tb, 1),
        "ratio": round(tb / raw, 2),
        "tbcomm_reporting_one_way_us": round(tb_rep, 1),
        "ratio_reporting": round(tb_rep / raw, 2),
        "iterations": iterations,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3, help="runs; the figures are their medians")
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        r = measure(args.iterations)
        runs.append(r)
        print(
            f"run {i + 1}: raw {r['raw_one_way_us']:.1f} us, tbcomm {r['tbcomm_one_way_us']:.1f} us "
            f"(x{r['ratio']:.2f}), tbcomm reporting {r['tbcomm_reporting_one_way_us']:.1f} us "
            f"(x{r['ratio_reporting']:.2f}); raw pinned: one CPU "
            f"{r['raw_pinned_one_cpu_one_way_us']:.1f} us, "
            f"two CPUs {r['raw_pinned_two_cpus_one_way_us']:.1f} us",
            flush=True,
        )
    keys = (
        "raw_one_way_us",
        "tbcomm_one_way_us",
        "ratio",
        "tbcomm_reporting_one_way_us",
        "ratio_reporting",
        "raw_pinned_one_cpu_one_way_us",
        "raw_pinned_two_cpus_one_way_us",
    )
    summary = {k: round(statistics.median(r[k] for r in runs), 2) for k in keys}
    summary.update(iterations=args.iterations, runs=args.runs, host_cores=len(os.sched_getaffinity(0)))
    summary["when"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    summary["hostname"] = socket.gethostname()
    print(
        f"median of {args.runs}: raw {summary['raw_one_way_us']} us one way, tbcomm "
        f"{summary['tbcomm_one_way_us']} us, ratio {summary['ratio']} (target <= 3)"
    )
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
