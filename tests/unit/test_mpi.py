"""The mpi kind's parts that need no MPI run (apps/mpi.py, mpi_pmi.py, mpi_trace.py, mpi_wrap.py): the
PMI-1 server against raw clients speaking MPICH's wire protocol, the simulator's replay of a trace, the
scenario's program path, the link note."""

from __future__ import annotations

import json
import socket
import threading

import pytest
import yaml
from testbed.apps.base import TAG_BARRIER, Collective, Compute, Progress, Recv, Send, SimContext
from testbed.apps.mpi import (
    MESSAGE_CPU_PER_BYTE_S,
    MESSAGE_CPU_S,
    REDUCTION_CPU_PER_BYTE_S,
    Mpi,
    MpiConfig,
    _sim_tag,
    collective_cpu_s,
    message_cpu_s,
    mpi_cpu_s,
)
from testbed.apps.mpi_pmi import PmiFailure, PmiServer, parse
from testbed.apps.mpi_trace import trace_path
from testbed.apps.mpi_wrap import link_note
from testbed.apps.speed import stamp

from testbed.scenario import ScenarioError, load


class _Client:
    def __init__(self, address: str, rank: int) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.fh = self.sock.makefile("rb")
        self.send(f"cmd=tb_hello rank={rank}")

    def send(self, line: str) -> None:
        self.sock.sendall(line.encode() + b"\n")

    def ask(self, line: str) -> dict:
        self.send(line)
        return self.read()

    def read(self) -> dict:
        return parse(self.fh.readline().decode().strip())

    def close(self) -> None:
        self.fh.close()
        self.sock.close()


def _serve(server: PmiServer) -> tuple[threading.Thread, list]:
    errors: list = []

    def run():
        try:
            server.serve()
        except PmiFailure as exc:
            errors.append(exc)

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, errors


def test_pmi_server_bootstraps_and_finishes_a_job_as_mpich_asks():
    server = PmiServer(2, "127.0.0.1", 10.0, "kvs-test")
    th, errors = _serve(server)
    try:
        a, b = _Client(server.address, 0), _Client(server.address, 1)
        a.send("cmd=tb_ready")
        b.send("cmd=tb_ready")
        assert a.read()["cmd"] == "tb_go" and b.read()["cmd"] == "tb_go"
        assert a.ask("cmd=init pmi_version=1 pmi_subversion=1") == {
            "cmd": "response_to_init", "pmi_version": "1", "pmi_subversion": "1", "rc": "0"
        }  # fmt: skip
        assert int(a.ask("cmd=get_maxes")["vallen_max"]) >= 1024
        kvs = a.ask("cmd=get_my_kvsname")["kvsname"]
        assert a.ask(f"cmd=put kvsname={kvs} key=card-0 value=abc")["rc"] == "0"
        # Every rank on a node of its own, as the emulated cluster places them.
        got = b.ask(f"cmd=get kvsname={kvs} key=PMI_process_mapping")
        assert got["value"] == "(vector,(0,2,1))"
        assert b.ask(f"cmd=get kvsname={kvs} key=nothing")["rc"] != "0"
        # A barrier answers nobody until every rank entered it.
        a.send("cmd=barrier_in")
        a.sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            a.sock.recv(1, socket.MSG_PEEK)
        a.sock.settimeout(5)
        b.send("cmd=barrier_in")
        assert a.read()["cmd"] == "barrier_out" and b.read()["cmd"] == "barrier_out"
        assert b.ask(f"cmd=get kvsname={kvs} key=card-0")["value"] == "abc"
        for c in (a, b):
            c.send("cmd=tb_finalized")
        th.join(5)
        assert not th.is_alive() and errors == []
    finally:
        server.close()


def test_pmi_server_names_the_rank_that_never_reaches_mpi_init_and_tells_the_others():
    server = PmiServer(2, "127.0.0.1", 0.3, "kvs-test")
    th, errors = _serve(server)
    try:
        a, _b = _Client(server.address, 0), _Client(server.address, 1)
        a.send("cmd=tb_ready")
        th.join(5)
        assert len(errors) == 1 and not errors[0].peer
        assert str(errors[0]).startswith("rank(s) 1 did not reach MPI_Init within init_timeout_s")
        told = a.read()
        assert told["cmd"] == "tb_fail" and "rank(s) 1" in told["reason"]
    finally:
        server.close()


def test_pmi_server_fails_the_job_on_abort_and_on_a_rank_gone_before_finalize():
    server = PmiServer(2, "127.0.0.1", 10.0, "kvs-test")
    th, errors = _serve(server)
    try:
        a = _Client(server.address, 1)
        a.send("cmd=abort exitcode=7 error_msg=application called MPI_Abort(MPI_COMM_WORLD, 7)")
        th.join(5)
        assert str(errors[0]) == (
            "rank 1 called MPI_Abort (exit code 7): application called MPI_Abort(MPI_COMM_WORLD, 7)"
        )
    finally:
        server.close()
    server = PmiServer(2, "127.0.0.1", 10.0, "kvs-test")
    th, errors = _serve(server)
    try:
        _Client(server.address, 0).close()
        th.join(5)
        assert errors[0].peer and str(errors[0]) == "rank 0's process ended before MPI_Finalize"
    finally:
        server.close()


def test_the_model_replays_a_recorded_trace(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_MPI_TRACES", str(tmp_path / "traces"))
    prog = tmp_path / "prog.py"
    prog.write_text("from mpi4py import MPI\n")
    cfg = MpiConfig(program=str(prog), args=("3",))
    ranks = [
        [["c", 0.5], ["s", 1, 8, 7], ["k", "allreduce", 800]],
        [["c", 0.25], ["r", 0, 7], ["k", "allreduce", 800]],
    ]
    path = trace_path(str(prog), ("3",), 2)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"ranks": ranks}))

    def ops(rank):
        return list(Mpi.model(cfg, SimContext(rank, 3, lambda: 0.0)))

    send, recv = message_cpu_s(8), message_cpu_s()
    # MPI's CPU on the collective's data: a reduction's rate, not a plain move's.
    reduced = collective_cpu_s("allreduce", 800)
    assert reduced == pytest.approx(800 * REDUCTION_CPU_PER_BYTE_S) != collective_cpu_s("alltoall", 800)
    assert send == pytest.approx(MESSAGE_CPU_S + 8 * MESSAGE_CPU_PER_BYTE_S) and recv == MESSAGE_CPU_S
    assert ops(0) == [
        Compute(0.5),
        Compute(send),
        Send((1,), 8, _sim_tag(0, 7)),
        Collective("allreduce", True),
        Recv(1, TAG_BARRIER),
        Compute(recv + message_cpu_s(0)),
        Send((1,), 0, TAG_BARRIER),
        Compute(reduced),  # inside the collective, as MPI's work on the data is (HYBRID boosts it)
        Collective("allreduce", False),
        Progress("collectives", 1),
    ]
    assert ops(1) == [
        Compute(0.25),
        Recv(1, _sim_tag(0, 7)),
        Compute(recv),
        Collective("allreduce", True),
        Compute(message_cpu_s(0)),
        Send((0,), 0, TAG_BARRIER),
        Recv(1, TAG_BARRIER),
        Compute(recv),
        Compute(reduced),
        Collective("allreduce", False),
        Progress("collectives", 1),
    ]
    assert ops(2) == []  # the head, the job's process manager
    # The trace is the program's and its arguments': another argument is another trace.
    assert trace_path(str(prog), ("4",), 2) != path
    # Told a host's speed, a trace without a stamp replays as recorded...
    assert Mpi.trace_speed(cfg, 2) is None
    assert list(Mpi.model(cfg, SimContext(0, 3, lambda: 0.0, host_speed_s=0.3))) == ops(0)
    # ... and a stamped one at that host's speed: every CPU figure (the program's, MPI's) x 0.3 / 0.1.
    path.write_text(json.dumps({"ranks": ranks, **stamp(0.1)}))
    assert Mpi.trace_speed(cfg, 2) == 0.1
    for rank in (0, 1):
        slow = list(Mpi.model(cfg, SimContext(rank, 3, lambda: 0.0, host_speed_s=0.3)))
        assert [type(op) for op in slow] == [type(op) for op in ops(rank)]
        for got, was in zip(slow, ops(rank), strict=True):
            assert got == (Compute(pytest.approx(was.cpu_s * 3)) if isinstance(was, Compute) else was)
    # A calibration of the program's own compute (compute_scale) moves the CPU between its MPI calls
    # alone: MPI's own CPU on messages and collectives stays the host speed's; the estimate stays too.
    half = cfg.model_copy(update={"compute_scale": 0.5})
    assert Mpi.ideal_runtime(half) == Mpi.ideal_runtime(cfg)
    for rank in (0, 1):
        got = list(Mpi.model(half, SimContext(rank, 3, lambda: 0.0, host_speed_s=0.3)))
        was = list(Mpi.model(cfg, SimContext(rank, 3, lambda: 0.0, host_speed_s=0.3)))
        own = ranks[rank][0][1] * 3  # the trace's one compute, at the host's speed
        assert got[0] == Compute(pytest.approx(own / 2)) and was[0] == Compute(pytest.approx(own))
        assert got[1:] == was[1:]
    # One of its calls' CPU (mpi_cpu_scale, from the ranks' mpi_cpu_s reports) moves every message's and
    # collective's CPU and nothing else; mpi_cpu_s is what the replay charges for them, at scale 1.
    dear = cfg.model_copy(update={"mpi_cpu_scale": 3.0})
    for rank in (0, 1):
        got, was = list(Mpi.model(dear, SimContext(rank, 3, lambda: 0.0))), ops(rank)
        assert got[0] == was[0]  # the compute
        assert [type(op) for op in got] == [type(op) for op in was]
        mpi_got = [op.cpu_s for op in got[1:] if isinstance(op, Compute)]
        mpi_was = [op.cpu_s for op in was[1:] if isinstance(op, Compute)]
        assert mpi_got == pytest.approx([3 * c for c in mpi_was])
        assert mpi_cpu_s(ranks[rank], rank, 2) == pytest.approx(sum(mpi_was))
    assert mpi_cpu_s(ranks[1], 1, 2) == pytest.approx(recv + message_cpu_s(0) + recv + reduced)


def test_a_program_path_is_relative_to_the_scenario_and_must_exist(tmp_path):
    (tmp_path / "progs").mkdir()
    (tmp_path / "progs" / "p.py").write_text("")
    doc = {
        "cluster": {"nodes": 2},
        "workload": {"jobs": [{"size": 2, "app": {"kind": "mpi", "program": "progs/p.py"}}]},
    }
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(doc))
    scn = load(f)
    assert scn.workload.jobs[0].app.program == str(tmp_path / "progs" / "p.py")
    doc["workload"]["jobs"][0]["app"]["program"] = "progs/none.py"
    f.write_text(yaml.safe_dump(doc))
    with pytest.raises(ScenarioError) as exc:
        load(f)
    assert "workload.jobs.0.app.program: no file" in str(exc.value) and "none.py" in str(exc.value)


def test_the_link_note_says_when_unmirrored_calls_must_be_refused():
    assert link_note({"TB_LINK_LATENCY_S": "0.0", "TB_LINK_BANDWIDTH_BPS": ""}) == ""
    assert link_note({}) == ""
    assert "not carried over the emulated link" in link_note({"TB_LINK_LATENCY_S": "0.0001"})
    assert "not carried over the emulated link" in link_note({"TB_LINK_BANDWIDTH_BPS": "1e6"})


def test_a_call_noted_in_two_parts_counts_the_cpu_before_it_once():
    # Sendrecv tells the recorder of its send, then of its receive: the CPU before it is one compute.
    # It was counted twice, and NAS CG's model had 1.2-1.3 s per rank where the ranks spent 0.9 s.
    import time

    from testbed.apps.mpi_trace import Recorder

    rec = Recorder(2)
    rec.done()
    t0 = time.thread_time()
    while time.thread_time() - t0 < 0.05:
        pass
    spent = time.thread_time() - t0
    rec.send(1, 0, 8, time.monotonic())
    rec.recv(1, 0)
    computed = sum(op[1] for op in rec.ops if op[0] == "c")
    assert spent <= computed < spent * 1.5, rec.ops


def test_a_stamped_message_is_returned_early_by_what_its_caller_still_spends():
    # The MPI mirror takes its own receive's cost off the link's delivery (tbcomm's early_s): a message
    # due in 300 ms returned 250 ms early must come at 50 ms, not at 300 (early ignored) nor before 50.
    # (250 ms, not tens: a return within 40 ms of 10 failed beside a loaded host's other work.)
    import time

    from testbed.apps.tbcomm import _data_body
    from testbed.apps.wire import STAMP, STAMPED

    for early in (0.0, 0.250):
        due = time.monotonic() + 0.300
        body = _data_body(STAMP.pack(due) + b"xy", 0, STAMP.size + 2, STAMPED, early)
        returned = time.monotonic()
        assert body == b"xy"
        assert returned >= due - early
        if early:
            assert returned < due, (returned, due)


def test_the_mirror_takes_the_median_of_its_receives_off_the_link_bounded():
    # matched() measures MPI's part of each receive after the mirror's and sets tbcomm's early_s to the
    # median of EARLY_WINDOW of them, at most MAX_EARLY_S; on an ideal link (not stamped) nothing.
    from types import SimpleNamespace

    from testbed.apps import mpi_wrap

    for stamped, costs, want in (
        (True, [5e-6] * 7 + [8e-6] * 8, 8e-6),
        (True, [1e-3] * mpi_wrap.EARLY_WINDOW, mpi_wrap.MAX_EARLY_S),  # a rendezvous' wait is not ours
        (False, [5e-6] * mpi_wrap.EARLY_WINDOW, 0.0),
    ):
        tb = SimpleNamespace(stamped=stamped, early_s=0.0, _standing=True, mode="spin")
        mirror = mpi_wrap._Mirror(tb, 2, mpi_wrap.ComputeClock())
        mirror.active = True
        for cost in costs:
            mirror.mirrored_at = mpi_wrap.time.monotonic() - cost
            mirror.matched(None)
        assert abs(tb.early_s - want) < 2e-6, (stamped, tb.early_s, want)


def test_the_compute_clock_counts_cpu_between_calls_once_and_none_inside_them():
    # What a model records as a rank's compute and what a real rank reports (compute_s): CPU between
    # calls; a call noted in two parts (Sendrecv) does not count the CPU before it twice, nor its first
    # part's as compute.
    import time

    from testbed.apps.mpi_wrap import ComputeClock

    def burn(seconds: float) -> None:
        t0 = time.thread_time()
        while time.thread_time() - t0 < seconds:
            pass

    clock = ComputeClock()
    burn(0.02)
    first = clock.lap()  # a call begins
    assert 0.02 <= first < 0.03
    burn(0.02)  # inside the call: MPI's CPU
    clock.resume()  # it returned
    burn(0.01)
    assert 0.01 <= clock.lap() < 0.02
    burn(0.02)  # the first part of a call in two (Sendrecv's send: the mirror's relay, an ack's wait)
    assert clock.lap() == 0.0  # its second part: that CPU is the call's, not the program's
    clock.resume()
    assert 0.03 <= clock.total < 0.045
    assert 0.04 <= clock.inside < 0.055  # the CPU inside the calls (mpi_cpu_s)


def test_the_segments_mpi_init_mapped_are_unlinked_and_nothing_else(tmp_path):
    # A rank killed before MPI_Finalize left its /dev/shm/mpich_shm_* behind; the wrapper unlinks what
    # this process has mapped from there once MPI_Init is done, and no other file.
    import os
    import uuid

    from testbed.apps.mpi_wrap import unlink_init_shm

    mine = f"/dev/shm/mpich_shm_test{uuid.uuid4().hex[:8]}_0"
    other = tmp_path / "mpich_shm_elsewhere_0"  # mapped, but not from /dev/shm
    for path in (mine, other):
        with open(path, "wb") as f:
            f.write(b"x")
    maps = tmp_path / "maps"
    maps.write_text(
        f"7f0000000000-7f0000100000 rw-s 00000000 00:19 12345 {mine}\n"
        f"7f0000200000-7f0000300000 rw-s 00000000 00:19 12346 {other}\n"
        "7f0000400000-7f0000500000 r-xp 00000000 08:01 99 /usr/lib/libc.so.6\n"
    )
    try:
        assert unlink_init_shm(str(maps)) == [mine]
        assert not os.path.exists(mine) and other.exists()
        assert unlink_init_shm(str(maps)) == []  # already gone: nothing, no error
    finally:
        if os.path.exists(mine):
            os.unlink(mine)


def test_a_wrapped_collective_is_left_only_once_mpi_has_moved_its_data():
    # HYBRID boosts a process from its collective's entry to its exit (paper 003): MPI's own work on the
    # data (an all-to-all's copies, a reduction) is inside, so the node hears of the exit after MPI
    # returns. The order of the calls, on the wrapper of one collective:
    from testbed.apps.mpi_wrap import _collective

    said: list[str] = []

    class Mirror:
        wants_bytes, active = False, True

        def collective(self, op, nbytes):
            said.append(f"enter {op}")

        def collective_left(self, op):
            said.append(f"leave {op}")

    def Alltoall(comm, *args):  # noqa: N802 - named as MPI names it: the wrapper reads the name
        said.append("MPI moves the data")
        return "result"

    assert _collective(Alltoall, None, Mirror())(None) == "result"
    assert said == ["enter alltoall", "MPI moves the data", "leave alltoall"]
