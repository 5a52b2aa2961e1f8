"""The paging model (paper 004's swapping; docs/policies.md, "Paging, modelled"): what a node whose
processes need more memory than it has pays for it.

This host has no swap (and an emulated node is a cgroup of a host that has memory to spare), so nothing
ever really pages here: the cost is modelled. A node's *demand* is the declared memory of the processes
its local policy lets run (``JobSpec.memory_mb`` per process, local users' sessions included); a stopped
process's pages are taken to leave memory at once and to come back for free, which is what stopping a
"swapping task" buys in the paper. While the demand D exceeds the node's memory M, every process of the
node computes at ``factor(D, M)`` of the node's rate:

    factor = 1 / (1 + PAGE_FAULT_COST x (D - M) / D)

Each process touches its pages uniformly, so a fraction (D - M) / D of its touches find a page out and
wait for it; ``PAGE_FAULT_COST`` is that wait over the compute it interrupts. 10 (stated, not measured:
the paper gives no figure, only that "high or moderate page fault frequency in one node can drop parallel
job performance drastically") halves a node whose demand is 11 % over its memory, and makes one 50 % over
it six times slower.
"""

from __future__ import annotations

#: A page fault's wait over the compute between two of a process's touches of distinct pages.
PAGE_FAULT_COST = 10.0


def factor(demand_mb: float, memory_mb: float | None) -> float:
    """The share of its rate a node computes at while its processes need ``demand_mb`` of its
    ``memory_mb`` (1.0 when it fits, or when the node's memory is unknown)."""
    if memory_mb is None or demand_mb <= memory_mb * (1 + 1e-12):
        return 1.0
    return 1.0 / (1.0 + PAGE_FAULT_COST * (demand_mb - memory_mb) / demand_mb)


__all__ = ["PAGE_FAULT_COST", "factor"]
