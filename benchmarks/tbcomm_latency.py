"""tbcomm one-way latency against raw loopback TCP, measured in the same run, interleaved.

``python benchmarks/tbcomm_latency.py [--rounds R] [--block N]``

Three ping-pong pairs run side by side, each driven in blocks of N round trips, the blocks taken in turn
(raw, tbcomm, tbcomm reporting, raw, ...), so that all three see the same host load at about the same
time (a shared host's load moves the raw figure 3-4x within a minute):

* raw: two Python processes ping-pong 8 bytes over a plain loopback TCP socket (TCP_NODELAY);
* tbcomm: two worker processes, each on its own NIC (each NIC as in a node agent: started from a loop
  thread of this process, its data path on a thread of its own), ping-pong through tbcomm with wait
  mode block: sender -> receiving node's NIC -> receiver (a standing receive: nobody asked for message
  events);
* tbcomm reporting: the same with report_messages=True (every receive asks the NIC, which reports every
  arrival, wait and consumption to the agent's loop, as under a coscheduling policy).

One-way latency = median round trip / 2 per block; per round, ratio = tbcomm / raw of that round. The
figures are medians over the rounds. Target (issue 9): tbcomm <= 3 x raw, raw unpinned (workers and NICs
are unpinned too). The last line printed is one JSON object.
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
import socket
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

# Both clients read a block size on stdin, run that many round trips, print the median RTT (us); 0 ends.
RAW_CLIENT = r"""
import socket, statistics, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for line in sys.stdin:
    n = int(line)
    if n == 0:
        break
    rtts = []
    for i in range(n):
        t0 = time.perf_counter()
        s.sendall(b"x" * 8)
        got = 0
        while got < 8:
            got += len(s.recv(64))
        rtts.append(time.perf_counter() - t0)
    print(statistics.median(rtts) * 1e6, flush=True)
s.close()
"""

TBCOMM_WORKER = r"""
import statistics, sys, time
from testbed.apps.tbcomm import Comm
c = Comm.from_env()
if c.rank == 0:
    for line in sys.stdin:
        n = int(line)
        if n == 0:
            break
        rtts = []
        for i in range(n):
            t0 = time.perf_counter()
            c.send(1, b"x" * 8)
            c.recv(1)
            rtts.append(time.perf_counter() - t0)
        print(statistics.median(rtts) * 1e6, flush=True)
    c.send(1, b"", tag=1)
else:
    while True:
        src, tag, data = c.recv_msg(0)
        if tag == 1:
            break
        c.send(0, data)
c.close()
"""


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


class _Pair:
    """A driven ping-pong: ``block(n)`` -> median RTT (us) of n round trips."""

    def __init__(self, driver: subprocess.Popen, others: list[subprocess.Popen], cleanup=None) -> None:
        self.driver, self.others, self.cleanup = driver, others, cleanup

    def block(self, n: int) -> float:
        self.driver.stdin.write(f"{n}\n")
        self.driver.stdin.flush()
        line = self.driver.stdout.readline()
        if not line:
            raise RuntimeError(f"benchmark process ended: {self.driver.stderr.read().strip()[-500:]}")
        return float(line)

    def close(self) -> None:
        try:
            self.driver.stdin.write("0\n")
            self.driver.stdin.flush()
        except OSError:
            pass
        for p in [self.driver, *self.others]:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.cleanup is not None:
            self.cleanup()


def _popen(args, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, **kw,
    )  # fmt: skip


def raw_pair() -> _Pair:
    server = _popen(["-c", RAW_SERVER])
    port = server.stdout.readline().strip()
    return _Pair(_popen(["-c", RAW_CLIENT, port]), [server])


def tbcomm_pair(report_messages: bool) -> _Pair:
    from testbed.apps.environ import JobEnv, NodeEnv

    from testbed.core.clock import Clock
    from testbed.emulator.loop import LoopThread
    from testbed.emulator.mechanism.priority import raise_thread_priority
    from testbed.emulator.nic import Nic

    clock = Clock.starting_now(1.0)
    threads, nics, addrs = [], [], []
    for node in range(2):
        # As in a node agent: the loop thread raised (it hosts the policy's hooks).
        lt = LoopThread(f"bench-nic{node}", on_start=raise_thread_priority)
        threads.append(lt)
        hooks = _Hooks()
        nic = lt.call(lambda n=node, h=hooks: Nic(n, h, clock, report_messages=report_messages))
        hooks.nic = nic
        nics.append(nic)
        addrs.append(lt.call(nic.start))

    def cleanup():
        for lt, nic in zip(threads, nics, strict=True):
            lt.call(nic.close, timeout=5)
            lt.stop()

    procs = []
    for rank in range(2):
        env = dict(os.environ)
        env.update(NodeEnv(clock, node_nic=addrs[rank]).to_env())
        env.update(JobEnv("bench", rank, tuple(addrs), wait_mode="block").to_env())
        procs.append(_popen(["-c", TBCOMM_WORKER], env=env))
    return _Pair(procs[0], procs[1:], cleanup)


def measure(rounds: int = 9, block: int = 300, one_cpu: bool = False) -> dict:
    """Interleaved blocks; one-way latencies (us) and the per-round ratio, medians over the rounds.
    ``one_cpu``: every process and thread of the benchmark on one CPU (the software path alone: no
    wake-up of the other CPU, which costs 20-30 us here when it is idle, as a raw pair pinned to two CPUs
    shows)."""
    sys.setswitchinterval(0.0005)  # as in a node agent (testbed/emulator/agent.py)
    saved = os.sched_getaffinity(0)
    if one_cpu:
        os.sched_setaffinity(0, {min(saved)})  # inherited by the threads and processes made below
    try:
        pairs = {"raw": raw_pair(), "tbcomm": tbcomm_pair(False), "reporting": tbcomm_pair(True)}
    finally:
        os.sched_setaffinity(0, saved)
    got: dict[str, list[float]] = {k: [] for k in pairs}
    try:
        for p in pairs.values():
            p.block(WARMUP)
        for _ in range(rounds):
            for k, p in pairs.items():
                got[k].append(p.block(block) / 2)
    finally:
        for p in pairs.values():
            p.close()
    ratio = [t / r for t, r in zip(got["tbcomm"], got["raw"], strict=True)]
    ratio_rep = [t / r for t, r in zip(got["reporting"], got["raw"], strict=True)]
    return {
        "raw_one_way_us": round(statistics.median(got["raw"]), 1),
        "tbcomm_one_way_us": round(statistics.median(got["tbcomm"]), 1),
        "ratio": round(statistics.median(ratio), 2),
        "tbcomm_reporting_one_way_us": round(statistics.median(got["reporting"]), 1),
        "ratio_reporting": round(statistics.median(ratio_rep), 2),
        "ratio_range": [round(min(ratio), 2), round(max(ratio), 2)],
        "raw_range_us": [round(min(got["raw"]), 1), round(max(got["raw"]), 1)],
        "rounds": rounds,
        "block": block,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="rounds of one block per pair")
    parser.add_argument("--block", type=int, default=300, help="round trips per block")
    args = parser.parse_args()
    r = measure(args.rounds, args.block)
    pinned = measure(args.rounds, args.block, one_cpu=True)
    keys = ("raw_one_way_us", "tbcomm_one_way_us", "ratio", "tbcomm_reporting_one_way_us", "ratio_reporting")
    for k in keys:
        r[f"one_cpu_{k}"] = pinned[k]
    r.update(host_cores=len(os.sched_getaffinity(0)), when=time.strftime("%Y-%m-%dT%H:%M:%S"),
             hostname=socket.gethostname(), loadavg=round(os.getloadavg()[0], 2))  # fmt: skip
    print(
        f"median of {args.rounds} interleaved rounds: raw {r['raw_one_way_us']} us one way "
        f"(range {r['raw_range_us'][0]}-{r['raw_range_us'][1]}), tbcomm {r['tbcomm_one_way_us']} us, "
        f"ratio {r['ratio']} (per round {r['ratio_range'][0]}-{r['ratio_range'][1]}; target <= 3); "
        f"reporting {r['tbcomm_reporting_one_way_us']} us (x{r['ratio_reporting']})"
    )
    print(
        f"all on one CPU: raw {r['one_cpu_raw_one_way_us']} us, tbcomm {r['one_cpu_tbcomm_one_way_us']} us, "
        f"ratio {r['one_cpu_ratio']}; reporting {r['one_cpu_tbcomm_reporting_one_way_us']} us "
        f"(x{r['one_cpu_ratio_reporting']})"
    )
    print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
