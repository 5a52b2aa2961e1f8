"""NAS Parallel Benchmark CG (NPB 3.x, MPI version) in mpi4py + numpy: the smallest eigenvalue of a
sparse symmetric positive definite matrix by inverse power iteration, each step a 25-iteration conjugate
gradient solve.

``mpiexec -n P python3 apps/nas/cg.py [S|W|A|B]``   (P a power of two: 1, 2, 4, 8, 16)

The matrix is NPB's (``makea``): for each of the ``na`` outer rows a sparse random vector of ``nonzer``
entries (``sprnvc``, drawing pairs of NPB's random numbers from seed 314159265 after one discarded draw)
with 0.5 set at the row's own index (``vecset``), whose outer product, scaled by rcond^(i/na), is added
in; then rcond - shift on the diagonal, duplicates summed (``sparse``). Every rank draws the whole
sequence (a few hundred thousand numbers, well under a second) and keeps the elements of its own block,
so the matrix is NPB's whatever P is.

Decomposition, as NPB's MPI CG: the ranks form an ``nprows x npcols`` grid (square when log2 P is even,
else npcols = 2 nprows), rank ``me`` at row ``me // npcols``, column ``me % npcols``. It holds the matrix
block of its row block of rows and column block of columns, and the vectors x, z, p, q, r on its column
block (each grid row holds a whole copy). One matrix-vector product q = A p is then:

- the local block times the local p segment;
- the sum across the grid row, by ``log2 npcols`` pairwise ``Sendrecv`` exchanges with partners at
  distance npcols/2, npcols/4, ..., 1 (recursive doubling of the whole row segment on a square grid; on
  a non-square one the nearest exchange first halves it, a reduce-scatter step);
- a ``Sendrecv`` of the summed segment with the transposed rank, which turns row-block sums into the
  column-block segment of q (a rank that is its own transpose copies it, where NPB sends itself a
  message).

Each dot product is summed by the same ``log2 npcols`` pairwise exchanges of one double (two for the
power step's x.z and z.z): NPB's hand-made allreduce within a grid row. So per CG iteration a rank sends
``3 log2 npcols + 1`` messages: a vector segment per row-sum step (``na / nprows`` doubles on a square
grid, ``na / npcols`` on a non-square one), ``na / npcols`` doubles to its transpose (none on the
diagonal), and one 8-byte message per step for each of the two dot products. There are no collectives
but one barrier before the timed section and one reduce (the time's maximum) after it. NPB posts
``irecv`` then ``send`` then ``wait`` for each exchange; here each is one ``Sendrecv`` (the testbed
mirrors no ``Irecv``), which moves the same messages between the same ranks.

The local product is scipy.sparse's CSR one where scipy is installed (the testbed does not require it);
else numpy's ``bincount`` over the block's elements, the same sums, about ten times slower.

Timed as NPB: one untimed power step, x reset to ones, a barrier, then ``niter`` steps; the time is the
slowest rank's. Verification: zeta = shift + 1/(x.z) after the last step within a relative 1e-10 of
NPB's value, checked on rank 0 as NPB does.
"""

from __future__ import annotations

import math
import sys

import numpy as np
from testbed.apps.nas import npb

try:
    import scipy.sparse as _sparse
except ImportError:  # not a dependency of the testbed: numpy's bincount does the product then
    _sparse = None

KERNEL = "CG"
SEED = 314159265
RCOND = 0.1
#: conjugate gradient iterations per power step (NPB's cgitmax)
CGITMAX = 25

#: class: na (order), nonzer (nonzeros per random vector), niter (power steps), shift
CLASSES = {
    "S": {"na": 1400, "nonzer": 7, "niter": 15, "shift": 10.0},
    "W": {"na": 7000, "nonzer": 8, "niter": 15, "shift": 12.0},
    "A": {"na": 14000, "nonzer": 11, "niter": 15, "shift": 20.0},
    "B": {"na": 75000, "nonzer": 13, "niter": 75, "shift": 60.0},
}

#: NPB's zeta for each class
ZETA = {
    "S": 8.5971775078648,
    "W": 10.362595087124,
    "A": 17.130235054029,
    "B": 22.712745482631,
}
EPSILON = 1.0e-10


# -- the matrix --------------------------------------------------------------------------------------------


def random_vectors(na: int, nonzer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NPB's ``sprnvc`` + ``vecset`` for every outer row: indices (0-based) and values, padded to
    ``nonzer + 1`` per row, and each row's count."""
    nn1 = 2
    while nn1 < na:
        nn1 *= 2
    seed, _ = npb.randlc(SEED)  # NPB's main program draws one number before makea
    chunk = 2 * na * (nonzer + 2)  # even: a (value, position) pair never straddles two draws
    elts: list[float] = []
    locs: list[int] = []
    pos = 0
    idx = np.zeros((na, nonzer + 1), dtype=np.int64)
    val = np.zeros((na, nonzer + 1))
    cnt = np.empty(na, dtype=np.int64)
    for outer in range(na):
        where: dict[int, int] = {}
        iv: list[int] = []
        v: list[float] = []
        while len(iv) < nonzer:
            if pos == len(elts):
                drawn, seed = npb.vranlc(chunk, seed)
                elts = drawn[0::2].tolist()
                # nn1 is a power of two and the draw a multiple of 2^-46: the product is exact, so this
                # is NPB's int(nn1 * x)
                locs = (drawn[1::2] * nn1).astype(np.int64).tolist()
                pos = 0
            i = locs[pos]
            if i < na and i not in where:
                where[i] = len(iv)
                iv.append(i)
                v.append(elts[pos])
            pos += 1
        if outer in where:
            v[where[outer]] = 0.5
        else:
            iv.append(outer)
            v.append(0.5)
        k = len(iv)
        idx[outer, :k] = iv
        val[outer, :k] = v
        cnt[outer] = k
    return idx, val, cnt


def make_block(na: int, nonzer: int, shift: float, rows: range, cols: range):
    """The block ``rows x cols`` of NPB's matrix, in CSR with local indices: (data, indices, indptr)."""
    idx, val, cnt = random_vectors(na, nonzer)
    ratio = RCOND ** (1.0 / na)
    sizes = np.empty(na)
    size = 1.0
    for i in range(na):  # a running product, in NPB's order, so each row's scale is its bit for bit
        sizes[i] = size
        size *= ratio
    k = nonzer + 1
    valid = np.arange(k) < cnt[:, None]
    in_rows = valid & (idx >= rows.start) & (idx < rows.stop)
    in_cols = valid & (idx >= cols.start) & (idx < cols.stop)
    # [outer, a, b]: element (row idx[b], column idx[a]) = v[b] * (size * v[a]), in NPB's loop order
    keep = in_cols[:, :, None] & in_rows[:, None, :]
    scale = sizes[:, None] * val
    elements = (val[:, None, :] * scale[:, :, None])[keep]
    r = np.broadcast_to(idx[:, None, :], keep.shape)[keep]
    c = np.broadcast_to(idx[:, :, None], keep.shape)[keep]
    diag = np.arange(max(rows.start, cols.start), min(rows.stop, cols.stop), dtype=np.int64)
    r = np.concatenate([r, diag]) - rows.start
    c = np.concatenate([c, diag]) - cols.start
    elements = np.concatenate([elements, np.full(diag.size, RCOND - shift)])
    # NPB's sparse(): a stable sort keeps each element's duplicates in the order they were generated, and
    # they are summed in that order; an element that sums to exactly zero is dropped
    order = np.lexsort((c, r))
    r, c, elements = r[order], c[order], elements[order]
    first = np.flatnonzero(np.r_[True, (r[1:] != r[:-1]) | (c[1:] != c[:-1])])
    data = np.add.reduceat(elements, first) if first.size else elements
    r, c = r[first], c[first]
    nonzero = data != 0.0
    data, r, c = data[nonzero], r[nonzero], c[nonzero]
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=len(rows)), out=indptr[1:])
    return data, c, indptr


class Block:
    """The local block's product with a column-block segment."""

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int]):
        self.nnz = data.size
        if _sparse is not None:
            self._m = _sparse.csr_matrix((data, indices, indptr), shape=shape)
        else:
            self._m = None
            self._data, self._cols = data, indices
            self._rows = np.repeat(np.arange(shape[0]), np.diff(indptr))
            self._n = shape[0]

    def __matmul__(self, p: np.ndarray) -> np.ndarray:
        if self._m is not None:
            return self._m @ p
        return np.bincount(self._rows, weights=self._data * p[self._cols], minlength=self._n)


# -- the process grid --------------------------------------------------------------------------------------


class Grid:
    """NPB's ``setup_proc_info`` and ``setup_submatrix_info`` for a power-of-two number of ranks, with
    the exchanges they schedule."""

    def __init__(self, comm, na: int, cls: str):
        self.comm = comm
        self.me = me = comm.Get_rank()
        size = comm.Get_size()
        if size & (size - 1):
            raise SystemExit(f"error: NAS CG: {size} ranks; use a power of two")
        log2 = size.bit_length() - 1
        self.nprows = nprows = 1 << (log2 // 2)
        self.npcols = npcols = size // nprows
        if na % npcols:
            raise SystemExit(
                f"error: NAS CG: class {cls}'s {na} rows do not split into {npcols} columns of ranks"
                f" ({size} ranks); use fewer"
            )
        proc_row, proc_col = divmod(me, npcols)
        nrows, ncols = na // nprows, na // npcols
        self.rows = range(proc_row * nrows, (proc_row + 1) * nrows)
        self.cols = range(proc_col * ncols, (proc_col + 1) * ncols)
        self.nrows, self.ncols = nrows, ncols
        if nprows == npcols:
            self.send_start, self.send_len = 0, nrows
            self.exch = (me % nprows) * nprows + me // nprows
        else:
            # a grid row's rows split in halves between even and odd grid columns
            self.send_len = nrows // 2
            self.send_start = 0 if me % 2 == 0 else nrows // 2
            self.exch = 2 * ((me // 2 % nprows) * nprows + me // 2 // nprows) + me % 2
        self.l2npcols = l2 = npcols.bit_length() - 1
        self.partners = []
        div = npcols
        for _ in range(l2):
            j = (proc_col + div // 2) % div + proc_col // div * div
            self.partners.append(proc_row * npcols + j)
            div //= 2
        # (partner, tag, send start, send length, receive length), nearest partner first
        self.schedule = []
        for i in reversed(range(l2)):
            if nprows == npcols:
                send = (self.send_start, self.send_len)
                recv_len = nrows
            elif i == l2 - 1:
                # the reduce-scatter step: the other half goes to the neighbour
                send = (self.send_start + self.send_len if me % 2 == 0 else 0, nrows - self.send_len)
                recv_len = self.send_len
            else:
                send = (self.send_start, self.send_len)
                recv_len = self.send_len
            self.schedule.append((self.partners[i], i + 1, *send, recv_len))

    def row_transpose(self, w: np.ndarray) -> np.ndarray:
        """The column-block segment of A p from each rank's block product ``w``: summed across the grid
        row, then swapped with the transposed rank."""
        start = self.send_start
        for partner, tag, s0, slen, rlen in self.schedule:
            got = np.empty(rlen)
            self.comm.Sendrecv(w[s0 : s0 + slen], partner, tag, got, partner, tag)
            w[start : start + rlen] += got
        mine = w[start : start + self.send_len]
        if self.exch == self.me:
            return mine.copy()
        q = np.empty(self.ncols)
        self.comm.Sendrecv(mine, self.exch, 0, q, self.exch, 0)
        return q

    def row_sum(self, *values: float) -> np.ndarray:
        """Each value summed over the grid row (NPB's pairwise exchange; every grid row has them all)."""
        acc = np.array(values, dtype=np.float64)
        got = np.empty_like(acc)
        for i, partner in enumerate(self.partners):
            self.comm.Sendrecv(acc, partner, i + 1, got, partner, i + 1)
            acc += got
        return acc


# -- the benchmark -----------------------------------------------------------------------------------------


def conj_grad(grid: Grid, a: Block, x: np.ndarray) -> tuple[np.ndarray, float]:
    """NPB's ``conj_grad``: z with A z ~ x after CGITMAX iterations, and ||x - A z||."""
    z = np.zeros_like(x)
    r = x.copy()
    p = r.copy()
    (rho,) = grid.row_sum(r @ r)
    for _ in range(CGITMAX):
        q = grid.row_transpose(a @ p)
        (d,) = grid.row_sum(p @ q)
        alpha = rho / d
        rho0 = rho
        z += alpha * p
        r -= alpha * q
        (rho,) = grid.row_sum(r @ r)
        p *= rho / rho0
        p += r
    az = grid.row_transpose(a @ z)
    diff = x - az
    (d,) = grid.row_sum(diff @ diff)
    return z, math.sqrt(d)


def power_step(grid: Grid, a: Block, x: np.ndarray, shift: float) -> tuple[np.ndarray, float, float]:
    """One inverse power step: the next x, zeta = shift + 1/(x.z), and the CG residual."""
    z, rnorm = conj_grad(grid, a, x)
    xz, zz = grid.row_sum(x @ z, z @ z)
    return z * (1.0 / math.sqrt(zz)), float(shift + 1.0 / xz), rnorm


def mops(na: int, nonzer: int, niter: int, seconds: float) -> float:
    """NPB's operation count for CG, in millions per second."""
    per_step = 3.0 + nonzer * (nonzer + 1.0) + 25.0 * (5.0 + nonzer * (nonzer + 1.0)) + 3.0
    return 1.0e-6 * 2 * niter * na * per_step / seconds if seconds > 0 else 0.0


def main(argv: list[str]) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    cls = npb.problem_class(argv, KERNEL, CLASSES)
    na, nonzer, niter, shift = (CLASSES[cls][k] for k in ("na", "nonzer", "niter", "shift"))
    grid = Grid(comm, na, cls)
    data, indices, indptr = make_block(na, nonzer, shift, grid.rows, grid.cols)
    a = Block(data, indices, indptr, (grid.nrows, grid.ncols))

    # the untimed step NPB takes to touch every page, then the same start again
    power_step(grid, a, np.ones(grid.ncols), shift)
    x = np.ones(grid.ncols)
    comm.Barrier()
    t0 = npb.timer()
    for _ in range(niter):
        x, zeta, rnorm = power_step(grid, a, x, shift)
    seconds = npb.timer() - t0
    tmax = comm.reduce(seconds, op=MPI.MAX, root=0)

    if grid.me == 0:
        print(f"NAS CG class {cls}: zeta = {zeta:.13f}, ||r|| = {rnorm:.14e}", flush=True)
        npb.verify(KERNEL, cls, "zeta", zeta, ZETA[cls], EPSILON)
        npb.report(KERNEL, cls, comm.Get_size(), tmax, mops(na, nonzer, niter, tmax))


if __name__ == "__main__":
    main(sys.argv)
