"""NAS EP (embarrassingly parallel), after NPB 3.x's MPI version: 2^(M+1) uniform numbers from NPB's
generator, taken in pairs; each pair inside the unit circle gives two Gaussian deviates (Marsaglia's polar
method), which are summed (sx, sy) and counted by the square annulus they fall in (q[0..9]).

    mpiexec -n 4 python3 apps/nas/ep.py [S|W|A|B]

The 2^(M+1) numbers are NN = 2^(M-16) batches of 2^17 (NPB's ``mk`` = 16): batch k starts at seed
S * A^(2^17 k). Each rank takes a contiguous run of batches, as NPB divides them (the first NN mod P
ranks one more). Consecutive batches are consecutive stretches of one stream, so a rank draws its run
CHUNK batches at a time, each chunk's seed a jump ahead (:func:`npb.power`) from S: the same numbers
NPB's rank draws, without its per-batch loop.

Verification, NPB's rule: sx and sy against the class's values, relative error at most 1e-8. Where NPB
published the counts of the class (S), the number of pairs and each annulus count are checked exactly too.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI
from testbed.apps.nas import npb

KERNEL = "EP"
#: NPB's ``mk``: a batch is 2^MK pairs.
MK = 16
NK = 1 << MK
NQ = 10
EPSILON = 1.0e-8
#: NPB's initial seed for EP.
SEED = 271828183
#: Batches drawn per vranlc call: 2^20 numbers (8 MiB of float64) at a time.
CHUNK = 8

#: Per class: M (log2 of the pairs), NPB's sums, and NPB's published counts where known (the number of
#: Gaussian pairs and q[0..9]).
CLASSES = {
    "S": {
        "m": 24,
        "sx": -3.247834652034740e3,
        "sy": -6.958407078382297e3,
        "pairs": 13176389,
        "counts": [6140517, 5865300, 1100361, 68546, 1648, 17, 0, 0, 0, 0],
    },
    "W": {"m": 25, "sx": -2.863319731645753e3, "sy": -6.320053679109499e3, "pairs": None, "counts": None},
    "A": {"m": 28, "sx": -4.295875165629892e3, "sy": -1.580732573678431e4, "pairs": None, "counts": None},
    "B": {"m": 30, "sx": 4.033815542441498e4, "sy": -2.660669192809235e4, "pairs": None, "counts": None},
}


def my_batches(rank: int, size: int, nn: int) -> tuple[int, int]:
    """The first batch and the number of batches of ``rank``: NPB's division of NN among the ranks."""
    np_, large = divmod(nn, size)
    if rank < large:
        return rank * (np_ + 1), np_ + 1
    return large * (np_ + 1) + (rank - large) * np_, np_


def gaussian_pairs(first: int, count: int) -> tuple[float, float, np.ndarray]:
    """sx, sy and q over batches ``first`` .. ``first+count-1``."""
    sx = sy = 0.0
    q = np.zeros(NQ, dtype=np.int64)
    for c in range(first, first + count, CHUNK):
        batches = min(CHUNK, first + count - c)
        seed = SEED * npb.power(npb.A, 2 * NK * c) % npb.MOD
        x, _ = npb.vranlc(2 * NK * batches, seed)
        x1 = 2.0 * x[0::2] - 1.0
        x2 = 2.0 * x[1::2] - 1.0
        t1 = x1 * x1 + x2 * x2
        inside = t1 <= 1.0
        t1, x1, x2 = t1[inside], x1[inside], x2[inside]
        t2 = np.sqrt(-2.0 * np.log(t1) / t1)
        t3, t4 = x1 * t2, x2 * t2
        annulus = np.maximum(np.abs(t3), np.abs(t4)).astype(np.int64)
        q += np.bincount(annulus, minlength=NQ)[:NQ]
        sx += float(t3.sum())
        sy += float(t4.sum())
    return sx, sy, q


def main(argv: list[str]) -> None:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    cls = npb.problem_class(argv, KERNEL, CLASSES)
    ref = CLASSES[cls]
    m = ref["m"]
    nn = 1 << (m - MK)
    first, count = my_batches(rank, size, nn)
    if count == 0:
        raise SystemExit(f"error: NAS EP class {cls}: {size} ranks, more than its {nn} batches")

    comm.Barrier()
    t0 = npb.timer()
    sx, sy, q = gaussian_pairs(first, count)
    sums = np.array([sx, sy])
    comm.Allreduce(MPI.IN_PLACE, sums, op=MPI.SUM)
    comm.Allreduce(MPI.IN_PLACE, q, op=MPI.SUM)
    tm = npb.timer() - t0
    tm = comm.allreduce(tm, op=MPI.MAX)

    # Every rank holds the same sums and counts, so every rank reaches the same verdict: none is left
    # waiting in a collective for one that failed.
    sx, sy = float(sums[0]), float(sums[1])
    pairs = int(q.sum())
    npb.verify(KERNEL, cls, "sx", sx, ref["sx"], EPSILON)
    npb.verify(KERNEL, cls, "sy", sy, ref["sy"], EPSILON)
    if ref["pairs"] is not None:
        npb.verify(KERNEL, cls, "Gaussian pairs", pairs, ref["pairs"], 0.0)
        for i, (got, want) in enumerate(zip(q.tolist(), ref["counts"], strict=True)):
            npb.verify(KERNEL, cls, f"q[{i}]", got, want, 0.0)
    if rank == 0:
        npb.report(KERNEL, cls, size, tm, 2.0 ** (m + 1) / tm / 1e6)


if __name__ == "__main__":
    main(sys.argv)
