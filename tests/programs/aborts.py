"""An mpi4py program whose rank 1 calls MPI_Abort with error code 7 after the first barrier."""

from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Barrier()
if comm.Get_rank() == 1:
    comm.Abort(7)
comm.recv(source=1, tag=3)
