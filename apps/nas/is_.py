"""NAS IS (integer sort), after NPB 3.x's MPI version: ranks 2^n keys (each the sum of four of NPB's
uniform numbers times MAX_KEY/4, so roughly Gaussian) by a bucketed counting sort, ten times.

    mpiexec -n 4 python3 apps/nas/is_.py [S|W|A|B]

(``is`` is a Python keyword, hence the file's name.) Each rank makes TOTAL_KEYS/P keys from its own
stretch of the stream (seed 314159265 jumped 4 TOTAL_KEYS/P * rank ahead, NPB's ``find_my_seed``). An
iteration: rank 0 alters two keys (so that every iteration's ranks differ); each rank counts its keys per
bucket (the top bits of the key) and orders them by bucket; an Allreduce gives every rank the global
bucket sizes, from which it knows which run of buckets each rank will rank (about TOTAL_KEYS/P keys
each); an Alltoall of the counts and an Alltoallv of the keys move every key to its rank; each rank
counts its keys' values, and the running sum of those counts is each key's rank among the keys of its
buckets, which plus the keys of all lower buckets is its global rank.

Verification, NPB's rule: in every timed iteration, the rank of five given keys (the test keys, NPB's
``test_index_array``; their values travel hidden in the Allreduce) equals NPB's value for that class and
iteration (partial verification); after the last, the keys placed by their ranks are in order on each
rank and across ranks (full verification). A failure names the iteration, test key, rank and NPB's value.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI
from testbed.apps.nas import npb

KERNEL = "IS"
MAX_ITERATIONS = 10
TEST_ARRAY_SIZE = 5
#: NPB's seed for IS's keys.
SEED = 314159265

#: Per class: log2 of the keys, of the key range and of the buckets; NPB's partial verification: where
#: the test keys are (their indices in the global key sequence), their ranks, and how those ranks move
#: with the iteration (expected = rank + sign * (iteration + offset), per test key).
CLASSES = {
    "S": {
        "total_keys_log2": 16,
        "max_key_log2": 11,
        "buckets_log2": 9,
        "test_index": [48427, 17148, 23627, 62548, 4431],
        "test_rank": [0, 18, 346, 64917, 65463],
        "shift": [(1, 0), (1, 0), (1, 0), (-1, 0), (-1, 0)],
    },
    "W": {
        "total_keys_log2": 20,
        "max_key_log2": 16,
        "buckets_log2": 10,
        "test_index": [357773, 934767, 875723, 898999, 404505],
        "test_rank": [1249, 11698, 1039987, 1043896, 1048018],
        "shift": [(1, -2), (1, -2), (-1, 0), (-1, 0), (-1, 0)],
    },
    "A": {
        "total_keys_log2": 23,
        "max_key_log2": 19,
        "buckets_log2": 10,
        "test_index": [2112377, 662041, 5336171, 3642833, 4250760],
        "test_rank": [104, 17523, 123928, 8288932, 8388264],
        "shift": [(1, -1), (1, -1), (1, -1), (-1, -1), (-1, -1)],
    },
    "B": {
        "total_keys_log2": 25,
        "max_key_log2": 21,
        "buckets_log2": 10,
        "test_index": [41869, 812306, 5102857, 18232239, 26860214],
        "test_rank": [33422937, 10244, 59149, 33135281, 99],
        "shift": [(-1, 0), (1, 0), (1, 0), (-1, 0), (1, 0)],
    },
}


def create_keys(rank: int, num_keys: int, max_key: int) -> np.ndarray:
    """This rank's keys: each (MAX_KEY/4) * (r1 + r2 + r3 + r4), truncated, summed in NPB's order."""
    seed = SEED * npb.power(npb.A, 4 * num_keys * rank) % npb.MOD
    r, _ = npb.vranlc(4 * num_keys, seed)
    x = r[0::4] + r[1::4]
    x += r[2::4]
    x += r[3::4]
    return ((max_key // 4) * x).astype(np.int32)


class Ranker:
    """One rank's state across NPB's iterations: its keys, the class's parameters, and the outcome of
    the partial verification so far (tests passed, first failure)."""

    def __init__(self, comm, cls: str) -> None:
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.cls = cls
        c = CLASSES[cls]
        self.total_keys = 1 << c["total_keys_log2"]
        self.max_key = 1 << c["max_key_log2"]
        self.buckets = 1 << c["buckets_log2"]
        self.shift = c["max_key_log2"] - c["buckets_log2"]
        self.num_keys = self.total_keys // self.size
        self.test_index = c["test_index"]
        self.test_rank = c["test_rank"]
        self.test_shift = c["shift"]
        self.keys = create_keys(self.rank, self.num_keys, self.max_key)
        self.passed = 0
        self.failure: str | None = None
        # What the last iteration leaves for the full verification.
        self.received = np.empty(0, dtype=np.int32)
        self.min_key = 0
        self.below = np.empty(0, dtype=np.int64)

    def iterate(self, iteration: int) -> None:
        comm, nb, shift = self.comm, self.buckets, self.shift
        keys = self.keys
        if self.rank == 0:
            keys[iteration] = iteration
            keys[iteration + MAX_ITERATIONS] = self.max_key - iteration

        # The test keys' values ride in the Allreduce after the bucket sizes: the rank that holds one puts
        # it there, the others 0, so the sum is the key.
        local = np.zeros(nb + TEST_ARRAY_SIZE, dtype=np.int32)
        for i, index in enumerate(self.test_index):
            if index // self.num_keys == self.rank:
                local[nb + i] = keys[index % self.num_keys]
        bucket = (keys >> shift).astype(np.uint16)
        local[:nb] = np.bincount(bucket, minlength=nb)
        # A stable sort on uint16 is numpy's radix sort: NPB's counting sort into buckets.
        by_bucket = keys[np.argsort(bucket, kind="stable")]

        totals = np.empty_like(local)
        comm.Allreduce(local, totals, op=MPI.SUM)

        # NPB's redistribution: buckets go to rank j until the running total reaches (j+1) NUM_KEYS.
        size = self.size
        send_count = np.zeros(size, dtype=np.int32)
        first = np.zeros(size, dtype=np.int64)
        last = np.zeros(size, dtype=np.int64)
        acc = local_acc = j = 0
        tot, mine = totals[:nb].tolist(), local[:nb].tolist()
        for b in range(nb):
            acc += tot[b]
            local_acc += mine[b]
            if j < size and acc >= (j + 1) * self.num_keys:
                send_count[j] = local_acc
                if j:
                    first[j] = last[j - 1] + 1
                last[j] = b
                j += 1
                local_acc = 0
        # Ranks left without buckets (many ranks, few buckets) get an empty run.
        first[j:] = 1
        last[j:] = 0
        send_displ = np.concatenate(([0], np.cumsum(send_count)[:-1])).astype(np.int32)

        recv_count = np.empty(size, dtype=np.int32)
        comm.Alltoall(send_count, recv_count)
        recv_displ = np.concatenate(([0], np.cumsum(recv_count)[:-1])).astype(np.int32)
        received = np.empty(int(recv_count.sum()), dtype=np.int32)
        comm.Alltoallv(
            [by_bucket, (send_count, send_displ), MPI.INT], [received, (recv_count, recv_displ), MPI.INT]
        )

        r = self.rank
        min_key = int(first[r]) << shift
        max_key = ((int(last[r]) + 1) << shift) - 1
        span = max(max_key - min_key + 1, 0)
        # below[v - min_key]: how many of this rank's keys are <= v; lesser: the keys of lower ranks' buckets.
        below = np.cumsum(np.bincount(received - min_key, minlength=span)[:span])
        lesser = sum(int(totals[first[k] : last[k] + 1].sum()) for k in range(r))

        for i in range(TEST_ARRAY_SIZE):
            k = int(totals[nb + i])
            if min_key <= k <= max_key:
                key_rank = (int(below[k - 1 - min_key]) if k > min_key else 0) + lesser
                sign, offset = self.test_shift[i]
                expected = self.test_rank[i] + sign * (iteration + offset)
                if key_rank == expected:
                    self.passed += 1
                elif self.failure is None:
                    self.failure = (
                        f"NAS IS class {self.cls}: partial verification failed in iteration {iteration}:"
                        f" test key {i} (value {k}) has rank {key_rank}, NPB's is {expected}"
                    )
        self.received, self.min_key, self.below = received, min_key, below

    def full_verify(self) -> str | None:
        """NPB's full verification of the last iteration: each key placed at its rank (counting down from
        the rank of its value, as NPB's loop does) must fill this rank's positions exactly once, in order,
        and this rank's least key must not be less than the previous rank's greatest."""
        keys, below = self.received, self.below
        n = len(keys)
        failure = None
        sorted_keys = np.empty(0, dtype=np.int32)
        if n:
            order = np.argsort(keys, kind="stable")
            grouped = keys[order]
            starts = np.searchsorted(grouped, grouped, side="left")
            # The j-th copy of a value v in key order goes to position below[v] - 1 - j.
            positions = np.empty(n, dtype=np.int64)
            positions[order] = below[grouped - self.min_key] - 1 - (np.arange(n) - starts)
            if positions.min() < 0 or positions.max() >= n or np.bincount(positions, minlength=n).max() != 1:
                failure = (
                    f"NAS IS class {self.cls}: full verification failed: the ranks are not a permutation"
                )
            else:
                sorted_keys = np.empty(n, dtype=np.int32)
                sorted_keys[positions] = keys
                out_of_order = int(np.count_nonzero(sorted_keys[:-1] > sorted_keys[1:]))
                if out_of_order:
                    failure = (
                        f"NAS IS class {self.cls}: full verification failed: {out_of_order} keys out of"
                        f" sort on rank {self.rank}"
                    )
        # The greatest key goes up to the next rank (NPB sends it point to point).
        comm, r = self.comm, self.rank
        send = np.array([sorted_keys[-1] if len(sorted_keys) else -1], dtype=np.int32)
        prev = np.array([-1], dtype=np.int32)
        dest = r + 1 if r + 1 < self.size else MPI.PROC_NULL
        source = r - 1 if r > 0 else MPI.PROC_NULL
        comm.Sendrecv(send, dest, 1000, prev, source, 1000)
        if failure is None and len(sorted_keys) and prev[0] > sorted_keys[0]:
            failure = (
                f"NAS IS class {self.cls}: full verification failed: rank {r}'s least key {sorted_keys[0]}"
                f" is less than rank {r - 1}'s greatest {prev[0]}"
            )
        if failure is None:
            self.passed += 1
        return failure


def main(argv: list[str]) -> None:
    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    cls = npb.problem_class(argv, KERNEL, CLASSES)
    if size & (size - 1):
        raise SystemExit(f"error: NAS IS: {size} ranks; use a power of two")
    ranker = Ranker(comm, cls)

    # One iteration untimed, as NPB, to touch every page and code path; its checks do not count.
    ranker.iterate(1)
    ranker.passed, ranker.failure = 0, None

    comm.Barrier()
    t0 = npb.timer()
    for iteration in range(1, MAX_ITERATIONS + 1):
        ranker.iterate(iteration)
    seconds = comm.allreduce(npb.timer() - t0, op=MPI.MAX)

    full = ranker.full_verify()
    # Every rank learns every rank's verdict, so all fail together (none waits in MPI for a failed one).
    failures = [f for f in comm.allgather(ranker.failure or full) if f]
    passed = comm.allreduce(ranker.passed, op=MPI.SUM)
    if failures:
        raise npb.NotVerified(failures[0])
    want = TEST_ARRAY_SIZE * MAX_ITERATIONS + size
    if passed != want:
        raise npb.NotVerified(
            f"NAS IS class {cls}: {passed} verification checks passed, NPB's rule wants {want}"
        )
    if comm.Get_rank() == 0:
        total = ranker.total_keys
        npb.report(KERNEL, cls, size, seconds, MAX_ITERATIONS * total / seconds / 1e6)


if __name__ == "__main__":
    main(sys.argv)
