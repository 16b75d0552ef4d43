"""Cyclic buffer dependencies: where the routes a lossless class takes can deadlock under PFC (pure code).

A lossless frame that came into switch Y from X waits in Y's egress queue toward Z; while that queue is paused
its frames fill Y's buffer, and Y pauses X's queue toward it (PFC, per ingress port). So X's queue toward Y
*depends* on Y's toward Z whenever some path goes X -> Y -> Z. Up-down routing (up through the tiers, then
down) never closes a cycle of such dependencies; shortest paths after link failures can, by bouncing through a
lower tier (a valley: aggregation -> ToR -> aggregation). When every queue of a cycle is paused, each waits for
the next to drain and none ever does: a PFC deadlock (Hu et al., "Deadlocks in Datacenter Networks: Why Do They
Form, and How to Avoid Them", HotNets 2016). A cycle is necessary, not sufficient: the deadlock forms only
when every queue of the cycle passes its pause threshold at once.

The dependencies are taken from the paths the given flows actually take (every ECMP branch, `routing.trace`),
not from every table entry: a bounce route nothing uses cannot deadlock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import networkx as nx

from topos.addressing import nic_address

from .routing import RoutingGraph, Tables, trace


@dataclass(frozen=True, order=True)
class Queue:
    """A switch's egress queue toward a neighbouring switch (host ports never pause anyone upstream of them)."""

    switch: str
    toward: str

    def __str__(self) -> str:
        return f"{self.switch}->{self.toward}"


@dataclass(frozen=True)
class Cycle:
    """Queues each of which waits for the next (the last for the first), and the flows that tie them."""

    queues: tuple[Queue, ...]
    flows: tuple[tuple[str, str], ...]  # (source host, destination host) of the paths behind its edges

    def __str__(self) -> str:
        return " -> ".join(str(q) for q in (*self.queues, self.queues[0]))


def dependencies(graph: RoutingGraph, tables: Tables, flows: Iterable[tuple[str, int, str, int]]) -> nx.DiGraph:
    """The buffer dependency graph of `flows` (source host, its NIC, destination host, its NIC): an edge from
    X's queue toward Y to Y's queue toward Z for every path through X, Y, Z, with the flows behind it. A flow
    between NICs of two rails (a ring over every NIC) leaves its host by the destination rail's NIC, as the
    hosts' routes send it; one the failures cut off sends nothing and ties no queue."""
    deps = nx.DiGraph()
    for src, _src_nic, dst, dst_nic in flows:
        ip = nic_address(graph.topo.nodes[dst], dst_nic).ip
        try:
            paths = trace(graph, tables, src, ip)
        except LookupError:  # cut off (or black-holed) by the failures: it sends nothing along a path
            continue
        for path in paths:
            for a, b, c in zip(path, path[1:], path[2:], strict=False):
                edge = (Queue(a, b), Queue(b, c))
                if not deps.has_edge(*edge):
                    deps.add_edge(*edge, flows=set())
                deps.edges[edge]["flows"].add((src, dst))
    return deps


def cycles(deps: nx.DiGraph, limit: int = 20) -> list[Cycle]:
    """Up to `limit` elementary cycles of the dependency graph, shortest first (a deadlock needs every queue of
    one paused at once: the short ones are the likely ones)."""
    found = []
    for queues in nx.simple_cycles(deps, length_bound=None):
        edges = zip(queues, [*queues[1:], queues[0]], strict=True)
        tied = sorted({f for e in edges for f in deps.edges[e]["flows"]})
        start = queues.index(min(queues))  # one rotation per cycle: reports and tests compare them
        found.append(Cycle(tuple(queues[start:] + queues[:start]), tuple(tied)))
        if len(found) >= 10 * limit:
            break
    return sorted(found, key=lambda c: (len(c.queues), c.queues))[:limit]
