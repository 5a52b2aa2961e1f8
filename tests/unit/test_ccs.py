"""Paper 004's DYNAMIC and CCS local policies (schedulers/ccs.py): the messages' boost, the local users'
share L through CFS weights, and the LOCAL/NO_LOCAL events with rules 1-2."""

from __future__ import annotations

import pytest
from testbed.schedulers.base import CoopReceived, MessageArrived, MessageConsumed, Proc, ProcAdded, ProcExited
from testbed.schedulers.ccs import CcsLocal, CcsParams, DynamicLocal, DynamicParams, Local, NoLocal
from testbed.schedulers.cfs import cfs_weight

A0, B0, U = Proc("a", 0), Proc("b", 0), Proc("user", 0)


def _nices(policy, *events):
    nice = {}
    for e in events:
        d = policy.on_event(0.0, e)
        nice.update(d.nice)
    return nice


def test_dynamic_lowers_a_receivers_nice_by_its_queued_messages():
    pol = DynamicLocal(0, DynamicParams(boost_per_message=4, boost_nice=-10))
    assert _nices(pol, ProcAdded(A0)) == {}  # nice 0, as the OS starts it: no change to send
    assert pol.on_event(0, MessageArrived(A0, 1, 1)).nice == {A0: -4}
    assert pol.on_event(0, MessageArrived(A0, 1, 2)).nice == {A0: -8}
    assert pol.on_event(0, MessageArrived(A0, 1, 3)).nice == {A0: -10}  # no lower than boost_nice
    assert pol.on_event(0, MessageConsumed(A0, 0)).nice == {A0: 0}


def _parallel_share(policy, parallel, local):
    """The CPU share CFS gives the parallel processes when all are runnable, from the policy's nices."""
    w = {p: cfs_weight(policy.applied.get(p, 0)) for p in (*parallel, *local)}
    par = sum(w[p] for p in parallel)
    return par / (par + sum(w[p] for p in local))


@pytest.mark.parametrize("share_l", [0.2, 0.3, 0.5])
@pytest.mark.parametrize("n_local", [1, 2])
def test_ccs_gives_parallel_processes_l_of_the_cpu_while_a_local_user_is_active(share_l, n_local):
    pol = CcsLocal(0, CcsParams(share_l=share_l))
    users = [Proc(f"user{i}", 0) for i in range(n_local)]
    _nices(pol, ProcAdded(A0), ProcAdded(B0), *(ProcAdded(u, local=True) for u in users))
    # Nice values come in steps of CFS weight (about 1.25x): the share is L to within what one step moves.
    assert _parallel_share(pol, (A0, B0), users) == pytest.approx(share_l, rel=0.12)
    for u in users:
        pol.on_event(0, ProcExited(u))
    assert all(pol.applied[p] == 0 for p in (A0, B0))  # the node's whole CPU again


def test_ccs_tells_the_jobs_other_nodes_when_local_activity_begins_and_ends():
    pol = CcsLocal(3, CcsParams())
    assert pol.on_event(0, ProcAdded(A0)).coop == ()
    assert pol.on_event(0, ProcAdded(U, local=True)).coop == (Local("a", 3),)
    assert pol.on_event(0, ProcAdded(Proc("user2", 0), local=True)).coop == ()  # already active
    assert pol.on_event(0, ProcAdded(B0)).coop == (Local("b", 3),)  # a job that comes meanwhile
    assert pol.on_event(0, ProcExited(U)).coop == ()
    assert pol.on_event(0, ProcExited(Proc("user2", 0))).coop == (NoLocal("a", 3), NoLocal("b", 3))


def test_ccs_holds_back_a_job_named_by_local_until_as_many_no_local_came():
    pol = CcsLocal(0, CcsParams(share_l=0.3))
    _nices(pol, ProcAdded(A0), ProcAdded(B0))
    pol.on_event(0, CoopReceived(1, Local("a", 1)))
    pol.on_event(0, CoopReceived(2, Local("a", 2)))
    ratio = cfs_weight(pol.applied[A0]) / cfs_weight(pol.applied[B0])
    assert ratio == pytest.approx(0.3, rel=0.12)  # rule 1: L times the weight of the others
    pol.on_event(0, CoopReceived(1, NoLocal("a", 1)))
    assert pol.applied[A0] != pol.applied[B0]  # rule 2: one LOCAL still open
    pol.on_event(0, CoopReceived(2, NoLocal("a", 2)))
    assert pol.applied[A0] == pol.applied[B0] == 0


def test_ccs_alone_on_a_node_a_job_named_by_local_keeps_the_cpu():
    # Rule 1 applies to a node with several parallel processes: alone, the process would only leave the
    # CPU idle.
    pol = CcsLocal(0, CcsParams(share_l=0.3))
    _nices(pol, ProcAdded(A0))
    pol.on_event(0, CoopReceived(1, Local("a", 1)))
    assert pol.applied[A0] == 0
