"""NAS Parallel Benchmark FT (NPB 3.x) in mpi4py + numpy: a 3D diffusion equation solved by FFTs.

``mpiexec -n P python3 apps/nas/ft.py [S|W|A|B]``

The grid u(x, y, z) is filled with NPB's pseudo-random complex numbers, transformed forward once, and
then, for each of ``niter`` steps t = 1, 2, ..., multiplied by exp(-4 alpha pi^2 |k|^2) (so that after
step t it carries that factor to the power t), transformed back, and checksummed at 1024 fixed points.
NPB's checksums for every step are the verification.

Layout (NPB's 1D one): each rank holds a slab of ``nz / P`` z-planes, shape (z, y, x), x fastest as in
NPB's Fortran. The x and y transforms are local; one ``Alltoall`` of equal blocks then makes each rank
hold all of z for ``ny / P`` y-lines, shape (z, y_local, x), where the z transform is local. Fourier
space stays in that transposed layout: the evolution is pointwise, so it never needs the other one. The
inverse runs the same steps backwards, and the checksum is taken in the z-slab layout.

NPB's transforms, in numpy's terms: its forward is ``sum u exp(+2 pi i jk/n)`` unscaled, which is
``numpy.fft.ifft(norm="forward")``; its inverse is ``sum u exp(-2 pi i jk/n)`` unscaled, which is
``numpy.fft.fft``; the 1/N of the round trip is applied in the checksum, as NPB does.

Verification follows NPB's MPI FT: for each step, the real and imaginary parts of the checksum each
within a relative 1e-12 of NPB's values (two :func:`npb.verify` calls per step).
"""

from __future__ import annotations

import math
import sys

import numpy as np
from testbed.apps.nas import npb

KERNEL = "FT"
SEED = 314159265
ALPHA = 1.0e-6

#: class: (nx, ny, nz, niter)
CLASSES = {
    "S": (64, 64, 64, 6),
    "W": (128, 128, 32, 6),
    "A": (256, 256, 128, 6),
    "B": (512, 256, 256, 20),
}

#: NPB's checksum after each step, per class (NPB 3.x FT, verify).
VERIFY = {
    "S": [
        complex(5.546087004964e02, 4.845363331978e02),
        complex(5.546385409189e02, 4.865304269511e02),
        complex(5.546148406171e02, 4.883910722336e02),
        complex(5.545423607415e02, 4.901273169046e02),
        complex(5.544255039624e02, 4.917475857993e02),
        complex(5.542683411902e02, 4.932597244941e02),
    ],
    "W": [
        complex(5.673612178944e02, 5.293246849175e02),
        complex(5.631436885271e02, 5.282149986629e02),
        complex(5.594024089970e02, 5.270996558037e02),
        complex(5.560698047020e02, 5.260027904925e02),
        complex(5.530898991250e02, 5.249400845633e02),
        complex(5.504159734538e02, 5.239212247086e02),
    ],
    "A": [
        complex(5.046735008193e02, 5.114047905510e02),
        complex(5.059412319734e02, 5.098809666433e02),
        complex(5.069376896287e02, 5.098144042213e02),
        complex(5.077892868474e02, 5.101336130759e02),
        complex(5.085233095391e02, 5.104914655194e02),
        complex(5.091487099959e02, 5.107917842803e02),
    ],
    "B": [
        complex(5.177643571579e02, 5.077803458597e02),
        complex(5.154521291263e02, 5.088249431599e02),
        complex(5.146409228649e02, 5.096208912659e02),
        complex(5.142378756213e02, 5.101023387619e02),
        complex(5.139626667737e02, 5.103976610617e02),
        complex(5.137423460082e02, 5.105948019802e02),
        complex(5.135547056878e02, 5.107404165783e02),
        complex(5.133910925466e02, 5.108576573661e02),
        complex(5.132470705390e02, 5.109577278523e02),
        complex(5.131197729984e02, 5.110460304483e02),
        complex(5.130070319283e02, 5.111252433800e02),
        complex(5.129070537032e02, 5.111968077718e02),
        complex(5.128182883502e02, 5.112616233064e02),
        complex(5.127393733383e02, 5.113203605551e02),
        complex(5.126691062020e02, 5.113735928093e02),
        complex(5.126064276004e02, 5.114218460548e02),
        complex(5.125504076570e02, 5.114656139760e02),
        complex(5.125002331720e02, 5.115053595966e02),
        complex(5.124551951846e02, 5.115415130407e02),
        complex(5.124146770029e02, 5.115744692211e02),
    ],
}

EPSILON = 1.0e-12


def _check_ranks(cls: str, ranks: int) -> None:
    nx, ny, nz, _ = CLASSES[cls]
    if ranks & (ranks - 1) or nz % ranks or ny % ranks:
        raise SystemExit(
            f"error: NAS FT: {ranks} ranks; class {cls} ({nx}x{ny}x{nz}) runs on a power of two of ranks"
            f" that divides both ny = {ny} and nz = {nz}"
        )


def initial_conditions(nx: int, ny: int, z0: int, nzl: int) -> np.ndarray:
    """This rank's planes z0 .. z0+nzl-1 of NPB's initial grid, shape (nzl, ny, nx).

    NPB fills the grid as one stream of 2*nx*ny*nz numbers after the seed (real, imaginary, x fastest,
    then y, then z), each plane starting from the seed jumped 2*nx*ny draws per plane before it: so a
    rank draws only its own planes, from the seed jumped to its first one."""
    start = (SEED * npb.power(npb.A, 2 * nx * ny * z0)) % npb.MOD
    values, _ = npb.vranlc(2 * nx * ny * nzl, start)
    return values.view(np.complex128).reshape(nzl, ny, nx)


def evolve_factor(nx: int, ny: int, nz: int, y0: int, nyl: int) -> np.ndarray:
    """exp(-4 alpha pi^2 (kx^2 + ky^2 + kz^2)) in the transposed layout (z, y_local, x); k is the signed
    wave number (0, 1, .., n/2-1, -n/2, .., -1), so the decay is symmetric in each direction."""
    kx = np.fft.fftfreq(nx, 1.0 / nx)
    ky = np.fft.fftfreq(ny, 1.0 / ny)[y0 : y0 + nyl]
    kz = np.fft.fftfreq(nz, 1.0 / nz)
    k2 = kz[:, None, None] ** 2 + ky[None, :, None] ** 2 + kx[None, None, :] ** 2
    return np.exp(-4.0 * ALPHA * math.pi**2 * k2)


class Transform:
    """NPB's 3D transforms over the slab decomposition of ``comm``: :meth:`forward` takes the z-slab
    layout to the transposed one, :meth:`inverse` back.

    Every array a transform uses is allocated once, as NPB's Fortran arrays are: numpy's transforms
    write into them (``out=``), one axis at a time. Arrays of tens of MB allocated afresh at every step
    are memory the allocator returns to the system and touches again; on a host that takes back freed
    memory (docs/measurements.md, "Why a run's first job is the slowest: memory the host took back")
    that cost 1.5-3.9 s of system CPU per run of FT.A on 4 ranks, against 2.6 s of user CPU."""

    def __init__(self, comm, nx: int, ny: int, nz: int):
        self.comm = comm
        self.p = p = comm.Get_size()
        self.nx, self.ny, self.nz = nx, ny, nz
        self.nzl, self.nyl = nzl, nyl = nz // p, ny // p
        # Block q of ``send`` / ``recv`` is what goes to / came from rank q: Alltoall needs them
        # contiguous and equal.
        self.send = np.empty((p, nzl, nyl, nx), dtype=np.complex128)
        self.recv = np.empty_like(self.send)
        self.slab = np.empty((nzl, ny, nx), dtype=np.complex128)

    def forward(self, u: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``u`` (z-slab layout) transformed into ``out`` (transposed layout, shape (nz, nyl, nx))."""
        p, nzl, nyl, nx = self.p, self.nzl, self.nyl, self.nx
        slab = self.slab
        np.fft.ifft(u, axis=2, norm="forward", out=slab)
        np.fft.ifft(slab, axis=1, norm="forward", out=slab)
        # This rank's planes, the y-lines of rank q in block q.
        np.copyto(self.send, slab.reshape(nzl, p, nyl, nx).transpose(1, 0, 2, 3))
        self.comm.Alltoall(self.send, self.recv)
        # Received block q holds rank q's planes, which come in z order: (p, nzl) is all of z.
        return np.fft.ifft(self.recv.reshape(self.nz, nyl, nx), axis=0, norm="forward", out=out)

    def inverse(self, v: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``v`` (transposed layout) transformed back into ``out`` (z-slab layout, shape (nzl, ny, nx))."""
        p, nzl, nyl, nx = self.p, self.nzl, self.nyl, self.nx
        # (nz, nyl, nx) is already p blocks of nzl planes each, block q for rank q's slab.
        np.fft.fft(v, axis=0, out=self.send.reshape(self.nz, nyl, nx))
        self.comm.Alltoall(self.send, self.recv)
        np.copyto(out.reshape(nzl, p, nyl, nx), self.recv.transpose(1, 0, 2, 3))
        np.fft.fft(out, axis=2, out=out)
        return np.fft.fft(out, axis=1, out=out)


def checksum_points(nx: int, ny: int, nz: int, z0: int, nzl: int) -> tuple[np.ndarray, ...]:
    """This rank's share of NPB's 1024 checksum points (j mod nx, 3j mod ny, 5j mod nz), j = 1..1024,
    as local (z, y, x) indices."""
    j = np.arange(1, 1025)
    x, y, z = j % nx, (3 * j) % ny, (5 * j) % nz
    mine = (z >= z0) & (z < z0 + nzl)
    return z[mine] - z0, y[mine], x[mine]


def mops(nx: int, ny: int, nz: int, niter: int, seconds: float) -> float:
    """NPB's operation count for FT over the timed seconds."""
    n = nx * ny * nz
    ops = n * (14.8157 + 7.19641 * math.log(n) + (5.23518 + 7.21113 * math.log(n)) * niter)
    return 1.0e-6 * ops / seconds if seconds > 0 else 0.0


def solve(comm, cls: str) -> tuple[list[complex], float]:
    """One timed FT run: the checksum after each step (the same on every rank) and the seconds."""
    nx, ny, nz, niter = CLASSES[cls]
    rank = comm.Get_rank()
    fft = Transform(comm, nx, ny, nz)
    z0, y0 = rank * fft.nzl, rank * fft.nyl
    points = checksum_points(nx, ny, nz, z0, fft.nzl)
    ntotal = nx * ny * nz

    u0 = np.empty((nz, fft.nyl, nx), dtype=np.complex128)  # Fourier space, transposed layout
    u1 = np.empty((fft.nzl, ny, nx), dtype=np.complex128)  # real space, z-slab layout
    # NPB runs the set-up and the forward transform once untimed, so that the timed run finds its
    # memory touched (and here numpy's FFT plans cached).
    fft.forward(initial_conditions(nx, ny, z0, fft.nzl), u0)
    comm.Barrier()

    t0 = npb.timer()
    twiddle = evolve_factor(nx, ny, nz, y0, fft.nyl)
    fft.forward(initial_conditions(nx, ny, z0, fft.nzl), u0)
    sums = []
    local = np.zeros(1, dtype=np.complex128)
    total = np.zeros(1, dtype=np.complex128)
    for _ in range(niter):
        u0 *= twiddle
        fft.inverse(u0, u1)
        local[0] = u1[points].sum()
        comm.Allreduce(local, total)
        sums.append(complex(total[0]) / ntotal)
    seconds = npb.timer() - t0
    return sums, seconds


def main(argv: list[str]) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    cls = npb.problem_class(argv, KERNEL, CLASSES)
    _check_ranks(cls, comm.Get_size())
    nx, ny, nz, niter = CLASSES[cls]
    sums, seconds = solve(comm, cls)
    # Every rank holds the same sums (Allreduce), so every rank verifies alike and a failure ends them
    # all the same way rather than leaving rank 0 alone with it.
    for t, (got, ref) in enumerate(zip(sums, VERIFY[cls], strict=True), start=1):
        npb.verify(KERNEL, cls, f"checksum {t} real", got.real, ref.real, EPSILON)
        npb.verify(KERNEL, cls, f"checksum {t} imaginary", got.imag, ref.imag, EPSILON)
    if comm.Get_rank() == 0:
        npb.report(KERNEL, cls, comm.Get_size(), seconds, mops(nx, ny, nz, niter, seconds))


if __name__ == "__main__":
    main(sys.argv)
