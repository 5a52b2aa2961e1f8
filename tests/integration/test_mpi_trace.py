"""The recorder (apps/mpi_trace.py) on a real MPI run: each collective's trace entry carries the bytes of
the data the rank handed MPI, which the simulator charges as MPI's CPU (apps/mpi.py, collective_cpu_s)."""

from __future__ import annotations

from testbed.apps.mpi_trace import record

from .nas_support import needs_mpiexec

PROGRAM = """
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
send = np.ones(512)  # 4096 B
recv = np.empty_like(send)
comm.Alltoall(send, recv)
sums = np.ones(10)  # 80 B, reduced in place
comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
comm.Bcast(np.zeros(3) if comm.Get_rank() else np.ones(3), root=0)  # 24 B on every rank
total = comm.allreduce(7)
comm.Barrier()
"""


@needs_mpiexec
def test_each_collective_records_the_bytes_its_rank_handed_mpi(tmp_path):
    prog = tmp_path / "colls.py"
    prog.write_text(PROGRAM)
    ranks = record(str(prog), (), 2, timeout=120)
    assert len(ranks) == 2
    for ops in ranks:
        colls = [op for op in ops if op[0] == "k"]
        named = {op[1]: op[2] for op in colls}
        assert [op[1] for op in colls] == ["alltoall", "allreduce", "bcast", "allreduce", "barrier"], colls
        assert colls[0][2] == 4096
        assert colls[1][2] == 80  # IN_PLACE: the receive buffer's bytes
        assert named["bcast"] == 24
        assert 0 < colls[3][2] < 64  # a small int, pickled
        assert named["barrier"] == 0
