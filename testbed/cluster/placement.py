"""Which server runs which node of a fabric spread over several (issue #18). Pure: no SSH, no Mininet.

- A segment (its hosts and the ToRs they hang from: a connected piece of the fabric below the aggregation
  tier) stays on one server, so only ToR-aggregation (and aggregation-core) links cross servers. Segments
  go to servers largest first, each to the least loaded server.
- Aggregation, then core switches, are spread one by one, each where it keeps the busiest server's
  crossing capacity lowest (then the fewest nodes), so the crossing traffic is balanced.
- The crossing links' emulated rates must fit the servers' tunnel link, each way: a spec whose crossing
  bandwidth at its scale exceeds it is refused with the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from topos.errors import InputError
from topos.model import Link, Topology

SPREAD_ROLES = ("agg", "core")


@dataclass(frozen=True)
class Placement:
    servers: list[str]
    server_of: dict[str, str]  # node -> server
    crossing: list[Link]  # links whose two ends are on different servers

    def nodes_on(self, server: str) -> list[str]:
        return [n for n, s in self.server_of.items() if s == server]

    def crossing_gbps(self) -> dict[str, float]:
        """Per server: the real-fabric rate of the crossing links it terminates (each way)."""
        out = {s: 0.0 for s in self.servers}
        for l in self.crossing:
            out[self.server_of[l.a]] += l.rate_gbps
            out[self.server_of[l.b]] += l.rate_gbps
        return out

    def to_dict(self) -> dict:
        return {"servers": {s: sorted(self.nodes_on(s)) for s in self.servers},
                "crossing_links": sorted(l.name for l in self.crossing),
                "crossing_gbps": self.crossing_gbps()}


def segments(topo: Topology) -> list[set[str]]:
    """Connected pieces of the fabric without its aggregation and core tiers: hosts with their ToRs."""
    g = nx.Graph()
    g.add_nodes_from(n.name for n in topo.nodes.values() if n.role not in SPREAD_ROLES)
    g.add_edges_from((l.a, l.b) for l in topo.links if l.a in g and l.b in g)
    return sorted((set(c) for c in nx.connected_components(g)), key=lambda c: (-len(c), min(c)))


def place(topo: Topology, servers: list[str]) -> Placement:
    if not servers:
        raise InputError("a cluster needs at least one server", "list the servers in cluster.yaml",
                         field="servers", value=servers)
    load = {s: 0 for s in servers}
    server_of: dict[str, str] = {}
    for seg in segments(topo):
        s = min(servers, key=lambda s: (load[s], servers.index(s)))
        server_of.update(dict.fromkeys(seg, s))
        load[s] += len(seg)
    crossing = {s: 0.0 for s in servers}
    for role in SPREAD_ROLES:
        for n in sorted(topo.by_role(role), key=lambda n: (n.pod or 0, n.plane or 0, n.index)):
            placed = [(l, server_of[l.other(n.name)]) for l in topo.links_of(n.name) if l.other(n.name) in server_of]

            def cost(s: str, placed=placed) -> tuple[float, int, int]:
                after = dict(crossing)
                for l, peer in placed:
                    if peer != s:
                        after[s] += l.rate_gbps
                        after[peer] += l.rate_gbps
                return max(after.values()), load[s], servers.index(s)

            s = min(servers, key=cost)
            for l, peer in placed:
                if peer != s:
                    crossing[s] += l.rate_gbps
                    crossing[peer] += l.rate_gbps
            server_of[n.name] = s
            load[s] += 1
    return Placement(list(servers), server_of, [l for l in topo.links if server_of[l.a] != server_of[l.b]])


def check_fits(placement: Placement, scale: float, link_gbps: float) -> None:
    """Refuse a placement whose crossing links, at their emulated rates, exceed a server's tunnel link."""
    for s, gbps in placement.crossing_gbps().items():
        need = gbps / scale
        if need > link_gbps:
            raise InputError(f"the links crossing to server {s} need {need * 1e3:.1f} Mbit/s each way at this "
                             f"scale, above its tunnel link's {link_gbps * 1e3:.1f} Mbit/s",
                             f"use scale >= {gbps / link_gbps:.0f}, fewer servers or a faster link_gbps",
                             field="scale", value=scale)
