"""Collective algorithms as flow schedules (pure: no network, no root).

A schedule is a list of steps; a step is a set of flows (source rank, destination
rank, bytes) that run together and end when the slowest ends, as in a
synchronous collective. A rank is a host NIC: (host, nic); `among_gpus` builds a collective among GPUs,
several per server, and keeps the hops between servers (their NICs).

Sizes follow nccl-tests: `size` is the buffer a rank holds (all-reduce,
broadcast, send/recv) or the whole gathered/scattered buffer (all-gather,
reduce-scatter, all-to-all), so bus bandwidth factors are the NCCL ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from topos.errors import InputError

Rank = tuple[str, int]  # (host, nic)


@dataclass(frozen=True)
class Flow:
    src: Rank
    dst: Rank
    bytes: int


@dataclass
class Schedule:
    op: str
    algorithm: str
    size: int
    ranks: list[Rank]
    steps: list[list[Flow]] = field(default_factory=list)
    groups: int = 1  # concurrent collectives merged into this schedule (ranks split evenly)
    # a step needs nothing the step before delivered (all-to-all: every block is the sender's own data), so a
    # rank sends every step at once, as NCCL's grouped sends and receives to all peers do
    independent_steps: bool = False
    # among_gpus: the GPUs per group and per server; their hops inside a server went over NVLink and are not
    # among the steps (0: a rank is a NIC, and every hop is on the network)
    gpus: int = 0
    gpus_per_host: int = 0

    @property
    def members(self) -> int:
        """The ranks taking part, as nccl-tests counts them: GPUs, or NICs where a rank is a NIC."""
        return self.gpus * self.groups if self.gpus else len(self.ranks)

    @property
    def total_bytes(self) -> int:
        return sum(f.bytes for step in self.steps for f in step)

    def busiest_s(self, bps: Callable[[Rank], float]) -> float:
        """The op alone at its ranks' rates: the busiest rank's bytes out or in over its rate, `bps(rank)`."""
        sent: dict = {}
        received: dict = {}
        for step in self.steps:  # one pass over the flows (per rank, a pass each was quadratic in the ranks)
            for f in step:
                sent[f.src] = sent.get(f.src, 0) + f.bytes
                received[f.dst] = received.get(f.dst, 0) + f.bytes
        return max(max(sent.get(r, 0), received.get(r, 0)) * 8 / bps(r) for r in self.ranks)

    def sent_by(self, rank: Rank) -> int:
        return sum(f.bytes for step in self.steps for f in step if f.src == rank)


def _split(size: int, parts: int) -> list[int]:
    """`size` bytes in `parts` chunks that differ by at most one byte and sum exactly to size."""
    base, extra = divmod(size, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _need(ranks: list[Rank], at_least: int, op: str) -> None:
    if len(ranks) < at_least:
        raise InputError(f"{op} needs at least {at_least} ranks", "give a larger group", field="ranks",
                         value=len(ranks))
    if len(set(ranks)) != len(ranks):
        raise InputError(f"{op}: a rank appears twice", "list each host NIC once", field="ranks", value=ranks)


def ring_allreduce(ranks: list[Rank], size: int) -> Schedule:
    """Reduce-scatter then all-gather around a ring: 2(n-1) steps of size/n per rank."""
    n = len(ranks)
    _need(ranks, 2, "all-reduce")
    chunks = _split(size, n)
    s = Schedule("allreduce", "ring", size, list(ranks))
    for step in range(2 * (n - 1)):
        # In step k rank i forwards chunk (i - k) mod n: every chunk travels the whole ring once per phase.
        s.steps.append([Flow(ranks[i], ranks[(i + 1) % n], chunks[(i - step) % n]) for i in range(n)])
    return s


def halving_doubling_allreduce(ranks: list[Rank], size: int) -> Schedule:
    """Rabenseifner: reduce-scatter by recursive halving, all-gather by recursive doubling (n a power of 2)."""
    n = len(ranks)
    _need(ranks, 2, "all-reduce")
    if n & (n - 1):
        raise InputError("halving-doubling needs a power-of-two group", "use 2, 4, 8, ... ranks or algorithm ring",
                         field="ranks", value=n)
    s = Schedule("allreduce", "halving_doubling", size, list(ranks))
    dists = []
    d = n // 2
    while d:
        dists.append(d)
        d //= 2
    part = [size] * n  # what each rank holds of the buffer; partners hold segments of the same size
    for d in dists:  # halving: each keeps one half of its segment and sends the partner the other
        halves = [_split(part[i], 2)[::-1] if i & d else _split(part[i], 2) for i in range(n)]  # (keep, send)
        s.steps.append([Flow(ranks[i], ranks[i ^ d], halves[i][1]) for i in range(n)])
        part = [keep for keep, _send in halves]
    for d in reversed(dists):  # doubling: the mirror image, each segment joined with the partner's
        s.steps.append([Flow(ranks[i], ranks[i ^ d], part[i]) for i in range(n)])
        part = [part[i] + part[i ^ d] for i in range(n)]
    return s


def ring_allgather(ranks: list[Rank], size: int) -> Schedule:
    n = len(ranks)
    _need(ranks, 2, "all-gather")
    chunks = _split(size, n)
    s = Schedule("allgather", "ring", size, list(ranks))
    for step in range(n - 1):
        s.steps.append([Flow(ranks[i], ranks[(i + 1) % n], chunks[(i - step) % n]) for i in range(n)])
    return s


def ring_reducescatter(ranks: list[Rank], size: int) -> Schedule:
    s = ring_allgather(ranks, size)
    s.op = "reducescatter"
    return s


def pairwise_alltoall(ranks: list[Rank], size: int) -> Schedule:
    """n-1 steps; in step k rank i sends its block for rank i+k."""
    n = len(ranks)
    _need(ranks, 2, "all-to-all")
    block = _split(size, n)
    s = Schedule("alltoall", "pairwise", size, list(ranks), independent_steps=True)
    for k in range(1, n):
        s.steps.append([Flow(ranks[i], ranks[(i + k) % n], block[(i + k) % n]) for i in range(n)])
    return s


def pipelined_broadcast(ranks: list[Rank], size: int, chunks: int | None = None) -> Schedule:
    """From ranks[0] down a chain in `chunks` pieces (default n): n-1+chunks-1 steps, (n-1)*size bytes in all."""
    n = len(ranks)
    _need(ranks, 2, "broadcast")
    c = chunks or n
    pieces = _split(size, c)
    s = Schedule("broadcast", "pipeline", size, list(ranks))
    for t in range(n - 1 + c - 1):
        step = [Flow(ranks[p], ranks[p + 1], pieces[t - p]) for p in range(n - 1) if 0 <= t - p < c]
        s.steps.append(step)
    return s


def sendrecv(ranks: list[Rank], size: int) -> Schedule:
    """Pipeline-stage traffic: rank 2k sends to rank 2k+1, all pairs at once."""
    _need(ranks, 2, "send/recv")
    if len(ranks) % 2:
        raise InputError("send/recv pairs ranks", "give an even number of ranks", field="ranks", value=len(ranks))
    s = Schedule("sendrecv", "pairs", size, list(ranks))
    s.steps.append([Flow(ranks[i], ranks[i + 1], size) for i in range(0, len(ranks), 2)])
    return s


def incast(ranks: list[Rank], size: int) -> Schedule:
    """Every other rank sends `size` to ranks[0] at once (the PFC stress case, not an NCCL op).

    The schedule's size is what the receiver gets, (n-1) x size, so algbw is its goodput."""
    _need(ranks, 2, "incast")
    s = Schedule("incast", "many_to_one", size * (len(ranks) - 1), list(ranks))
    s.steps.append([Flow(r, ranks[0], size) for r in ranks[1:]])
    return s


def hierarchical_allreduce(hosts: list[str], rails: int, size: int) -> Schedule:
    """NCCL on rail-optimized fabrics: intra-host reduce-scatter over NVLink (no network bytes), one ring
    all-reduce per rail among that rail's NICs on size/rails each, all rails at once, then intra-host
    all-gather (no network bytes)."""
    if rails < 1:
        raise InputError("rails must be at least 1", "give the NICs per host", field="rails", value=rails)
    per_rail = _split(size, rails)
    rings = [ring_allreduce([(h, r) for h in hosts], per_rail[r]) for r in range(rails)]
    s = Schedule("allreduce", "hierarchical", size, [(h, r) for r in range(rails) for h in hosts])
    for step in range(len(rings[0].steps)):
        s.steps.append([f for ring in rings for f in ring.steps[step]])
    return s


def among_gpus(op: str, gpus: list[Rank], size: int, algorithm: str | None, nic_of: Callable[[int], int]) -> Schedule:
    """A collective among GPUs (host, GPU index), as many in every server: the ring visits a server's GPUs in
    turn, direction alternating server by server, so that a hop between two servers joins GPUs of the same
    index (one rail), as NCCL lays rings on rail-optimized fabrics. Hops inside a server go over NVLink and put
    nothing on the network; the others run between the GPUs' NICs, `nic_of(GPU index)`."""
    by_host: dict[str, list[int]] = {}
    for h, g in gpus:
        by_host.setdefault(h, []).append(g)
    ordered = [(h, g) for i, (h, gs) in enumerate(by_host.items()) for g in sorted(gs, reverse=i % 2 == 1)]
    whole = build_schedule(op, ordered, size, algorithm)

    def nic(r: Rank) -> Rank:
        return r[0], nic_of(r[1])

    out = Schedule(whole.op, whole.algorithm, size, list(dict.fromkeys(nic(r) for r in ordered)),
                   independent_steps=whole.independent_steps, gpus=len(ordered),
                   gpus_per_host=len(ordered) // len(by_host))
    for step in whole.steps:
        flows = [Flow(nic(f.src), nic(f.dst), f.bytes) for f in step if f.src[0] != f.dst[0]]
        if flows:
            out.steps.append(flows)
    return out


ALGORITHMS: dict[str, dict[str, Callable[..., Schedule]]] = {
    "allreduce": {"ring": ring_allreduce, "halving_doubling": halving_doubling_allreduce},
    "allgather": {"ring": ring_allgather},
    "reducescatter": {"ring": ring_reducescatter},
    "alltoall": {"pairwise": pairwise_alltoall},
    "broadcast": {"pipeline": pipelined_broadcast},
    "sendrecv": {"pairs": sendrecv},
    "incast": {"many_to_one": incast},
}


def build_schedule(op: str, ranks: list[Rank], size: int, algorithm: str | None = None) -> Schedule:
    if op not in ALGORITHMS:
        raise InputError("unknown collective", f"use one of: {', '.join(ALGORITHMS)}", field="op", value=op)
    if size < 1:
        raise InputError("size must be at least 1 byte", "give a positive size, e.g. 8MB", field="size", value=size)
    algos = ALGORITHMS[op]
    algorithm = algorithm or next(iter(algos))
    if algorithm == "hierarchical" and op == "allreduce":
        hosts = list(dict.fromkeys(h for h, _ in ranks))
        rails = len({n for _, n in ranks})
        if len(ranks) != len(hosts) * rails:
            raise InputError("hierarchical all-reduce needs every rail of every host in the group",
                             "give all host NICs, or use algorithm ring", field="ranks", value=len(ranks))
        return hierarchical_allreduce(hosts, rails, size)
    if algorithm not in algos:
        raise InputError(f"unknown algorithm for {op}", f"use one of: {', '.join(algos)}"
                         + (", hierarchical" if op == "allreduce" else ""), field="algorithm", value=algorithm)
    return algos[algorithm](ranks, size)
