"""An mpi4py program whose rank 1 never reaches MPI_Init (it sleeps first): the others wait in MPI_Init,
as they wait when a rank's process manager never starts."""

import os
import time

if os.environ.get("PMI_RANK") == "1":
    time.sleep(3600)

from mpi4py import MPI  # noqa: E402

MPI.COMM_WORLD.Barrier()
