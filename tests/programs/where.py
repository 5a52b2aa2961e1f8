"""An mpi4py program that says where it runs: its pid, its parent, its cgroups (one line of JSON per
rank on stdout), after a barrier."""

import json
import os

from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Barrier()
with open("/proc/self/cgroup") as fh:
    cgroups = fh.read().split()
print(json.dumps({"rank": comm.Get_rank(), "size": comm.Get_size(), "pid": os.getpid(),
                  "ppid": os.getppid(), "cgroups": cgroups}), flush=True)  # fmt: skip
