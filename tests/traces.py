"""Chakra execution traces the project writes itself, with Chakra's schema classes (mlc-chakra's et_def_pb2)
and framing, in the shapes public traces have (tests/unit/test_chakra.py, tests/emu/test_chakra_run.py)."""

from __future__ import annotations

from pathlib import Path

from chakra.schema.protobuf.et_def_pb2 import (
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


def dp_iteration() -> list[Node]:
    """Forward of two layers, backward of layer 1 then 0; each layer's gradient all-reduce hangs off its backward
    compute (control dependency); the optimizer step waits for both all-reduces."""
    return [comp(1, 100), comp(2, 100, deps=[1]),  # forward
            comp(3, 200, deps=[2]), coll(4, ALL_REDUCE, 8 << 20, ctrl=[3]),  # backward 1, its gradients
            comp(5, 200, deps=[3]), coll(6, ALL_REDUCE, 4 << 20, ctrl=[5]),  # backward 0, its gradients
            comp(7, 50, deps=[4, 6])]  # optimizer


def ring(n: int, size: int) -> list[list[Node]]:
    """A ring written out as sends and receives: rank r sends to r+1 and receives from r-1; even ranks send
    first and odd ranks receive first, as NCCL's p2p rings do."""
    ranks = []
    for r in range(n):
        send, recv = p2p(1, True, (r + 1) % n, size), p2p(2, False, (r - 1) % n, size)
        recv.id, send.id = (1, 2) if r % 2 else (2, 1)
        ranks.append([send, recv] if r % 2 == 0 else [recv, send])
    return ranks
