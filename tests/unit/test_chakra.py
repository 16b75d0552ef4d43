"""Chakra execution traces as one training iteration (traffic/chakra.py). The traces are the project's own,
written with Chakra's schema classes (mlc-chakra's et_def_pb2) and framing, in the shapes public traces have:
one collective per rank, a data-parallel iteration whose gradient all-reduces hang off the backward compute by
control dependencies, a ring written out as sends and receives; and the pitfalls found in the wild."""

from __future__ import annotations

from pathlib import Path

import pytest
from chakra.schema.protobuf.et_def_pb2 import (
    ALL_GATHER,
    ALL_REDUCE,
    COMM_COLL_NODE,
    COMM_RECV_NODE,
    COMM_SEND_NODE,
    COMP_NODE,
    GlobalMetadata,
    Node,
)
from chakra.schema.protobuf.et_def_pb2 import AttributeProto as Attr
from chakra.src.third_party.utils.protolib import encodeMessage

from topos.errors import InputError
from traffic.chakra import load
from traffic.iteration import predict
from traffic.workload import trace_ranks


def comp(i: int, us: int, deps=(), ctrl=()) -> Node:
    return Node(id=i, name=f"comp{i}", type=COMP_NODE, duration_micros=us, data_deps=list(deps),
                ctrl_deps=list(ctrl))


def coll(i: int, kind: int, size: int, deps=(), ctrl=(), pg: str | None = None) -> Node:
    attrs = [Attr(name="comm_type", int64_val=kind), Attr(name="comm_size", int64_val=size)]
    if pg is not None:
        attrs.append(Attr(name="pg_name", string_val=pg))
    return Node(id=i, name=f"coll{i}", type=COMM_COLL_NODE, data_deps=list(deps), ctrl_deps=list(ctrl), attr=attrs)


def p2p(i: int, send: bool, peer: int, size: int, deps=()) -> Node:
    return Node(id=i, name=f"p2p{i}", type=COMM_SEND_NODE if send else COMM_RECV_NODE, data_deps=list(deps),
                attr=[Attr(name="comm_size", int64_val=size),
                      Attr(name="comm_dst" if send else "comm_src", int32_val=peer)])


def write(prefix: Path, per_rank: list[list[Node]], metadata: bool = True) -> Path:
    for rank, nodes in enumerate(per_rank):
        with open(f"{prefix}.{rank}.et", "wb") as f:
            if metadata:
                encodeMessage(f, GlobalMetadata(version="0.0.4"))
            for n in nodes:
                encodeMessage(f, n)
    return prefix


def test_one_collective_per_rank_is_one_blocking_op_over_every_rank(tmp_path):
    """The shape of ASTRA-sim's microbenchmarks: each of 4 ranks one all-reduce of 1 MB, nothing else."""
    wl = load(write(tmp_path / "ar", [[coll(0, ALL_REDUCE, 1 << 20)]] * 4))
    (step,) = wl.iteration
    assert (step.compute_s, step.overlap, step.op.op, step.op.size, step.op.group) == \
        (0.0, False, "allreduce", 1 << 20, (0, 1, 2, 3))
    assert wl.plan == {"ranks": 4}


def dp_iteration() -> list[Node]:
    """Forward of two layers, backward of layer 1 then 0; each layer's gradient all-reduce hangs off its backward
    compute (control dependency); the optimizer step waits for both all-reduces."""
    return [comp(1, 100), comp(2, 100, deps=[1]),  # forward
            comp(3, 200, deps=[2]), coll(4, ALL_REDUCE, 8 << 20, ctrl=[3]),  # backward 1, its gradients
            comp(5, 200, deps=[3]), coll(6, ALL_REDUCE, 4 << 20, ctrl=[5]),  # backward 0, its gradients
            comp(7, 50, deps=[4, 6])]  # optimizer


def test_a_data_parallel_iteration_overlaps_its_gradient_all_reduces_with_the_backward_compute(tmp_path):
    wl = load(write(tmp_path / "dp", [dp_iteration()] * 2))
    comm = [(s.compute_s, s.op.size if s.op else None, s.overlap) for s in wl.iteration]
    # layer 1's all-reduce runs on under layer 0's backward; layer 0's is waited for by the optimizer
    assert comm == [(pytest.approx(400e-6), 8 << 20, True), (pytest.approx(200e-6), 4 << 20, False),
                    (pytest.approx(50e-6), None, False)]
    t = predict(wl.iteration, lambda op: op.size / 1e9)  # 1 GB/s: 8.4 and 4.2 ms
    # gpu 0.4 ms, ar1 8.4 ms from 0.4; gpu to 0.6; ar0 after ar1 (one network) to 13.0 ms; optimizer 13.05
    assert t.seconds == pytest.approx((400 + 8 * 1048.576 + 4 * 1048.576 + 50) * 1e-6, rel=1e-6)
    assert t.compute_s == pytest.approx(650e-6)


def test_the_slowest_ranks_compute_is_what_the_collective_waits_for(tmp_path):
    fast = [comp(1, 100), coll(2, ALL_GATHER, 1000, deps=[1])]
    slow = [comp(1, 300), coll(2, ALL_GATHER, 1000, deps=[1])]
    (step,) = load(write(tmp_path / "ag", [fast, slow, fast])).iteration
    assert step.compute_s == pytest.approx(300e-6) and step.op.op == "allgather"


def test_a_ring_written_as_sends_and_receives_is_one_step_sent_eagerly(tmp_path):
    """Even ranks send first and odd ranks receive first, as NCCL's p2p rings do: all the sends are one step."""
    n, size = 4, 65536
    ranks = []
    for r in range(n):
        send, recv = p2p(1, True, (r + 1) % n, size), p2p(2, False, (r - 1) % n, size)
        recv.id, send.id = (1, 2) if r % 2 else (2, 1)
        ranks.append([send, recv] if r % 2 == 0 else [recv, send])
    (step,) = load(write(tmp_path / "ring", ranks)).iteration
    assert step.op.op == "sendrecv" and step.op.size == size
    pairs = set(zip(step.op.group[::2], step.op.group[1::2], strict=True))
    assert pairs == {(0, 1), (1, 2), (2, 3), (3, 0)}
    hosts = ["h0", "h1", "h2", "h3"]
    (flows,) = trace_ranks(step.op, hosts, 1)  # one GPU per host: every pair crosses the fabric
    assert len(flows) == 8 and flows[:2] == [("h0", 0), ("h1", 0)]
    assert trace_ranks(step.op, ["h0", "h1"], 2) == [[("h0", 1), ("h1", 0), ("h1", 1), ("h0", 0)]]  # NVLink pairs out


def test_process_groups_come_from_the_groups_given_and_a_missing_one_is_named(tmp_path):
    ranks = [[coll(0, ALL_REDUCE, 4096, pg="tp0" if r < 2 else "tp1")] for r in range(4)]
    prefix = write(tmp_path / "pg", ranks)
    wl = load(prefix, {"tp0": [0, 1], "tp1": [2, 3]})
    assert wl.iteration[0].op.group == (0, 1)  # rank 0's group: every rank's k-th op is one step
    with pytest.raises(InputError, match="process group 'tp0' has no ranks given") as exc:
        load(prefix)
    assert exc.value.value == "pg.0.et node 0"


def test_a_trace_without_global_metadata_and_ordered_by_control_dependencies_only_reads(tmp_path):
    nodes = [coll(5, ALL_REDUCE, 2048, ctrl=[9]), comp(9, 10)]  # ids out of order, control deps only
    (step,) = load(write(tmp_path / "bare", [nodes] * 2, metadata=False)).iteration
    assert step.compute_s == pytest.approx(10e-6) and step.op.size == 2048


@pytest.mark.parametrize("ranks,says,where", [
    ([[comp(1, 10, deps=[7])]] * 2, "depends on node 7", "t.0.et node 1"),
    ([[comp(1, 10, deps=[2]), comp(2, 10, deps=[1])]] * 2, "dependency cycle", "t.0.et node 1"),
    ([[coll(0, ALL_REDUCE, 10)], [coll(0, ALL_GATHER, 10)]], "not on every rank", "t.0.et node 0"),
    ([[coll(0, ALL_REDUCE, 10)], []], "communications on rank 1", "t.1.et"),
    ([[coll(0, 9, 10)]] * 2, "comm_type 9", "t.0.et node 0"),  # BARRIER
    ([[p2p(0, True, 1, 10)], [p2p(0, False, 0, 20)]], "receives nothing of that size", "t.0.et node 0"),
    ([[Node(id=0, type=COMM_COLL_NODE, attr=[Attr(name="comm_type", int64_val=0)])]] * 2, "without comm_size",
     "t.0.et node 0"),
])
def test_a_bad_trace_is_refused_naming_the_file_and_node(tmp_path, ranks, says, where):
    with pytest.raises(InputError) as exc:
        load(write(tmp_path / "t", ranks))
    assert says in exc.value.what and exc.value.value == where, exc.value.line()
    assert "\n" not in exc.value.line()


def test_missing_ranks_files_and_other_files_are_refused(tmp_path):
    write(tmp_path / "t", [[coll(0, ALL_REDUCE, 10)]] * 3)
    (tmp_path / "t.1.et").unlink()
    with pytest.raises(InputError, match="rank 1's trace is missing"):
        load(tmp_path / "t")
    with pytest.raises(InputError, match="no trace files"):
        load(tmp_path / "nothing")
    (tmp_path / "junk.0.et").write_bytes(b"\x05hello")
    with pytest.raises(InputError, match="not a Chakra trace"):
        load(tmp_path / "junk")
    nodes = [Node(id=0, type=COMM_COLL_NODE, attr=[Attr(name="comm_type", int64_val=0),
                                                   Attr(name="comm_size", int64_val=8),
                                                   Attr(name="involved_dim", bool_list={"values": [True, False]})])]
    with pytest.raises(InputError, match="involved_dim"):
        load(write(tmp_path / "dims", [nodes] * 2))


def test_a_trace_with_more_ranks_than_the_job_has_gpus_is_refused():
    wl_op = type("O", (), {"group": (0, 1, 2, 3, 4), "op": "allreduce"})()
    with pytest.raises(InputError, match="the trace has 5 ranks, the job 4 GPUs"):
        trace_ranks(wl_op, ["h0", "h1"], 2)
