"""Each rank's own part of a schedule: dependencies instead of a barrier per step, exact bytes."""

from __future__ import annotations

import pytest

from traffic import replay
from traffic.collectives import build_schedule
from traffic.plan import pieces, split, step_seconds


def ranks(n):
    return [(f"h{i}", 0) for i in range(n)]


@pytest.mark.parametrize("n", [8, 32])
@pytest.mark.parametrize("op,alg", [("allreduce", "ring"), ("allreduce", "halving_doubling"),
                                    ("allgather", None), ("reducescatter", None), ("alltoall", None),
                                    ("broadcast", None), ("sendrecv", None)])
@pytest.mark.parametrize("channels,pipeline", [(1, 1), (2, 1), (2, 4)])
def test_pieces_add_up_to_the_schedule_and_depend_only_on_earlier_steps(n, op, alg, channels, pipeline):
    s = build_schedule(op, ranks(n), 1_000_003, alg)
    ps = pieces(s, channels, "7", pipeline)
    assert sum(p.bytes for p in ps) == s.total_bytes
    for k, step in enumerate(s.steps):  # every flow's bytes, exactly, in its own step
        for i, f in enumerate(step):
            assert sum(p.bytes for p in ps if p.step == k and p.id.split(".")[2] == str(i)) == f.bytes
    by_id = {p.id: p for p in ps}
    assert len(by_id) == len(ps)
    for p in ps:
        for a in p.after:
            dep = by_id[a]
            assert dep.step == p.step - 1 and dep.dst == p.src  # what this rank received just before


def test_ring_dependencies_are_the_predecessor_chunk_of_the_same_channel_and_chunk():
    s = build_schedule("allreduce", ranks(4), 4_000_000, "ring")
    ps = pieces(s, channels=2, op_id="1", pipeline=2)
    by_id = {p.id: p for p in ps}
    step1 = [p for p in ps if p.step == 1]
    assert step1 and all(len(p.after) == 1 for p in step1)
    for p in step1:
        dep = by_id[p.after[0]]
        assert (dep.channel, dep.chunk) == (p.channel, p.chunk)
        assert dep.src == ranks(4)[(ranks(4).index(p.src) - 1) % 4]  # from the ring predecessor
    assert all(p.after == () for p in ps if p.step == 0)


def test_an_all_to_all_sends_every_step_at_once_and_a_ring_does_not():
    """An all-to-all's blocks are the sender's own data, so nothing waits for a receipt (NCCL posts every peer's
    send and receive in one group); chained in the agents with a receipt per step, ranks that drifted apart
    left links idle (two rails' EP all-to-alls back to back: 38-73% of ideal, 81-87% without the waits)."""
    for concurrent in (False, True):
        a2a = build_schedule("alltoall", ranks(8), 8_000_000)
        if concurrent:
            a2a = replay.concurrent([a2a, build_schedule("alltoall", [(f"h{i}", 1) for i in range(8)], 8_000_000)])
        ps = pieces(a2a, channels=2, op_id="1")
        assert a2a.independent_steps and {p.step for p in ps} == set(range(7)) and all(p.after == () for p in ps)
    ring = build_schedule("allgather", ranks(8), 8_000_000)
    assert not ring.independent_steps and all(p.after for p in pieces(ring, 2, "2") if p.step > 0)


def test_tiny_flows_fall_back_to_every_piece_received():
    s = build_schedule("allreduce", ranks(4), 8, "ring")  # 1-byte chunks: channel 1 carries nothing
    ps = pieces(s, channels=2, op_id="1")
    assert sum(p.bytes for p in ps) == s.total_bytes
    assert all(p.after for p in ps if p.step > 0)


def test_split_and_step_seconds():
    assert split(10, 3) == [4, 3, 3] and sum(split(7, 4)) == 7
    s = build_schedule("allreduce", ranks(2), 1000, "ring")
    ps = pieces(s, 1, "1")
    start = {p.id: 10.0 + p.step for p in ps}
    end = {p.id: 10.5 + p.step for p in ps}
    assert step_seconds(ps, start, end) == [0.5, 0.5]


def test_waiting_for_a_plan_looks_only_at_the_flows_that_reported():
    import threading

    from traffic.transports.tcp import FlowRecord, wait_for_flows

    looked = []

    class Counted(FlowRecord):
        @property
        def done(self) -> bool:
            looked.append(self.id)
            return self.sent is not None and self.recv is not None

    ids = [f"f{i}" for i in range(2000)]
    records = {i: Counted(i, "h0", "10.0.0.1", 1, 0) for i in ids}
    reports = [[i] for i in ids]  # one report per flow, as the agents send them

    def news(_s):
        batch = reports.pop(0) if reports else []
        for i in batch:
            records[i].sent = records[i].recv = {"bytes": 1}
        return batch

    assert [r.id for r in wait_for_flows(ids, 5, threading.Lock(), records, news)] == ids
    assert len(looked) == 2 * len(ids)  # once to find what is pending, once when its report came


def test_waiting_raises_when_no_flow_finishes_for_the_timeout():
    import threading

    from traffic.transports.tcp import FlowRecord, wait_for_flows

    records = {i: FlowRecord(i, "h0", "10.0.0.1", 1, 0) for i in ("a", "b")}
    records["a"].sent = records["a"].recv = {"bytes": 1}
    with pytest.raises(TimeoutError, match=r"1 flow\(s\) stalled for 0 s: \['b'\]"):
        wait_for_flows(["a", "b"], 0.2, threading.Lock(), records, lambda s: [])
