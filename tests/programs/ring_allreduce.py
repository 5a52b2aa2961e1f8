"""A user's MPI program, written for mpi4py alone (nothing of the testbed): a token goes round a ring of
ranks, then every rank joins an allreduce, with compute between; ``iterations`` times.

    mpiexec -n 4 python ring_allreduce.py [iterations] [compute_ms]

Rank 0 checks the results and prints one line; a wrong result raises.
"""

import sys
import time

from mpi4py import MPI


def compute(ms: float) -> None:
    """Burns ``ms`` milliseconds of this process's CPU time."""
    end = time.process_time() + ms / 1000.0
    while time.process_time() < end:
        pass


def main() -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    compute_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    t0 = MPI.Wtime()
    total = 0
    for i in range(iterations):
        compute(compute_ms)
        # The ring: rank 0 starts the token, each rank adds its rank and passes it on.
        if size > 1:
            if rank == 0:
                comm.send(i, dest=1, tag=7)
                token = comm.recv(source=size - 1, tag=7)
            else:
                token = comm.recv(source=rank - 1, tag=7)
                comm.send(token + rank, dest=(rank + 1) % size, tag=7)
            if rank == 0 and token != i + size * (size - 1) // 2:
                raise RuntimeError(f"ring: token {token} at iteration {i}")
        compute(compute_ms)
        total = comm.allreduce(rank + i, op=MPI.SUM)
        if total != size * (size - 1) // 2 + size * i:
            raise RuntimeError(f"allreduce: {total} at iteration {i}")
    comm.Barrier()
    if rank == 0:
        print(f"ring_allreduce: {size} ranks, {iterations} iterations, {MPI.Wtime() - t0:.3f} s", flush=True)


if __name__ == "__main__":
    main()
