"""The CPU a rank spends inside MPI collectives, per byte of the data it hands them (benchmarks/
mpi_bench.py, "collcpu"), beside a plain copy of the same bytes in the same run.

``mpiexec -n P python3 collcpu.py [MB ...]``: for each size (default 1 4 16 MB), each collective's median
thread CPU over REPS calls, each after a Barrier (so that a rank does not count a peer's lateness), per byte
of the rank's send buffer; rank 0 prints one JSON object: {"<op>": {"<MB>": ns_per_byte}, "copy": ...}.
"""

import json
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

REPS = 9


def cpu_per_byte(comm, call, nbytes: int) -> float:
    call()  # the first call sets up MPI's buffers; it is not counted
    cpu = []
    for _ in range(REPS):
        comm.Barrier()
        t = time.thread_time()
        call()
        cpu.append(time.thread_time() - t)
    return 1e9 * statistics.median(cpu) / nbytes


def per_size(comm, mb: float) -> dict[str, float]:
    """Each call's CPU per byte, for buffers of ``mb`` MB."""
    send = np.ones(int(mb * 2**20) // 8)
    recv = np.empty_like(send)
    calls = {
        "alltoall": lambda: comm.Alltoall(send, recv),
        "allreduce": lambda: comm.Allreduce(send, recv),
        "copy": lambda: np.copyto(recv, send),
    }
    return {op: cpu_per_byte(comm, call, send.nbytes) for op, call in calls.items()}


def main(sizes_mb: list[float]) -> None:
    comm = MPI.COMM_WORLD
    out: dict[str, dict[str, float]] = {}
    for mb in sizes_mb:
        for op, ns in per_size(comm, mb).items():
            out.setdefault(op, {})[f"{mb:g}"] = round(ns, 4)
    if comm.Get_rank() == 0:
        print(json.dumps(out))


if __name__ == "__main__":
    main([float(a) for a in sys.argv[1:]] or [1.0, 4.0, 16.0])
