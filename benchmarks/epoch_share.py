"""What the paper 004 node's own scheduler gives a local CPU user beside CPU-bound parallel processes, against
the testbed's processor sharing (docs/measurements.md, "Paper 004: the 0-user point, and the node's epoch
scheduler modelled").

Paper 004 §2: "The scheduler works by dividing the CPU time into epochs. In every epoch, each task is
assigned a specific time slice and priority. In order to give preference to I/O-bound processes, the
priority of each task is inversely proportional to the CPU used during the last epoch" (its cluster ran
Linux 2.2.15). The testbed's simulator shares a node's CPU by CFS weights while processes are runnable
(processor sharing), which has no such preference; docs/measurements.md ("Paper 004, Wrk2 as the paper
admits it") inferred that the preference is what lets CCS's L raise the parallel share. This script tests
that inference on one node, in a model of the epoch scheduler as the paper describes it, written from
that description and Linux 2.2's documented rule, not from its code:

- a task's time slice is its ``counter`` in 10 ms ticks; the running task loses a tick each tick;
- the runnable task with the highest goodness runs, goodness = counter + slice (0 once its counter is
  spent); the task running keeps the CPU on a tie;
- when every runnable task has spent its counter the epoch ends, and every task, sleeping ones too, gets
  ``counter = counter / 2 + slice``: a task that slept keeps half of what it did not use (the credit that
  favours it);
- a task that wakes with a higher goodness than the running one preempts it.

The local user is the testbed's CPU profile (apps/localuser.py): 65 ms of computing then 35 ms of sleep
per 100 ms cycle when alone; its slowdown is the time its cycles took over 100 ms each. Beside it, ``n``
parallel processes that compute all the time (the slow node's ranks, which pace a Wrk2 job). Slices:
plain Linux (and DYNAMIC: CPU-bound ranks get no messages to be boosted by) give every task
``DEF_QUANTUM_i = 210 ms / W_i``; CCS gives each parallel task ``DEF_QUANTUM_i * L`` and each local task
``DEF_QUANTUM_i * (1 - L)``, as paper 004 §2.1 writes it ("a time slice to parallel and local tasks"), and
"together" gives the parallel tasks ``L`` between them (each ``DEF_QUANTUM_i * L / n``), the reading the
testbed's CCS takes (schedulers/ccs.py). The processor-sharing columns are the testbed's model in closed
form: the user's CPU share while it computes is its CFS weight over the node's, slowdown
``0.65 / s + 0.35``.

    python benchmarks/epoch_share.py          # a slow node (W 0.43), ~20 s: a markdown table, then JSON
    python benchmarks/epoch_share.py --w 1    # a fast node (DEF_QUANTUM_i = 210 ms)
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from testbed.schedulers.cfs import cfs_weight, nearest_nice

TICK_MS = 10  # Linux 2.2 at HZ = 100
DEF_QUANTUM_MS = 210.0  # paper 004 §2.1: Linux's base time slice
W_SLOW = 0.43  # the slow nodes' power weight, which pace every 16-process job
PERIOD_MS, COMPUTE_MS = 100, 65  # the CPU user: 65 % of a 100 ms cycle alone
RUN_MS = 600_000  # 10 emulated minutes: 6,000 cycles alone


@dataclass
class Task:
    slice_ticks: int
    counter: int
    user: bool = False
    left_ms: int = 0  # the user: computing left in this cycle
    wakes_at: int = -1  # the user: asleep until then (-1: awake)

    def runnable(self, now: int) -> bool:
        return not self.user or self.wakes_at <= now

    def goodness(self) -> int:
        return self.counter + self.slice_ticks if self.counter > 0 else 0


def _pick(tasks: list[Task], now: int, current: Task | None) -> Task | None:
    """The runnable task of highest goodness (the current one keeps the CPU on a tie); a new epoch first
    when every runnable task has spent its counter."""
    ready = [t for t in tasks if t.runnable(now)]
    if not ready:
        return None
    if all(t.counter == 0 for t in ready):
        for t in tasks:  # sleepers too: the half they kept is their credit
            t.counter = t.counter // 2 + t.slice_ticks
    best = current if current in ready else None
    for t in ready:
        if best is None or t.goodness() > best.goodness():
            best = t
    return best


def run(user_ticks: int, parallel_ticks: list[int], run_ms: int = RUN_MS) -> dict[str, float]:
    """One node for ``run_ms`` at 1 ms steps: the user's slowdown and CPU fraction, the parallel
    processes' CPU fraction."""
    user = Task(user_ticks, user_ticks, user=True, left_ms=COMPUTE_MS, wakes_at=0)
    tasks = [user, *(Task(s, s) for s in parallel_ticks)]
    used = {id(t): 0 for t in tasks}
    cycles, cycle_start, current = 0, 0, None
    for now in range(run_ms):
        if user.wakes_at == now and current is not None and user.goodness() > current.goodness():
            current = None  # the waking user preempts a task of lower goodness
        if current is None or not current.runnable(now) or current.counter == 0:
            current = _pick(tasks, now, current)
        if current is None:
            continue
        used[id(current)] += 1
        if current.user:
            user.left_ms -= 1
            if user.left_ms == 0:  # its computing done: it sleeps a fixed 35 ms
                user.wakes_at = now + 1 + PERIOD_MS - COMPUTE_MS
        if (now + 1) % TICK_MS == 0:
            current.counter = max(0, current.counter - 1)
        if user.wakes_at == now + 1 and user.left_ms == 0:  # the cycle ends as it wakes
            cycles += 1
            cycle_start = now + 1
            user.left_ms = COMPUTE_MS
    elapsed = cycle_start  # whole cycles only
    return {
        "user_slowdown": elapsed / (cycles * PERIOD_MS),
        "user_cpu": used[id(user)] / run_ms,
        "parallel_cpu": sum(used[id(t)] for t in tasks[1:]) / run_ms,
    }


def ps_slowdown(parallel_weight: float, n: int) -> float:
    """The testbed's processor sharing: the user (nice 0) computes at its weight's share."""
    s = cfs_weight(0) / (cfs_weight(0) + n * parallel_weight)
    return (COMPUTE_MS / PERIOD_MS) / s + (1 - COMPUTE_MS / PERIOD_MS)


def rows(w: float = W_SLOW) -> list[dict]:
    q = DEF_QUANTUM_MS / w / TICK_MS  # DEF_QUANTUM_i in ticks on a node of power weight w
    out = []
    for n in (1, 2):
        cases = [("Linux / DYNAMIC", q, [q] * n, float(cfs_weight(0)))]
        for L in (0.2, 0.3, 0.4, 0.5):
            # The testbed's CCS: the parallel processes together weigh L against the user's 1 - L.
            together = cfs_weight(nearest_nice(cfs_weight(0) * L / ((1 - L) * n)))
            cases.append((f"CCS L {L}, per task", q * (1 - L), [q * L] * n, None))
            cases.append((f"CCS L {L}, together", q * (1 - L), [q * L / n] * n, float(together)))
        for name, u, par, ps_w in cases:
            r = run(max(1, round(u)), [max(1, round(p)) for p in par])
            r.update(policy=name, n=n, ps_user_slowdown=None if ps_w is None else ps_slowdown(ps_w, n))
            out.append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--w", type=float, default=W_SLOW, help="the node's power weight W_i (0 < W <= 1)")
    w = ap.parse_args().w
    if not 0 < w <= 1:
        ap.exit(2, f"error: --w: needs a power weight in (0, 1], got {w}\n")
    out = rows(w)
    head = [
        "policy",
        "parallel processes",
        "epochs: user slowdown",
        "user CPU",
        "parallel CPU",
        "PS: user slowdown",
    ]
    print("| " + " | ".join(head) + " |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in out:
        ps = "–" if r["ps_user_slowdown"] is None else f"{r['ps_user_slowdown']:.3f}"
        print(
            f"| {r['policy']} | {r['n']} | {r['user_slowdown']:.3f} | {r['user_cpu']:.3f} | "
            f"{r['parallel_cpu']:.3f} | {ps} |"
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
