"""Measured models of the NAS kernels, for the simulator's ``nas`` kind (apps/nas/kind.py).

``python benchmarks/mpi_profiles.py [--kernels ep,is,cg,mg,ft] [--classes S,W,A] [--ranks 1,2,4,8,16]
[--missing] [--timeout 600] [--takes 3]``

Each kernel, class and rank count runs ``--takes`` times on real processes (the take whose busiest rank's
CPU is the median is kept) under apps/mpi_trace.py's recorder: per rank,
the CPU of its main thread between MPI calls (its own clock, so the host's other load does not inflate it)
and the calls (sends with their bytes, receives with what they matched, collectives). Each trace is
written to ``apps/nas/models/<kernel>-<class>-<ranks>.json.gz`` with the SHA-256 of the kernel file it
was recorded from (a model of another version of a kernel is not used), and a summary row to
``apps/nas/models/profiles.csv``: CPU per rank (max and mean), messages, bytes, collectives and the bytes
handed to collectives per rank.

Each model is stamped with the host's speed around its kept take (apps/speed.py: ``speed_s``, also a
column of the table), so that the simulator can replay it for a host of another speed
(``cluster.host_speed_s``). The models recorded before stamps have none, and are replayed as recorded:
a stamp inferred from new takes read MG.A and FT.A 25-35 % above their models with the speed figure
unchanged (docs/measurements.md, "Each kernel against a model of the same minutes"), so it would have
stamped the takes' conditions, not the host's speed.

Record on a host that keeps freed memory (the warning printed at the start says how): where the host
takes it back at once, a take pays for the host's memory, not for its work (MG.A's takes 40-60 % above
those on the same host keeping it; docs/measurements.md, "Models recorded on a host that keeps freed
memory"). The class-A models on 4 ranks were recorded so; the others are older and unstamped.

Baseline, printed beside each row: the guessed NAS-like profile of the same name (apps/profiles.py, paper
003 table 2's ranking), as messages sent per rank per CPU-second, which is what that profile was built
to match; the measured kernel's figure replaces it. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime

from testbed.apps.mpi_trace import RECORDER_VERSION, compute_s, record
from testbed.apps.nas.kind import KERNELS, MODELS, NasConfig, kernel_sha256, measured, model_path
from testbed.apps.profiles import PROFILES
from testbed.apps.speed import around, speed_s, stamp, stamp_of
from testbed.apps.synthetic import SyntheticConfig, messages_per_iteration
from testbed.apps.work import WORK_UNIT_S

from testbed.emulator.mechanism.hostmem import page_reporting_note

TABLE = MODELS / "profiles.csv"
COLUMNS = (
    "kernel", "class", "ranks", "cpu_s_max", "cpu_s_mean", "msgs_per_rank", "bytes_per_rank",
    "collectives_per_rank", "collective_bytes_per_rank", "msgs_per_cpu_s", "recorded_s", "speed_s",
)  # fmt: skip


def summarise(ranks: list[list]) -> dict:
    cpu = [compute_s(ops) for ops in ranks]
    msgs = [sum(1 for op in ops if op[0] == "s") for ops in ranks]
    nbytes = [sum(op[2] for op in ops if op[0] == "s") for ops in ranks]
    colls = [sum(1 for op in ops if op[0] == "k") for ops in ranks]
    coll_bytes = [sum(op[2] for op in ops if op[0] == "k") for ops in ranks]
    mean_cpu = statistics.fmean(cpu)
    return {
        "cpu_s_max": round(max(cpu), 6),
        "cpu_s_mean": round(mean_cpu, 6),
        "msgs_per_rank": round(statistics.fmean(msgs), 2),
        "bytes_per_rank": round(statistics.fmean(nbytes)),
        "collectives_per_rank": round(statistics.fmean(colls), 2),
        "collective_bytes_per_rank": round(statistics.fmean(coll_bytes)),
        "msgs_per_cpu_s": round(statistics.fmean(msgs) / mean_cpu, 2) if mean_cpu > 0 else 0.0,
    }


def guessed_msgs_per_cpu_s(kernel: str, size: int) -> float | None:
    """The guessed NAS-like profile's messages per rank per CPU-second on ``size`` ranks
    (apps/profiles.py), if there is one of that name."""
    p = PROFILES.get(kernel.upper())
    if p is None:
        return None
    cfg = SyntheticConfig(**p.app_fields())
    return messages_per_iteration(cfg, size) / (p.gcomp * WORK_UNIT_S)


def record_one(kernel: str, npb_class: str, size: int, timeout: float, takes: int = 1) -> dict:
    """Records the kernel ``takes`` times and keeps the take whose busiest rank's CPU is the median: one
    take is not a model. IS.A on 4 ranks, recorded twice on a quiet host: 1.14 and 1.26 s a rank, where
    its real jobs took 1.04-1.10 emulated s; a take that touches memory the host took back pays for it
    (docs/measurements.md, "Why a run's first job is the slowest: memory the host took back")."""
    recorded = takes_of(kernel, npb_class, size, timeout, takes)
    recorded.sort(key=lambda r: r[0])
    cpus = [r[0] for r in recorded]
    _, took, ranks, speed = recorded[len(recorded) // 2]
    # Microsecond resolution is below what a thread's CPU clock resolves per call anyway, and it keeps
    # the committed models small.
    for ops in ranks:
        for op in ops:
            if op[0] == "c":
                op[1] = round(op[1], 6)
    doc = {
        "kernel": kernel,
        "class": npb_class,
        "size": size,
        "program_sha256": kernel_sha256(kernel),
        "recorder": RECORDER_VERSION,
        "recorded_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "recorded_s": round(took, 2),
        "takes_cpu_s_max": cpus,  # every take's busiest rank, the kept one the median
        **stamp(speed),  # the host's speed around the kept take (apps/speed.py)
        "ranks": ranks,
    }
    path = model_path(kernel, npb_class, size)
    path.parent.mkdir(parents=True, exist_ok=True)
    # mtime 0: the same trace gives the same bytes.
    path.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), mtime=0))
    return _row(doc)


def takes_of(kernel: str, npb_class: str, size: int, timeout: float, takes: int) -> list[tuple]:
    """``takes`` recordings, each (busiest rank's CPU, real s, the trace, the host's speed around it:
    the mean of apps/speed.py's figure just before and just after)."""
    cfg = NasConfig(kernel=kernel, npb_class=npb_class)
    out = []
    before = speed_s()
    for _ in range(takes):
        t0 = time.monotonic()
        ranks = record(cfg.program, cfg.args, size, timeout)
        took = time.monotonic() - t0
        after = speed_s()
        out.append((summarise(ranks)["cpu_s_max"], took, ranks, around(before, after)))
        before = after
    return out


def _row(doc: dict) -> dict:
    summary = summarise(doc["ranks"])
    return {"kernel": doc["kernel"], "class": doc["class"], "ranks": doc["size"], **summary,
            "recorded_s": doc.get("recorded_s", ""), "speed_s": stamp_of(doc) or ""}  # fmt: skip


def current_row(kernel: str, npb_class: str, size: int) -> dict | None:
    """The table row of the model kept for the kernel as it is now, or None."""
    if measured(kernel, npb_class, size) is None:
        return None
    return _row(json.loads(gzip.decompress(model_path(kernel, npb_class, size).read_bytes())))


def _merge(rows: list[dict]) -> list[dict]:
    """The table with these rows replacing those of the same kernel, class and ranks."""
    old = []
    if TABLE.is_file():
        with open(TABLE) as fh:
            old = list(csv.DictReader(fh))
    key = lambda r: (r["kernel"], r["class"], int(r["ranks"]))  # noqa: E731
    merged = {key(r): r for r in old}
    for r in rows:
        kept = merged.get(key(r), {})
        # A model kept from before (--missing) may not say how long it took: the table still does.
        merged[key(r)] = {**r, "recorded_s": r["recorded_s"] or kept.get("recorded_s", "")}
    # Only rows of models kept for the kernels as they are now: the table describes apps/nas/models/.
    return [merged[k] for k in sorted(merged) if measured(*k) is not None]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=",".join(KERNELS))
    ap.add_argument("--classes", default="S,W,A")
    ap.add_argument("--ranks", default="1,2,4,8,16")
    ap.add_argument("--missing", action="store_true", help="record only what has no current model")
    ap.add_argument("--timeout", type=float, default=600.0, help="real s one recording may take")
    ap.add_argument("--takes", type=int, default=3, help="recordings of each; the median one is kept")
    args = ap.parse_args()
    failed = []
    rows = []
    print(f"load average at start: {os.getloadavg()}", flush=True)
    host_memory = page_reporting_note()  # a cold take then costs more CPU than a warm one: noise in a model
    if host_memory:
        print(f"warning: {host_memory}", flush=True)
    for kernel in args.kernels.split(","):
        for npb_class in args.classes.split(","):
            for size in (int(r) for r in args.ranks.split(",")):
                row = current_row(kernel, npb_class, size) if args.missing else None
                if row is None:
                    try:
                        row = record_one(kernel, npb_class, size, args.timeout, args.takes)
                    except RuntimeError as exc:  # one model the less; the others still come
                        failed.append(f"{kernel}-{npb_class}-{size}")
                        print(f"{kernel.upper()}.{npb_class} x{size}: not recorded: {exc}", flush=True)
                        continue
                rows.append(row)
                guess = guessed_msgs_per_cpu_s(kernel, size)
                vs = f"guessed profile {guess:.0f}" if guess is not None else "no guessed profile"
                print(
                    f"{kernel.upper()}.{npb_class} x{size}: CPU/rank max {row['cpu_s_max']:.3f} s, "
                    f"{row['msgs_per_rank']:.0f} msgs/rank ({row['bytes_per_rank']} B), "
                    f"{row['collectives_per_rank']:.0f} collectives/rank "
                    f"({row['collective_bytes_per_rank']} B), "
                    f"{row['msgs_per_cpu_s']:.0f} msgs per CPU-s ({vs}); recorded in {row['recorded_s']} s",
                    flush=True,
                )
    table = _merge(rows)
    with open(TABLE, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(table)
    print(f"load average at end: {os.getloadavg()}", flush=True)
    print(json.dumps({"models": len(rows), "failed": failed, "table": str(TABLE)}))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
