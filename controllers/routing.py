"""Path computation over the Topology: pure code, no switches, no root.

`compute_tables` turns a topology plus the set of links that are down into
forwarding state: for every switch, the egress ports toward every host NIC
address (the ECMP set, or one port in `shortest` mode); and for every host NIC,
which of its own ports still lead to each destination. Installers (static
OpenFlow rules, the controller app) only translate these tables.

Next hops are the neighbours one hop closer to the destination, so paths are
loop-free by construction. In a dual-plane fabric a plane that lost the
destination's port has no route to it at all; the source hosts then steer to
the other plane (the host table), as HPN's host-side port selection does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from topos.addressing import NicAddress, all_addresses
from topos.model import Link, Topology

Mode = Literal["ecmp", "shortest"]


@dataclass
class Tables:
    # switch name -> destination IP -> egress ports (sorted); missing = unreachable
    switch: dict[str, dict[str, tuple[int, ...]]] = field(default_factory=dict)
    # (host, nic) -> destination IP -> own host ports that still reach it
    host: dict[tuple[str, int], dict[str, tuple[int, ...]]] = field(default_factory=dict)
    # (host, nic) -> its ports that are up
    host_live: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)


class RoutingGraph:
    """Adjacency of a topology, built once and reused across recomputations."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self.adj: dict[str, list[tuple[str, int, Link]]] = {s.name: [] for s in topo.switches}
        self.attach: dict[tuple[str, int], list[Link]] = {}
        for l in topo.links:
            if l.kind == "host-tor":
                self.attach.setdefault((l.a, l.nic), []).append(l)
            else:
                self.adj[l.a].append((l.b, l.a_port, l))
                self.adj[l.b].append((l.a, l.b_port, l))
        self.addresses: list[NicAddress] = all_addresses(topo)
        self.by_link_name = {l.name: l for l in topo.links}
        self.by_ip = {a.ip: a for a in self.addresses}
        # (switch, port) -> the node at the other end, switch or host: what every path walk follows
        self.peer: dict[tuple[str, int], str] = {(sw, port): nb for sw, nbrs in self.adj.items()
                                                 for nb, port, _ in nbrs}
        self.peer.update({(l.b, l.b_port): l.a for links in self.attach.values() for l in links})

    def distances(self, sources: Iterable[str], down: frozenset[str]) -> dict[str, int]:
        dist = {s: 0 for s in sources}
        queue = deque(dist)
        while queue:
            u = queue.popleft()
            for v, _, l in self.adj[u]:
                if v not in dist and l.name not in down:
                    dist[v] = dist[u] + 1
                    queue.append(v)
        return dist


def compute_tables(topo: Topology | RoutingGraph, down: Iterable[str] = (), mode: Mode = "ecmp") -> Tables:
    graph = topo if isinstance(topo, RoutingGraph) else RoutingGraph(topo)
    down = frozenset(down)
    unknown = down - graph.by_link_name.keys()
    if unknown:
        raise KeyError(f"unknown link(s): {sorted(unknown)}")
    tables = Tables(switch={s: {} for s in graph.adj})
    bfs_cache: dict[frozenset[str], dict[str, int]] = {}
    for addr in graph.addresses:
        live = [l for l in graph.attach[addr.host, addr.nic] if l.name not in down]
        tables.host_live[addr.host, addr.nic] = tuple(sorted(l.a_port for l in live))
        tors = frozenset(l.b for l in live)
        if tors not in bfs_cache:
            bfs_cache[tors] = graph.distances(tors, down)
        dist = bfs_cache[tors]
        for l in live:
            tables.switch[l.b][addr.ip] = (l.b_port,)
        for sw, d in dist.items():
            if d == 0:
                continue
            ports = sorted(port for nb, port, l in graph.adj[sw] if l.name not in down and dist.get(nb) == d - 1)
            tables.switch[sw][addr.ip] = tuple(ports[:1] if mode == "shortest" else ports)
    # Host side: a port of NIC n reaches destination D if it is up and its ToR has a route to D.
    for (host, nic), links in graph.attach.items():
        row: dict[str, tuple[int, ...]] = {}
        for addr in graph.addresses:
            if addr.nic != nic or addr.host == host:
                continue
            ports = tuple(sorted(l.a_port for l in links if l.name not in down and addr.ip in tables.switch[l.b]))
            row[addr.ip] = ports[:1] if mode == "shortest" else ports
        tables.host[host, nic] = row
    return tables


def trace(graph: RoutingGraph, tables: Tables, src: str, dst_ip: str) -> set[tuple[str, ...]]:
    """Every switch path a packet from host `src` to `dst_ip` can take (all ECMP branches).

    Used by tests and by `paths A B`; raises if a branch loops or dead-ends.
    """
    dst = graph.by_ip[dst_ip]
    paths: set[tuple[str, ...]] = set()
    first_hops = [l for l in graph.attach[src, dst.nic] if l.a_port in tables.host[src, dst.nic].get(dst_ip, ())]
    if not first_hops:
        raise LookupError(f"{src} has no live port toward {dst_ip}")

    def walk(sw: str, path: tuple[str, ...]) -> None:
        if sw in path:
            raise RuntimeError(f"loop: {path + (sw,)}")
        ports = tables.switch[sw].get(dst_ip)
        if not ports:
            raise LookupError(f"black hole at {sw} toward {dst_ip} (path {path})")
        for p in ports:
            nxt = graph.peer[sw, p]
            if nxt == dst.host:
                paths.add(path + (sw,))
            elif nxt in graph.adj:
                walk(nxt, path + (sw,))
            else:
                raise RuntimeError(f"{sw} port {p} leads to host {nxt}, not {dst.host}")

    for l in first_hops:
        walk(l.b, ())
    return paths
