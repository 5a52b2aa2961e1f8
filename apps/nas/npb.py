"""What the NAS kernels share: NPB's pseudo-random numbers, its verification rule, its class argument and
its report.

NPB's generator is the linear congruence x' = a x mod 2^46 with a = 5^13 (NPB 3.x, "randlc"), and every
kernel's verification value depends on drawing exactly its sequence. NPB computes it in double precision
in 23-bit halves; Python's integers are exact, so :func:`randlc` is that arithmetic, and :func:`vranlc`
draws many at once in numpy (uint64, 23-bit halves, so that no product overflows 64 bits).
"""

from __future__ import annotations

import time

import numpy as np

#: NPB's multiplier, 5^13.
A = 1220703125
MOD = 1 << 46
_R46 = 2.0**-46
_MASK23 = (1 << 23) - 1

#: The classes a kernel may be given (A where it fits in minutes on 2 cores; each kernel says which).
CLASSES = ("S", "W", "A", "B", "C")


class NotVerified(RuntimeError):
    """A kernel's result differs from NPB's verification value: the job fails with this one line."""


def randlc(x: int, a: int = A) -> tuple[int, float]:
    """One step: the next seed and its value in (0, 1), ``x * 2^-46``."""
    x = (a * x) % MOD
    return x, x * _R46


def power(a: int, n: int) -> int:
    """a^n mod 2^46: the multiplier that jumps a seed ``n`` steps ahead (NPB's ``ipow46``)."""
    return pow(a, n, MOD)


def _mulmod(x: np.ndarray, a: int) -> np.ndarray:
    """(x * a) mod 2^46 elementwise, for uint64 x < 2^46, in 23-bit halves (no product reaches 2^64)."""
    a1, a2 = np.uint64(a >> 23), np.uint64(a & _MASK23)
    x1, x2 = x >> np.uint64(23), x & np.uint64(_MASK23)
    high = (a1 * x2 + a2 * x1) & np.uint64(_MASK23)
    return ((high << np.uint64(23)) + a2 * x2) & np.uint64(MOD - 1)


def vranlc(n: int, x: int, a: int = A, block: int = 4096) -> tuple[np.ndarray, int]:
    """The next ``n`` values after seed ``x`` (the first is a*x's), and the seed after the last: NPB's
    ``vranlc``. Drawn ``block`` at a time: the first block one by one, each next one as the previous
    times a^block."""
    if n <= 0:
        return np.empty(0), x
    b = min(block, n)
    seeds = np.empty(b, dtype=np.uint64)
    s = x
    for i in range(b):
        s = (a * s) % MOD
        seeds[i] = s
    out = np.empty(n, dtype=np.uint64)
    jump = power(a, b)
    done = 0
    while done < n:
        k = min(b, n - done)
        out[done : done + k] = seeds[:k]
        done += k
        if done < n:
            seeds = _mulmod(seeds, jump)
    last = int(out[-1])
    return out.astype(np.float64) * _R46, last


def problem_class(argv: list[str], kernel: str, known: dict) -> str:
    """The class named on the command line (``S``, ``W``, ``A``...; default S), one of the kernel's."""
    cls = (argv[1] if len(argv) > 1 else "S").upper()
    if cls not in known:
        raise SystemExit(f"error: NAS {kernel}: class {cls!r} is not one of {', '.join(known)}")
    return cls


def verify(kernel: str, cls: str, name: str, value: float, reference: float, epsilon: float) -> float:
    """``value``'s relative error against NPB's ``reference``; raises :class:`NotVerified` above
    ``epsilon`` (NPB's own tolerance for that kernel)."""
    value = float(value)  # a numpy scalar's repr would name its type in the message
    err = abs(value - reference) / abs(reference) if reference else abs(value)
    if not err <= epsilon:  # also NaN
        raise NotVerified(
            f"NAS {kernel} class {cls}: {name} = {value!r} does not verify against NPB's {reference!r}"
            f" (relative error {err:.3g} > {epsilon:g})"
        )
    return err


def report(kernel: str, cls: str, ranks: int, seconds: float, mops: float | None = None) -> None:
    """NPB's closing lines, shortened, on rank 0: what ran, how long, and that it verified."""
    rate = f", {mops:.2f} Mop/s total" if mops is not None else ""
    print(
        f"NAS {kernel} class {cls}: {ranks} ranks, {seconds:.3f} s{rate}, verification SUCCESSFUL",
        flush=True,
    )


def timer() -> float:
    return time.perf_counter()


__all__ = [
    "A", "CLASSES", "NotVerified", "power", "problem_class", "randlc", "report", "timer", "verify", "vranlc"
]  # fmt: skip
