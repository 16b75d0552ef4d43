"""Chakra execution traces (MLCommons; what ASTRA-sim replays) as one training iteration (pure: files in, steps
out; no sockets, no clocks).

A trace is one protobuf file per rank, `PREFIX.RANK.et` (ranks 0..N-1): a GlobalMetadata message, then Node
messages, each with an id, a type (COMP_NODE, COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE, memory and
metadata nodes), control and data dependencies, a duration and attributes: a collective's `comm_type` and
`comm_size`, its process group (`pg_name`), a send's or receive's peer (`comm_dst`, `comm_src`) and size. The
messages are read with Chakra's own schema (mlc-chakra's et_def_pb2) and its length-prefixed framing.

Each rank's graph is checked (a dependency on a node the file does not have, a cycle: refused naming the file and
node) and ordered by its dependencies (ties by node id: graphs ordered by control dependencies only read the
same). The ranks' orders then become one iteration of steps, as SimAI files do (traffic/iteration.py), since
NCCL issues a communicator's collectives in the same order on every rank: the k-th communication of every rank
is the k-th step, after the compute before it (the slowest rank's: the op waits for it). A collective runs over
its process group (`groups`: pg_name -> ranks, as ASTRA-sim's communicator-group file gives them; without one,
all ranks), sends and receives that follow one another on a rank are one step whose flows are every rank's
sends, all at once (eager: a ring written out as sends and receives runs as one step, not rank by rank). A
communication is blocking when the rank's next compute node depends on it, else it runs on under the compute
that follows (as SimAI's weight gradients do). Ops refer to trace ranks (ints); the job's GPUs are taken in
order when the run places it (traffic/workload.map_groups).

Left out: memory nodes (no time), tensor sizes (only `comm_size` counts), per-rank compute differences beyond
the slowest rank's, and collectives of different process groups running at once on one rank.
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import networkx as nx

from topos.errors import InputError

from .iteration import Step
from .workload import MAX_COMPUTE_S, MAX_OPS, MAX_SIZE, Op, Workload

MAX_TRACE_BYTES = 64 << 20
MAX_RANKS = 4096
# Chakra's CollectiveCommType numbers and NodeType numbers (et_def.proto), for the error messages and for traces
# whose send and receive nodes carry a node type in comm_type (seen in the wild)
COLLECTIVES = {0: "allreduce", 2: "allgather", 5: "broadcast", 6: "alltoall", 7: "reducescatter",
               8: "reducescatter"}


@dataclass(frozen=True)
class TraceNode:
    id: int
    kind: str  # comp | coll | send | recv | other
    duration_s: float
    deps: tuple[int, ...]
    op: str = ""  # a collective's op (traffic.collectives)
    size: int = 0
    peer: int | None = None  # send: the destination rank, recv: the source rank
    group: str = ""  # pg_name


@dataclass
class RankTrace:
    rank: int
    path: Path
    nodes: dict[int, TraceNode] = field(default_factory=dict)


def load(prefix: str | Path, groups: dict[str, list[int]] | None = None) -> Workload:
    """The iteration of the traces PREFIX.0.et .. PREFIX.N-1.et; `groups`: process groups' ranks by pg_name."""
    ranks = [_read(p, r) for r, p in enumerate(_files(Path(prefix)))]
    orders = {t.rank: _ordered(t) for t in ranks}
    steps = _steps(ranks, orders, groups or {}, len(ranks))
    if len([s for s in steps if s.op is not None]) > MAX_OPS:
        raise InputError(f"more than the {MAX_OPS:,} ops a workload may have", "trace fewer iterations",
                         field="chakra", value=str(prefix))
    ops = [s.op for s in steps if s.op is not None]
    return Workload(Path(prefix).name, ops, {"ranks": len(ranks)}, steps)


def first_file(prefix: Path) -> Path:
    """Rank 0's trace: PREFIX.0.et (whether a prefix names traces at all)."""
    return prefix.with_name(f"{prefix.name}.0.et")


def _files(prefix: Path) -> list[Path]:
    """PREFIX.0.et, PREFIX.1.et, ... with no rank missing."""
    pattern = re.compile(re.escape(prefix.name) + r"\.(\d+)\.et$")
    found = {int(m[1]): p for p in (prefix.parent.iterdir() if prefix.parent.is_dir() else [])
             if (m := pattern.match(p.name))}
    if not found:
        raise InputError("no trace files PREFIX.RANK.et", "give the prefix of the per-rank files, e.g. traces/llm "
                         "for traces/llm.0.et, traces/llm.1.et, ...", field="chakra", value=str(prefix))
    missing = sorted(set(range(max(found) + 1)) - set(found))
    if missing:
        raise InputError(f"rank {missing[0]}'s trace is missing ({len(found)} files up to rank {max(found)})",
                         "give every rank's file", field="chakra", value=f"{prefix}.{missing[0]}.et")
    if len(found) > MAX_RANKS:
        raise InputError(f"more than {MAX_RANKS} ranks", "trace fewer ranks", field="chakra", value=str(prefix))
    home = prefix.parent.resolve()
    for p in found.values():  # read as root: a link out of the folder, or a FIFO, is not a trace
        if p.resolve().parent != home or not p.is_file():
            raise InputError("not a regular file in the prefix's folder", "copy the traces into the folder",
                             field="chakra", value=str(p))
    return [found[r] for r in range(len(found))]


def _messages(path: Path) -> Iterator[bytes]:
    """The length-prefixed messages of a trace file (Chakra's framing: a varint length, then the message);
    gzip-compressed files too."""
    data = path.read_bytes()
    if len(data) > MAX_TRACE_BYTES:
        raise InputError(f"larger than {MAX_TRACE_BYTES >> 20} MB", "trace fewer steps", field="chakra",
                         value=str(path))
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    pos = 0
    while pos < len(data):
        size = shift = 0
        while True:
            if pos >= len(data) or shift > 35:
                raise InputError("a message's length is cut short", "write it with Chakra's encode_message",
                                 field="chakra", value=str(path))
            b = data[pos]
            pos += 1
            size |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if pos + size > len(data):
            raise InputError("the file ends inside a message", "write it with Chakra's encode_message",
                             field="chakra", value=str(path))
        yield data[pos:pos + size]
        pos += size


def _read(path: Path, rank: int) -> RankTrace:
    from chakra.schema.protobuf.et_def_pb2 import GlobalMetadata, Node
    from google.protobuf.message import DecodeError

    msgs = list(_messages(path))
    head = bool(msgs) and _is_metadata(msgs[0], GlobalMetadata, DecodeError)
    try:
        nodes = [Node.FromString(m) for m in msgs[head:]]  # files in the wild may lack the metadata record
    except DecodeError:
        nodes = [Node()]
    if not (head or nodes) or any(not n.ListFields() for n in nodes):
        raise InputError("not a Chakra trace (a GlobalMetadata record, then nodes)",
                         "convert it with chakra_converter", field="chakra", value=str(path))
    trace = RankTrace(rank, path)
    for n in nodes:
        if n.id in trace.nodes:
            raise InputError(f"node id {n.id} twice", "give each node of a rank its own id", field="chakra",
                             value=f"{path.name} node {n.id}")
        trace.nodes[n.id] = _node(n, path)
    return trace


def _is_metadata(msg: bytes, metadata, error) -> bool:
    """Whether a message is a GlobalMetadata record (a version, or attributes Chakra's converter writes)."""
    try:
        m = metadata.FromString(msg)
    except error:
        return False
    return bool(m.version) or any(a.name in ("schema", "pid", "time", "start_ts", "finish_ts") for a in m.attr)


def _node(n, path: Path) -> TraceNode:
    attrs = {a.name: a for a in n.attr}
    deps = tuple(dict.fromkeys([*n.data_deps, *n.ctrl_deps]))
    where = f"{path.name} node {n.id}"
    kind = {4: "comp", 7: "coll", 5: "send", 6: "recv"}.get(n.type, "other")
    if kind == "comp" and attrs.get("is_cpu_op") is not None and attrs["is_cpu_op"].bool_val:
        kind = "other"  # host-side bookkeeping: the GPU's time is in its kernels
    if kind == "other":
        return TraceNode(n.id, kind, 0.0, deps)
    if kind == "comp":
        if n.duration_micros * 1e-6 > MAX_COMPUTE_S:
            raise InputError(f"a compute node longer than {MAX_COMPUTE_S:g} s", "give duration_micros in "
                             "microseconds", field="chakra", value=where)
        return TraceNode(n.id, kind, n.duration_micros * 1e-6, deps)
    size = attrs["comm_size"].int64_val if "comm_size" in attrs else 0
    if not 0 < size <= MAX_SIZE:
        raise InputError("a communication node without comm_size (bytes, at most 1 PB)", "give its bytes in "
                         "comm_size", field="chakra", value=where)
    group = attrs["pg_name"].string_val if "pg_name" in attrs else ""
    dims = list(attrs["involved_dim"].bool_list.values) if "involved_dim" in attrs else []
    if not group and dims and not all(dims):  # ASTRA-sim's dimensions of its own logical topology
        raise InputError("a group given as involved_dim (ASTRA-sim's topology dimensions)",
                         "name the process group in pg_name and give its ranks in the workload's groups",
                         field="chakra", value=where)
    if kind == "coll":
        ctype = attrs["comm_type"].int64_val if "comm_type" in attrs else -1
        if ctype not in COLLECTIVES:
            raise InputError(f"collective comm_type {ctype} is not replayed here",
                             "use ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL or BROADCAST", field="chakra",
                             value=where)
        return TraceNode(n.id, kind, 0.0, deps, COLLECTIVES[ctype], size, group=group)
    key = "comm_dst" if kind == "send" else "comm_src"
    if key not in attrs:
        raise InputError(f"a {kind} node without {key}", f"give the peer rank in {key}", field="chakra",
                         value=where)
    peer = attrs[key].int32_val or attrs[key].int64_val
    return TraceNode(n.id, kind, 0.0, deps, "sendrecv", size, peer, group)


def _ordered(t: RankTrace) -> list[TraceNode]:
    """The rank's nodes in dependency order, ties by id; a dangling dependency or a cycle refused."""
    g = nx.DiGraph()
    g.add_nodes_from(t.nodes)
    for n in t.nodes.values():
        for d in n.deps:
            if d not in t.nodes:
                raise InputError(f"depends on node {d}, which the file does not have", "drop the dependency or "
                                 "add the node", field="chakra", value=f"{t.path.name} node {n.id}")
            g.add_edge(d, n.id)
    try:
        return [t.nodes[i] for i in nx.lexicographical_topological_sort(g)]
    except nx.NetworkXUnfeasible:
        cycle = nx.find_cycle(g)
        raise InputError(f"a dependency cycle ({' -> '.join(str(a) for a, _ in cycle)} -> {cycle[0][0]})",
                         "a trace is a DAG: drop one of the cycle's dependencies", field="chakra",
                         value=f"{t.path.name} node {cycle[0][0]}") from None


@dataclass
class _Comm:
    """One rank's k-th communication: a collective, or a run of sends and receives; the compute before it."""

    compute_s: float
    nodes: list[TraceNode]
    end: int  # the position of its last node in the rank's order
    blocking: bool = True


def _comms(order: list[TraceNode]) -> tuple[list[_Comm], float]:
    """A rank's communications in order, each with the compute before it (sends and receives that follow one
    another are one); the compute after the last."""
    out: list[_Comm] = []
    compute, p2p_run = 0.0, False
    for i, n in enumerate(order):
        if n.kind == "comp":
            compute += n.duration_s
            p2p_run = False
        elif n.kind == "coll" or (n.kind in ("send", "recv") and not p2p_run):
            out.append(_Comm(compute, [n], i))
            compute, p2p_run = 0.0, n.kind != "coll"
        elif n.kind in ("send", "recv"):
            out[-1].nodes.append(n)
            out[-1].end = i
    for c in out:
        c.blocking = _blocking(c, order)
    return out, compute


def _blocking(c: _Comm, order: list[TraceNode]) -> bool:
    """Whether the rank's next compute node after the communication depends on it (directly or through other
    nodes); with no compute after it, the iteration waits for it anyway. Only the nodes up to that compute node
    are looked at."""
    reach = {n.id for n in c.nodes}
    for n in islice(order, c.end + 1, None):
        if reach.intersection(n.deps):
            if n.kind == "comp":
                return True
            reach.add(n.id)
        elif n.kind == "comp":
            return False
    return True


def _steps(ranks: list[RankTrace], orders: dict[int, list[TraceNode]], groups: dict[str, list[int]],
           n: int) -> list[Step]:
    per_rank = {r: _comms(o) for r, o in orders.items()}
    counts = {r: len(c) for r, (c, _tail) in per_rank.items()}
    if len(set(counts.values())) != 1:
        r = min(counts, key=counts.get)
        raise InputError(f"{counts[r]} communications on rank {r}, {counts[0]} on rank 0",
                         "every rank issues the same collectives in the same order", field="chakra",
                         value=ranks[r].path.name)
    steps = []
    for k in range(counts[0]):
        kth = {r: per_rank[r][0][k] for r in per_rank}
        compute = max(c.compute_s for c in kth.values())
        steps.append(Step(compute, _op(kth, groups, n, ranks, k), overlap=not kth[0].blocking,
                          layer=f"comm {k}"))
    tail = max(t for _c, t in per_rank.values())
    if tail > 0:
        steps.append(Step(tail, None, layer="compute after the last communication"))
    return steps


def _op(kth: dict[int, _Comm], groups: dict[str, list[int]], n: int, ranks: list[RankTrace], k: int) -> Op:
    first = kth[0].nodes[0]
    where = f"{ranks[0].path.name} node {first.id}"
    if first.kind == "coll":
        if any(c.nodes[0].kind != "coll" or c.nodes[0].op != first.op for c in kth.values()):
            raise InputError(f"communication {k} is {first.op} on rank 0 but not on every rank",
                             "every rank issues the same collectives in the same order", field="chakra", value=where)
        members = groups.get(first.group) if first.group else list(range(n))
        if members is None:
            raise InputError(f"process group {first.group!r} has no ranks given",
                             "give its ranks in the workload's groups", field="chakra", value=where)
        if not members or max(members) >= n or len(set(members)) != len(members):
            raise InputError(f"process group {first.group!r}: ranks {members[:8]} are not distinct ranks of the "
                             f"trace's {n}", f"give ranks 0..{n - 1}", field="groups", value=first.group)
        return Op(first.op, first.size, tuple(members), label=f"{first.op} {k}")
    return _p2p(kth, ranks, k)


def _p2p(kth: dict[int, _Comm], ranks: list[RankTrace], k: int) -> Op:
    """The sends of every rank's k-th run of sends and receives, each matched by a receive at its peer."""
    sends = [(r, x.peer, x.size, x) for r, c in kth.items() for x in c.nodes if x.kind == "send"]
    recvs = [(x.peer, r, x.size) for r, c in kth.items() for x in c.nodes if x.kind == "recv"]
    for src, dst, size, node in sends:
        if (src, dst, size) not in recvs:
            raise InputError(f"sends {size} bytes to rank {dst}, which receives nothing of that size from rank "
                             f"{src} at the same point", "pair every send with its receive",
                             field="chakra", value=f"{ranks[src].path.name} node {node.id}")
    if not sends or len(recvs) != len(sends) or len({s for _a, _b, s, _n in sends}) != 1:
        raise InputError(f"communication {k}: the sends and receives do not pair up with one size",
                         "pair every send with its receive, one size per step", field="chakra",
                         value=ranks[0].path.name)
    flat = tuple(r for src, dst, _s, _n in sends for r in (src, dst))
    return Op("sendrecv", sends[0][2], flat, label=f"sendrecv {k}")
