"""The paging model (paper 004's swapping; docs/policies.md, "Paging, modelled"): what a node whose
processes need more memory than it has pays for it.

This host has no swap (and an emulated node is a cgroup of a host that has memory to spare), so nothing
ever really pages here: the cost is modelled. A node's *demand* is the declared memory of the processes
its local policy lets run (``JobSpec.memory_mb`` per process, local users' sessions included); a stopped
process's pages are taken to leave memory at once and to come back for free, which is what stopping a
"swapping task" buys in the paper. While the demand D exceeds the node's memory M, every process of the
node computes at ``factor(D, M)`` of the node's rate:

    factor = 1 / (1 + cost x (D - M) / D)

Each process touches its pages uniformly, so a fraction (D - M) / D of its touches find a page out and
wait for it; ``cost`` is that wait over the compute it interrupts: a scenario's ``cluster.paging_cost``,
by default ``PAGE_FAULT_COST``. 10 (stated, not measured: the paper gives no figure, only that "high or
moderate page fault frequency in one node can drop parallel job performance drastically") halves a node
whose demand is 11 % over its memory, and makes one 50 % over it six times slower; 0 turns the slowing
off (a node over its memory computes at its rate).
"""

from __future__ import annotations

#: A page fault's wait over the compute between two of a process's touches of distinct pages: the default
#: of ``cluster.paging_cost`` (the scenario field, testbed/scenario/model.py), and the one place it is set.
PAGE_FAULT_COST = 10.0
#: The largest ``cluster.paging_cost`` taken: a fault a million times its compute already stops a node
#: that is 1 % over its memory (factor 1e-4), and larger costs only make factor() underflow.
MAX_PAGING_COST = 1e6


def factor(demand_mb: float, memory_mb: float | None, cost: float = PAGE_FAULT_COST) -> float:
    """The share of its rate a node computes at while its processes need ``demand_mb`` of its
    ``memory_mb`` (1.0 when it fits, or when the node's memory is unknown), a page fault costing ``cost``
    times the compute it interrupts."""
    if memory_mb is None or demand_mb <= memory_mb * (1 + 1e-12):
        return 1.0
    return 1.0 / (1.0 + cost * (demand_mb - memory_mb) / demand_mb)


__all__ = ["MAX_PAGING_COST", "PAGE_FAULT_COST", "factor"]
