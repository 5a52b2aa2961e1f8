"""The NAS Parallel Benchmarks' kernels (EP, IS, CG, MG, FT), written for mpi4py and numpy after NPB 3.x's
specification, each checking its result against NPB's published verification values (npb.py).

Each kernel is an ordinary mpi4py program: ``mpiexec -n 4 python -m testbed.apps.nas.cg S`` runs it
outside the testbed, and the testbed runs it as any user's MPI program (apps/mpi.py).
"""
