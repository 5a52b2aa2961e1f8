"""An mpi4py program that receives with Irecv (a nonblocking receive), or with ``ibarrier`` as its
argument enters a nonblocking barrier: neither is mirrored over an emulated link."""

import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
buf = np.zeros(4, dtype=np.uint8)
if sys.argv[1:] == ["ibarrier"]:
    comm.Ibarrier().Wait()
elif comm.Get_rank() == 0:
    comm.Send(buf, dest=1, tag=2)
elif comm.Get_rank() == 1:
    comm.Irecv(buf, source=0, tag=2).Wait()
comm.Barrier()
