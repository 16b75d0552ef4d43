"""Where jobs' GPUs go: compactly (fewest segments) or scattered, and the cross-segment traffic that follows. Pure.

A GPU is a host NIC here (an emulated host has one GPU per rail); a job gets
whole hosts, its ranks host-major (h:0, h:1, ..., next host), the order rings run
in. Backup hosts are never placed. `compact` fills the fewest segments: the
smallest segment that holds the whole job, else the fullest free segments
first (HPN's point: a 1,024-GPU segment holds jobs that span many 128-GPU
segments elsewhere). `scattered` deals hosts out one segment at a time, as a
fragmented cluster would.

`ring_crossings` says how much of a rail-aligned ring all-reduce (one ring per
rail over the job's hosts, every hop the same bytes) crosses segments: the
hops between hosts of different segments over all hops.
"""

from __future__ import annotations

from collections.abc import Iterable

from topos.model import Node, Topology

POLICIES = ("compact", "scattered")


def segments(topo: Topology) -> dict[tuple, list[Node]]:
    """Active hosts per (pod, segment), in host order."""
    out: dict[tuple, list[Node]] = {}
    for h in topo.hosts:
        if not h.backup:
            out.setdefault((h.pod, h.segment), []).append(h)
    return out


def place(topo: Topology, jobs: Iterable[tuple[str, int]], policy: str = "compact",
          taken: Iterable[str] = ()) -> dict[str, list[tuple[str, int]]]:
    """Ranks (host, GPU) per job for (name, GPUs) in the given order; a job gets ceil(GPUs / GPUs per host)
    hosts, GPUs per host as the topology has them (one per NIC unless it says otherwise)."""
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r}: use one of {', '.join(POLICIES)}")
    used = set(taken)
    free = {seg: [h for h in hs if h.name not in used] for seg, hs in segments(topo).items()}
    per_host = topo.hosts[0].gpus or topo.hosts[0].nics
    out: dict[str, list[tuple[str, int]]] = {}
    for name, gpus in jobs:
        need = -(-gpus // per_host)
        if need > sum(len(hs) for hs in free.values()):
            raise ValueError(f"job {name}: {gpus} GPUs need {need} hosts of {per_host} GPUs, "
                             f"{sum(map(len, free.values()))} are free")
        hosts = _compact(free, need) if policy == "compact" else _scattered(free, need)
        for h in hosts:
            free[(h.pod, h.segment)].remove(h)
        out[name] = [(h.name, g) for h in hosts for g in range(per_host)][:gpus]
    return out


def _compact(free: dict[tuple, list[Node]], need: int) -> list[Node]:
    fits = [seg for seg, hs in free.items() if len(hs) >= need]
    if fits:  # best fit: the segment left with the fewest free hosts
        return free[min(fits, key=lambda s: (len(free[s]), s))][:need]
    hosts: list[Node] = []
    for seg in sorted(free, key=lambda s: (-len(free[s]), s)):
        hosts += free[seg][:need - len(hosts)]
        if len(hosts) == need:
            break
    return hosts


def _scattered(free: dict[tuple, list[Node]], need: int) -> list[Node]:
    queues = {seg: list(hs) for seg, hs in free.items()}
    hosts: list[Node] = []
    while len(hosts) < need:
        for seg in sorted(queues):
            if queues[seg] and len(hosts) < need:
                hosts.append(queues[seg].pop(0))
    return hosts


def segments_spanned(topo: Topology, ranks: list[tuple[str, int]]) -> int:
    return len({(topo.nodes[h].pod, topo.nodes[h].segment) for h, _ in ranks})


def ring_crossings(topo: Topology, ranks: list[tuple[str, int]]) -> tuple[int, int]:
    """(hops between segments, all hops) of one ring per rail over the job's hosts in rank order."""
    hosts = list(dict.fromkeys(h for h, _ in ranks))
    if len(hosts) < 2:
        return 0, 0
    seg = [(topo.nodes[h].pod, topo.nodes[h].segment) for h in hosts]
    rails = len({n for _, n in ranks})
    crossing = sum(seg[i] != seg[(i + 1) % len(seg)] for i in range(len(seg)))
    return crossing * rails, len(seg) * rails
