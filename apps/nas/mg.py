"""NAS Parallel Benchmark MG (NPB 3.x's specification) as an ordinary mpi4py + numpy program.

V-cycle multigrid for the discrete Poisson problem on a periodic n^3 grid: the right-hand side ``v`` is
zero but for ten +1 and ten -1 points (``zran3``: the largest and smallest of NPB's random field), ``nit``
iterations of ``u += M^k (v - A u)`` follow, each one V-cycle (``mg3P``: restriction ``rprj3`` down to the
2^3 grid, smoothing ``psinv`` and prolongation ``interp`` back up, with the residual ``resid`` on the way),
and the L2 norm of the last residual (``norm2u3``) must match NPB's value to 1e-8.

    mpiexec -n 4 python3 apps/nas/mg.py W

Decomposition: 1D slabs along z over the P ranks (P a power of two, 1 to 16), each array held with one
ghost plane on every side; ghost planes along z come from the neighbouring ranks by Sendrecv, those along x
and y are periodic copies. A level whose slab would be thinner than two planes, or whose whole grid has
fewer than 16 points a side (where a ghost exchange costs more than computing the level), is held whole
on every rank and computed redundantly: the first such level is restricted slab by slab and then
assembled by one Allgather, and is sliced back into slabs when prolongated to the finer level. The
stencils are NPB's; the restriction and prolongation are applied one axis at a time (their weights are
products of 1D weights), which changes only the order of the additions.
"""

from __future__ import annotations

import math
import sys
from typing import NamedTuple

import numpy as np
from mpi4py import MPI
from testbed.apps.nas import npb

KERNEL = "MG"

#: Grid points per side and V-cycles, per class (NPB 3.x; W was 64^3 with 40 iterations in NPB 2.x).
CLASSES = {
    "S": {"n": 32, "nit": 4},
    "W": {"n": 128, "nit": 4},
    "A": {"n": 256, "nit": 4},
    "B": {"n": 256, "nit": 20},
}

#: NPB's L2 norm of the final residual, per class.
VERIFY = {
    "S": 0.5307707005734e-04,
    "W": 0.6467329375339e-05,
    "A": 0.2433365309069e-05,
    "B": 0.1800564401355e-05,
}

EPSILON = 1.0e-8

#: The operator A's coefficients: centre, faces, edges, corners (the same in every class).
A_COEF = (-8.0 / 3.0, 0.0, 1.0 / 6.0, 1.0 / 12.0)

#: The smoother's coefficients, per class: NPB's S(a) smoother for S, W and A, its S(b) smoother from
#: class B on (NPB 3.x mg.f: "Coefficients for the S(b) smoother").
C_COEF = {
    **{cls: (-3.0 / 8.0, 1.0 / 32.0, -1.0 / 64.0, 0.0) for cls in ("S", "W", "A")},
    "B": (-3.0 / 17.0, 1.0 / 33.0, -1.0 / 61.0, 0.0),
}

#: NPB's seed for zran3's field, and how many +1 and -1 points it places.
SEED = 314159265
CHARGES = 10

#: Levels with fewer points a side are held whole on every rank (when there are several ranks).
MIN_SPLIT_N = 16


class Level(NamedTuple):
    n: int  # points a side of the whole grid
    split: bool  # held in slabs along z, or whole on every rank
    m: int  # planes along z held here
    z0: int  # the first of them, in the whole grid


class Grid:
    """The ranks' geometry and the ghost-plane exchange."""

    def __init__(self, comm, n: int):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.below = (self.rank - 1) % self.size
        self.above = (self.rank + 1) % self.size
        lt = int(math.log2(n))
        self.levels: dict[int, Level] = {}
        for k in range(1, lt + 1):
            nk = 1 << k
            split = k == lt or (nk // self.size >= 2 and (self.size == 1 or nk >= MIN_SPLIT_N))
            m = nk // self.size if split else nk
            self.levels[k] = Level(nk, split, m, self.rank * m if split else 0)
        self.lt = lt

    def array(self, k: int) -> np.ndarray:
        lev = self.levels[k]
        return np.zeros((lev.m + 2, lev.n + 2, lev.n + 2))

    def exchange(self, g: np.ndarray, k: int) -> None:
        """Fills g's ghost planes (NPB's comm3). x first, then y over x's ghosts, then z over both, so that
        edges and corners of the ghost shell come out right."""
        g[:, :, 0] = g[:, :, -2]
        g[:, :, -1] = g[:, :, 1]
        g[:, 0, :] = g[:, -2, :]
        g[:, -1, :] = g[:, 1, :]
        m = g.shape[0] - 2
        if self.levels[k].split and self.size > 1:
            # Two sends each way even with two ranks (below == above): the tags keep them apart.
            comm, up, down = self.comm, self.above, self.below
            comm.Sendrecv(g[m], dest=up, sendtag=1, recvbuf=g[0], source=down, recvtag=1)
            comm.Sendrecv(g[1], dest=down, sendtag=2, recvbuf=g[m + 1], source=up, recvtag=2)
        else:
            g[0] = g[m]
            g[m + 1] = g[1]


def _core(g: np.ndarray) -> np.ndarray:
    return g[1:-1, 1:-1, 1:-1]


_scratch: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}


def _buf(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A scratch array kept between calls: a fresh large temporary costs its page faults every time, which
    is about as much as the arithmetic on it."""
    b = _scratch.get((name, shape))
    if b is None:
        b = _scratch[(name, shape)] = np.empty(shape)
    return b


def _yz_sums(g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For every interior (z, y) and every x, ghosts included: the sum of the four neighbours across a face
    in y and z, and of the four across an edge in y and z. The x neighbours are then slices of these."""
    shape = (g.shape[0] - 2, g.shape[1] - 2, g.shape[2])
    faces = np.add(g[1:-1, :-2, :], g[1:-1, 2:, :], out=_buf("faces", shape))
    faces += g[:-2, 1:-1, :]
    faces += g[2:, 1:-1, :]
    edges = np.add(g[:-2, :-2, :], g[:-2, 2:, :], out=_buf("edges", shape))
    edges += g[2:, :-2, :]
    edges += g[2:, 2:, :]
    return faces, edges


def resid(grid: Grid, k: int, u: np.ndarray, v: np.ndarray, r: np.ndarray, a) -> None:
    """r = v - A u (v may be r itself). A's face coefficient a[1] is zero in every class: left out."""
    faces, edges = _yz_sums(u)
    shape = faces[:, :, 1:-1].shape
    # the 12 edge neighbours: four in the yz plane, eight one step along x
    e = np.add(faces[:, :, :-2], faces[:, :, 2:], out=_buf("e", shape))
    e += edges[:, :, 1:-1]
    e *= a[2]
    # the 8 corners
    t = np.add(edges[:, :, :-2], edges[:, :, 2:], out=_buf("t", shape))
    t *= a[3]
    e += t
    np.multiply(_core(u), a[0], out=t)
    e += t
    out = _core(r)
    if v is r:
        out -= e
    else:
        np.subtract(_core(v), e, out=out)
    grid.exchange(r, k)


def psinv(grid: Grid, k: int, r: np.ndarray, u: np.ndarray, c) -> None:
    """u += C r, NPB's smoother. c[3] (corners) is zero in every class: left out."""
    faces, edges = _yz_sums(r)
    shape = faces[:, :, 1:-1].shape
    # r's face neighbours: two along x, four in the yz plane
    f = np.add(r[1:-1, 1:-1, :-2], r[1:-1, 1:-1, 2:], out=_buf("e", shape))
    f += faces[:, :, 1:-1]
    f *= c[1]
    # its edge neighbours: four in the yz plane, eight one step along x
    t = np.add(faces[:, :, :-2], faces[:, :, 2:], out=_buf("t", shape))
    t += edges[:, :, 1:-1]
    t *= c[2]
    f += t
    np.multiply(_core(r), c[0], out=t)
    f += t
    _core(u)[...] += f
    grid.exchange(u, k)


def _restrict(g: np.ndarray, axis: int, w: float) -> np.ndarray:
    """Weights (w/2, w, w/2) along one axis at every other point: padded 2m+2 points to m interior."""
    size = g.shape[axis]

    def sl(start):
        idx = [slice(None)] * g.ndim
        idx[axis] = slice(start, size - 3 + start, 2)
        return g[tuple(idx)]

    out = sl(1) + sl(3)
    out *= 0.5 * w
    out += w * sl(2)
    return out


def rprj3(fine: np.ndarray) -> np.ndarray:
    """NPB's restriction (weights 1/2 at the centre, 1/4 across a face, 1/8 an edge, 1/16 a corner) of a
    padded fine array to the coarse interior points: the product of (1/4, 1/2, 1/4) along z and
    (1/2, 1, 1/2) along y and x."""
    t = _restrict(fine, 0, 0.5)
    t = _restrict(t, 1, 1.0)
    return _restrict(t, 2, 1.0)


def _prolong(g: np.ndarray, axis: int) -> np.ndarray:
    """Linear interpolation along one axis: padded m+2 points to padded 2m+2 (the ghosts come out right
    when the coarse ghosts are)."""
    m = g.shape[axis] - 2
    shape = list(g.shape)
    shape[axis] = 2 * m + 2
    out = np.empty(shape)

    def sl(a, start, stop, step=1):
        idx = [slice(None)] * a.ndim
        idx[axis] = slice(start, stop, step)
        return a[tuple(idx)]

    sl(out, 0, None, 2)[...] = sl(g, 0, m + 1)
    odd = sl(out, 1, None, 2)
    np.add(sl(g, 0, m + 1), sl(g, 1, m + 2), out=odd)
    odd *= 0.5
    return out


def interp(z: np.ndarray) -> np.ndarray:
    """NPB's trilinear prolongation of a padded coarse array: a padded fine array, ghosts included."""
    return _prolong(_prolong(_prolong(z, 2), 1), 0)


class Solver:
    """u and r on every level, v on the finest, and the V-cycle over them."""

    def __init__(self, grid: Grid, cls: str, v: np.ndarray):
        self.g = grid
        self.a = A_COEF
        self.c = C_COEF[cls]
        lt = grid.lt
        self.u = {k: grid.array(k) for k in range(1, lt + 1)}
        self.r = {k: grid.array(k) for k in range(1, lt + 1)}
        self.v = v

    def restrict(self, k: int) -> None:
        """r[k-1] from r[k]: slab by slab, gathered whole where level k-1 is not split."""
        g, fine, coarse = self.g, self.g.levels[k], self.g.levels[k - 1]
        part = rprj3(self.r[k])
        if coarse.split or not fine.split or g.size == 1:
            _core(self.r[k - 1])[...] = part
        else:
            whole = np.empty((coarse.n, coarse.n, coarse.n))
            g.comm.Allgather(np.ascontiguousarray(part), whole)
            _core(self.r[k - 1])[...] = whole
        g.exchange(self.r[k - 1], k - 1)

    def prolong(self, k: int) -> np.ndarray:
        """interp of u[k-1] onto level k's points held here, ghosts included."""
        fine, coarse = self.g.levels[k], self.g.levels[k - 1]
        z = self.u[k - 1]
        if fine.split and not coarse.split:
            # the coarse planes under this slab, and one ghost plane each side
            z0 = fine.z0 // 2
            z = z[z0 : z0 + fine.m // 2 + 2]
        return interp(z)

    def mg3p(self) -> None:
        g, u, r, lt = self.g, self.u, self.r, self.g.lt
        for k in range(lt, 1, -1):
            self.restrict(k)
        u[1].fill(0.0)
        psinv(g, 1, r[1], u[1], self.c)
        for k in range(2, lt):
            u[k][...] = self.prolong(k)
            resid(g, k, u[k], r[k], r[k], self.a)
            psinv(g, k, r[k], u[k], self.c)
        u[lt] += self.prolong(lt)
        resid(g, lt, u[lt], self.v, r[lt], self.a)
        psinv(g, lt, r[lt], u[lt], self.c)

    def norm2u3(self) -> tuple[float, float]:
        """The L2 norm (root mean square over the whole grid) and the largest magnitude of r."""
        core = _core(self.r[self.g.lt])
        local = np.array([np.vdot(core, core), np.abs(core).max()])
        total = np.empty(1)
        top = np.empty(1)
        self.g.comm.Allreduce(local[:1], total, op=MPI.SUM)
        self.g.comm.Allreduce(local[1:], top, op=MPI.MAX)
        n = self.g.levels[self.g.lt].n
        return math.sqrt(total[0] / n**3), float(top[0])


def zran3(grid: Grid) -> np.ndarray:
    """NPB's right-hand side on this rank's slab: zero but for +1 at the CHARGES largest and -1 at the
    CHARGES smallest values of NPB's random field. The field is one stream of the generator from SEED over
    the whole grid, x fastest, so a slab (whole planes) is one contiguous run of it."""
    lev = grid.levels[grid.lt]
    n = lev.n
    start = lev.z0 * n * n
    seed = (SEED * npb.power(npb.A, start)) % npb.MOD
    field, _ = npb.vranlc(lev.m * n * n, seed)
    hi = np.argpartition(field, -CHARGES)[-CHARGES:]
    lo = np.argpartition(field, CHARGES)[:CHARGES]
    # candidates as (value, global index in the stream): the values are distinct (a 2^46-period stream)
    mine = np.concatenate(
        [np.stack([field[hi], (hi + start).astype(np.float64)], 1),
         np.stack([field[lo], (lo + start).astype(np.float64)], 1)]
    )  # fmt: skip
    every = np.empty((grid.size, 2 * CHARGES, 2))
    grid.comm.Allgather(mine, every)
    every = every.reshape(-1, 2)
    order = np.argsort(every[:, 0], kind="stable")
    v = grid.array(grid.lt)
    core = _core(v)
    for rows, sign in ((order[-CHARGES:], 1.0), (order[:CHARGES], -1.0)):
        for idx in every[rows, 1].astype(np.int64):
            z, rest = divmod(int(idx), n * n)
            if lev.z0 <= z < lev.z0 + lev.m:
                y, x = divmod(rest, n)
                core[z - lev.z0, y, x] = sign
    grid.exchange(v, grid.lt)
    return v


def main(argv: list[str]) -> None:
    comm = MPI.COMM_WORLD
    cls = npb.problem_class(argv, KERNEL, CLASSES)
    n, nit = CLASSES[cls]["n"], CLASSES[cls]["nit"]
    size = comm.Get_size()
    refusal = None
    if size & (size - 1) or size > 16:
        refusal = f"error: NAS {KERNEL}: {size} ranks; use a power of two, 1 to 16"
    elif n // size < 2:
        refusal = f"error: NAS {KERNEL}: class {cls} has {n} planes, too few for {size} ranks"
    if refusal:
        # one line for the job, not one per rank
        raise SystemExit(refusal if comm.Get_rank() == 0 else 1)

    grid = Grid(comm, n)
    solver = Solver(grid, cls, zran3(grid))

    # One untimed iteration, as NPB does (first touch of every array, the ranks' first messages); v is
    # left as it was, so only u starts again from zero.
    resid(grid, grid.lt, solver.u[grid.lt], solver.v, solver.r[grid.lt], solver.a)
    solver.mg3p()
    resid(grid, grid.lt, solver.u[grid.lt], solver.v, solver.r[grid.lt], solver.a)
    solver.u[grid.lt].fill(0.0)

    comm.Barrier()
    t0 = npb.timer()
    resid(grid, grid.lt, solver.u[grid.lt], solver.v, solver.r[grid.lt], solver.a)
    solver.norm2u3()
    for _ in range(nit):
        solver.mg3p()
        resid(grid, grid.lt, solver.u[grid.lt], solver.v, solver.r[grid.lt], solver.a)
    rnm2, _ = solver.norm2u3()
    elapsed = np.array([npb.timer() - t0])

    slowest = np.empty(1)
    comm.Reduce(elapsed, slowest, op=MPI.MAX, root=0)
    if comm.Get_rank() == 0:
        npb.verify(KERNEL, cls, "L2 norm of the residual", rnm2, VERIFY[cls], EPSILON)
        seconds = float(slowest[0])
        mops = 58.0 * nit * n**3 * 1e-6 / seconds if seconds > 0 else None
        npb.report(KERNEL, cls, size, seconds, mops)


if __name__ == "__main__":
    main(sys.argv)
