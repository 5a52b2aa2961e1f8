"""An mpi4py program whose rank 1 raises after the first barrier (the others then wait for it)."""

from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Barrier()
if comm.Get_rank() == 1:
    raise ValueError("rank 1 found bad input")
comm.recv(source=1, tag=3)
