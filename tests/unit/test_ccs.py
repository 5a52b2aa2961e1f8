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


# -- memory: the pool M_D, the swapping task, STOP and RESUME (rules 1, 3-5) --------------------------------

MB = {"a": 60.0, "b": 40.0, "user": 35.0}


def _spec(job, mb):
    from testbed.schedulers.base import JobSpec

    return JobSpec(job, 16, 0.0, memory_mb=mb)


def _ccs(memory=128.0, smallest=128.0, share_l=0.5, node=0):
    from testbed.schedulers.base import NodeInfo

    pol = CcsLocal(node, CcsParams(share_l=share_l))
    pol.info = NodeInfo(1.0, memory)
    pol.cluster = (NodeInfo(0.43, smallest), NodeInfo(1.0, 256.0))
    return pol


def _add(pol, proc, local=False):
    return pol.on_event(0.0, ProcAdded(proc, _spec(proc.job_id, MB[proc.job_id]), local=local))


def test_ccs_stops_the_parallel_task_with_most_memory_when_the_node_swaps():
    from testbed.schedulers.ccs import Resume, Stop

    pol = _ccs()  # M_D = 128 x 0.5 = 64 MB
    _add(pol, A0)
    d = _add(pol, B0)  # 100 MB of 128: no swapping
    assert d.run == {A0, B0} and d.coop == ()
    d = _add(pol, U, local=True)  # 135 MB > 128, parallel 100 > 64: the swapping task is a (60 MB)
    assert d.run == {B0, U}
    assert Stop("a", 0) in d.coop
    d = pol.on_event(1.0, ProcExited(U))  # 100 MB fit again: a runs, RESUME
    assert d.run == {A0, B0}
    assert Resume("a", 0) in d.coop


def test_ccs_keeps_the_swapping_task_while_parallel_memory_fits_the_pool():
    # Swapping with the parallel processes within M_D: the local users' memory is the excess, nothing
    # is stopped (the paper stops a parallel task only when parallel tasks exceed M_D).
    pol = _ccs(memory=90.0, smallest=128.0)  # M_D 64 MB
    _add(pol, B0)  # 40 MB
    d = _add(pol, U, local=True)  # 75 MB of 90: fits
    d = pol.on_event(0.0, ProcAdded(Proc("user2", 0), _spec("user2", 40.0), local=True))  # 115 > 90
    assert d.run is None or B0 in d.run
    assert pol.swapping is None


def test_ccs_rule_3_a_job_named_by_stop_is_the_swapping_task_when_memory_runs_out():
    from testbed.schedulers.ccs import Stop

    pol = _ccs()
    _add(pol, A0)
    _add(pol, B0)
    pol.on_event(0.0, CoopReceived(5, Stop("b", 5)))  # b (40 MB, not the largest) is stopped elsewhere
    d = _add(pol, U, local=True)
    assert pol.swapping == "b" and A0 in d.run and B0 not in d.run


def test_ccs_rule_1_a_job_named_by_stop_does_not_run_beside_another_until_resume():
    from testbed.schedulers.ccs import Resume, Stop

    # Quantum zero is CFS's lowest weight (nice 19), not a stop: its memory stays resident (rule 3).
    pol = _ccs(memory=1000.0)  # memory to spare: only rule 1 acts
    _add(pol, A0)
    _add(pol, B0)
    d = pol.on_event(0.0, CoopReceived(5, Stop("a", 5)))
    assert d.run == {A0, B0} and d.nice == {A0: 19}
    pol.on_event(0.0, MessageArrived(A0, 1, 3))
    assert pol.applied[A0] == 19  # no message boosts it back
    pol.on_event(0.0, CoopReceived(5, Resume("a", 5)))
    assert pol.applied[A0] < 0  # as DYNAMIC again: its queued messages boost it
    pol.on_event(0.0, MessageConsumed(A0, 0))
    assert pol.applied[A0] == pol.applied[B0] == 0
    alone = _ccs(memory=1000.0)
    _add(alone, A0)
    alone.on_event(0.0, CoopReceived(5, Stop("a", 5)))
    assert alone.applied[A0] == 0  # alone, its CPU would only idle


def test_ccs_rule_4_a_swapping_node_takes_the_stopped_job_of_another_node_instead_of_its_own():
    from testbed.schedulers.ccs import Resume, Stop

    pol = _ccs()
    big, small = Proc("b", 0), Proc("a", 0)  # b is this node's swapping task (60 MB), a (40) runs
    MB.update(a=40.0, b=60.0)
    try:
        _add(pol, small)
        _add(pol, big)
        _add(pol, U, local=True)
        assert pol.swapping == "b"
        d = pol.on_event(0.0, CoopReceived(5, Stop("a", 5)))  # "a" < "b": it takes b's place
        assert pol.swapping == "a"
        assert Resume("b", 0) in d.coop and Stop("a", 0) in d.coop
        assert big in d.run and small not in d.run
        # A STOP for a job after the own swapping task in id order changes nothing (no ping-pong).
        d = pol.on_event(0.0, CoopReceived(6, Stop("b", 6)))
        assert pol.swapping == "a" and d.coop == ()
        d = pol.on_event(0.0, CoopReceived(5, Resume("a", 5)))  # rule 5: a runs, b is picked
        assert pol.swapping == "b" and Resume("a", 0) in d.coop and Stop("b", 0) in d.coop
    finally:
        MB.update(a=60.0, b=40.0)


def test_ccs_rule_5_resume_for_the_swapping_task_lets_it_run_and_picks_another():
    from testbed.schedulers.ccs import Resume, Stop

    pol = _ccs()
    _add(pol, A0)  # 60
    _add(pol, B0)  # 40
    _add(pol, U, local=True)
    assert pol.swapping == "a"
    d = pol.on_event(0.0, CoopReceived(5, Resume("a", 5)))
    assert pol.swapping == "b"
    assert Resume("a", 0) in d.coop and Stop("b", 0) in d.coop
    assert A0 in d.run and B0 not in d.run


def test_ccs_without_memory_figures_never_stops_anything():
    pol = CcsLocal(0, CcsParams())  # info and cluster unknown
    _add(pol, A0)
    _add(pol, B0)
    d = _add(pol, U, local=True)
    assert d.run == {A0, B0, U} and pol.swapping is None


def test_the_memory_pool_holds_processes_sharing_a_node_to_m_d():
    # LocalParams.memory_pool (Wrk2's "two jobs must fit in M_D"): a second process joins a node only
    # if the two fit in M_D = memory_pool x the smallest node's memory; one alone needs its node's.
    from testbed.schedulers.base import JobSpec, NodeInfo, Start
    from testbed.schedulers.ccs import Ccs

    info = [NodeInfo(0.43, 128.0)] * 2 + [NodeInfo(1.0, 256.0)] * 2
    gp = Ccs.make_global(4, {"mpl": 2, "memory_pool": 0.5, "share_l": 0.5}, 0, info)
    big = gp.submit(0.0, JobSpec("big", 4, 0.0, memory_mb=100.0))  # > M_D, alone: starts
    assert big == [Start("big", (0, 1, 2, 3))]
    assert gp.submit(0.0, JobSpec("small", 4, 0.0, memory_mb=1.0)) == []  # 101 > 64: waits
    assert gp.finished(1.0, "big") == [Start("small", (0, 1, 2, 3))]
    assert gp.submit(1.0, JobSpec("fits", 4, 0.0, memory_mb=63.0)) == [Start("fits", (0, 1, 2, 3))]
    assert gp.submit(1.0, JobSpec("over", 4, 0.0, memory_mb=1.0)) == []  # mpl 2 reached anyway
    without = Ccs.make_global(4, {"mpl": 2, "share_l": 0.5}, 0, info)
    without.submit(0.0, JobSpec("big", 4, 0.0, memory_mb=100.0))
    assert without.submit(0.0, JobSpec("small", 4, 0.0, memory_mb=1.0)) == [Start("small", (0, 1, 2, 3))]


@pytest.mark.parametrize("sched", ["local", "dynamic", "ccs"])
def test_pool_oversize_reject_refuses_a_job_larger_than_m_d_and_admits_one_that_fits(sched):
    # Paper 004's Wrk2 runs only jobs whose tasks fit in M_D: with pool_oversize reject a job whose
    # process exceeds M_D (64 MB here) is refused at submission, not run alone as with 'alone'.
    from testbed.schedulers import registry
    from testbed.schedulers.base import JobSpec, NodeInfo, Reject, Start

    info = [NodeInfo(0.43, 128.0)] * 2 + [NodeInfo(1.0, 256.0)] * 2
    params = {"mpl": 2, "memory_pool": 0.5, "pool_oversize": "reject"}
    gp = registry.get(sched).make_global(4, params, 0, info)
    assert gp.submit(0.0, JobSpec("big", 4, 0.0, memory_mb=64.5)) == [
        Reject(
            "big",
            "job big needs 64.5 MB of memory per process, more than the parallel memory pool M_D = 64 MB "
            "(memory_pool 0.5); pool_oversize is reject",
        )
    ]
    assert gp.queue == [] and gp.placed == {}  # nothing held for it
    assert gp.submit(0.0, JobSpec("edge", 4, 0.0, memory_mb=64.0)) == [Start("edge", (0, 1, 2, 3))]
    assert gp.submit(0.0, JobSpec("tiny", 4, 0.0, memory_mb=0.0)) == [Start("tiny", (0, 1, 2, 3))]
    alone = registry.get(sched).make_global(4, {**params, "pool_oversize": "alone"}, 0, info)
    assert alone.submit(0.0, JobSpec("big", 4, 0.0, memory_mb=64.5)) == [Start("big", (0, 1, 2, 3))]


def test_ccs_rule_5_waits_until_no_other_node_stops_the_job():
    # While another node still stops the job, it is held there anyway: switching here would only start
    # the two jobs trading places across the nodes (seen in Wrk3 before this rule's guard).
    from testbed.schedulers.ccs import Resume, Stop

    pol = _ccs()
    _add(pol, A0)
    _add(pol, B0)
    pol.on_event(0.0, CoopReceived(5, Stop("a", 5)))
    pol.on_event(0.0, CoopReceived(6, Stop("a", 6)))
    _add(pol, U, local=True)
    assert pol.swapping == "a"
    d = pol.on_event(0.0, CoopReceived(5, Resume("a", 5)))
    assert pol.swapping == "a" and d.coop == ()  # node 6 still stops it
    d = pol.on_event(0.0, CoopReceived(6, Resume("a", 6)))
    assert pol.swapping == "b" and Resume("a", 0) in d.coop and Stop("b", 0) in d.coop


def test_ccs_nodes_that_share_two_jobs_and_all_swap_settle_on_one_stopped_job():
    # Eight nodes each running a process of "a" and of "b", all over memory (rule 4's and rule 5's
    # ground): events delivered one round at a time until none is sent; the count of rounds is bounded.
    from testbed.schedulers.ccs import Resume, Stop

    nodes = [_ccs(node=n) for n in range(8)]
    inbox: list[tuple[int, object]] = []
    for n, pol in enumerate(nodes):
        for proc in (Proc("a", n), Proc("b", n), Proc("user", n)):
            d = pol.on_event(
                0.0, ProcAdded(proc, _spec(proc.job_id, MB[proc.job_id]), local=proc.job_id == "user")
            )
            inbox += [(n, e) for e in d.coop]
    # Node 0's user leaves: it fits again, resumes its swapping task, and the others hear of it.
    d = nodes[0].on_event(1.0, ProcExited(Proc("user", 0)))
    inbox += [(0, e) for e in d.coop]
    for _ in range(50):
        if not inbox:
            break
        batch, inbox = inbox, []
        for src, e in batch:
            if isinstance(e, Stop | Resume | Local | NoLocal):
                for n, pol in enumerate(nodes):
                    if n != src:
                        inbox += [(n, x) for x in pol.on_event(1.0, CoopReceived(src, e)).coop]
    assert not inbox  # settled
    stopped = {pol.swapping for pol in nodes[1:]}
    assert len(stopped) == 1 and stopped != {None}, stopped  # one job stopped on every swapping node
