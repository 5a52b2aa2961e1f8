"""A user's MPI ping-pong (mpi4py alone): ranks 0 and 1 bounce an ``nbytes``-byte buffer ``rounds``
times; rank 0 prints one line of JSON: the median and mean one-way time in microseconds (half a round
trip, MPI.Wtime), and the Barrier time (median of ``rounds``/10, all ranks).

    mpiexec -n 2 python pingpong.py [rounds] [nbytes]
"""

import json
import statistics
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
nbytes = int(sys.argv[2]) if len(sys.argv) > 2 else 1
buf = np.zeros(max(1, nbytes), dtype=np.uint8)
warmup = max(1, rounds // 10)
trips = []
comm.Barrier()
for i in range(warmup + rounds):
    t0 = MPI.Wtime()
    if rank == 0:
        comm.Send(buf, dest=1, tag=1)
        comm.Recv(buf, source=1, tag=1)
    elif rank == 1:
        comm.Recv(buf, source=0, tag=1)
        comm.Send(buf, dest=0, tag=1)
    if i >= warmup:
        trips.append(MPI.Wtime() - t0)
barriers = []
for _ in range(max(10, rounds // 10)):
    t0 = MPI.Wtime()
    comm.Barrier()
    barriers.append(MPI.Wtime() - t0)
if rank == 0:
    one_way = [t / 2 * 1e6 for t in trips]
    out = {"size": comm.Get_size(), "nbytes": nbytes, "rounds": rounds}
    out["one_way_us_median"] = statistics.median(one_way)
    out["one_way_us_mean"] = statistics.mean(one_way)
    out["barrier_us_median"] = statistics.median(barriers) * 1e6
    print(json.dumps(out), flush=True)
