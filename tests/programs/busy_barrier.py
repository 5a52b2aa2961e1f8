"""Rank 0 computes SECONDS of its thread's CPU, then every rank enters a Barrier: the other ranks wait in
it for rank 0, which is not their compute (tests/e2e/test_mpi.py, compute_s).

``python busy_barrier.py [SECONDS]`` (default 0.2)."""

import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_rank() == 0:
    t0 = time.thread_time()
    while time.thread_time() - t0 < float(sys.argv[1] if len(sys.argv) > 1 else 0.2):
        pass
comm.Barrier()
