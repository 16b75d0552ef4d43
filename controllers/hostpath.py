"""HPN's host-side precise routing: the host picks a connection's source port, the switches only hash.

With the `asic` (or `asic-seeded`) hash model every switch's next hop is a known
function of the 5-tuple (controllers/hashing.py), so a host that knows the
fabric's routing tables can predict a connection's whole path from its source
port, and choose the source port that gives the path it wants. This is how HPN
places a job's connections on disjoint paths without any per-flow state in the
switches (the controller-placed `precise` mode, by contrast, installs an
exact-match rule per flow on every switch of its path, as Hedera-style schemes
do). On a dual-plane fabric only the source ToR hashes (the aggregation switch
has one way down to the destination's ToR in its plane), so a host searches
about `tor_uplinks` source ports per connection; in a 3-tier single-plane Clos
every tier hashes and the search covers the product of their fan-outs.

The NIC port (the plane) is chosen the same way: the address plan pins source
port ranges to NIC ports (topos/addressing.py, PINNED_SPORTS).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from topos.addressing import PINNED_SPORTS, nic_port_of

from .hashing import TCP, FiveTuple, bucket, seed
from .precise import Assignment, FlowSpec, Hop, Path, assign
from .routing import RoutingGraph, Tables


def predict(graph: RoutingGraph, tables: Tables, model: str, src: str, t: FiveTuple) -> Path | None:
    """The path the fabric gives this 5-tuple from host `src`; None when it is not determined by the hash
    (an unpinned source port, a pinned port that cannot reach the destination, or `ovs` select groups)."""
    dst = graph.by_ip[t.dst]
    nic_port = nic_port_of(t.sport) if t.proto == TCP else None  # the host pins TCP ports only
    reach = tables.host.get((src, dst.nic), {}).get(t.dst, ())
    first = [l for l in graph.attach[src, dst.nic] if l.nic_port == nic_port and l.a_port in reach]
    if not first:
        return None
    sw, hops = first[0].b, []
    while True:
        ports = tables.switch[sw].get(t.dst)
        if not ports:
            return None
        if len(ports) == 1:
            port = ports[0]
        else:
            basis = seed(model, sw)
            if basis is None:
                return None
            port = ports[bucket(t, len(ports), basis)]
        hops.append((sw, port))
        nxt = graph.peer[sw, port]
        if nxt not in graph.adj:
            return Path(first[0].a_port, tuple(hops))
        sw = nxt


@dataclass(frozen=True)
class Connection:
    src: str  # host
    dst: str  # destination NIC address
    proto: str = "tcp"
    dport: int = 0


def sports_by_path(graph: RoutingGraph, tables: Tables, model: str, c: Connection, start: int = 0,
                   per_path: int = 4) -> dict[Path, list[int]]:
    """Source ports (from `start` on in each NIC port's range, round it) grouped by the path the fabric
    gives them. The scan stops once every shortest path has `per_path` ports, or after 64 ports per path
    (or the whole range) without that: under `asic`, a fabric where two tiers hash (a 3-tier Clos) has
    paths no 5-tuple takes (both switches compute hash mod n from the same hash: polarization), and
    they stay out."""
    if c.proto != "tcp":
        raise ValueError(f"proto={c.proto!r}: hosts pin the NIC port of TCP connections only (use tcp)")
    nic = graph.by_ip[c.dst].nic
    src_ip = next(a.ip for a in graph.addresses if a.host == c.src and a.nic == nic)
    want = count_paths(graph, tables, c.src, c.dst)
    out: dict[Path, list[int]] = {}
    ranges = [r for port, r in sorted(PINNED_SPORTS.items())
              if any(l.nic_port == port for l in graph.attach[c.src, nic])]
    for i in range(min(64 * want, max(map(len, ranges)))):  # never a source port twice
        for r in ranges:
            sport = r[(start + i) % len(r)]
            p = predict(graph, tables, model, c.src, FiveTuple(src_ip, c.dst, TCP, sport, c.dport))
            if p is not None:
                out.setdefault(p, []).append(sport)
        if len(out) == want and min(map(len, out.values())) >= per_path:
            break
    return out


def choose_sport(graph: RoutingGraph, tables: Tables, model: str, c: Connection, want: Path,
                 taken: set[int], start: int = 0) -> int:
    """A free source port whose hashes at every switch give `want` (LookupError if no port reaches it)."""
    for sport in sports_by_path(graph, tables, model, c, start, per_path=len(taken) + 1).get(want, ()):
        if sport not in taken:
            return sport
    raise LookupError(f"no free source port of {c.src} takes {want} toward {c.dst} under {model} hashing")


@dataclass
class Placement:
    sports: list[int]  # per connection, in the order given
    paths: list[Path]
    assignment: Assignment  # the planned load per directed link
    candidates: int  # paths searched over all connections


def place(graph: RoutingGraph, tables: Tables, model: str, conns: Iterable[Connection],
          taken: Iterable[int] = (), start: int = 0, load: dict[Hop, int] | None = None) -> Placement:
    """Disjoint paths for a job's connections (the least-loaded greedy of controllers/precise.py over
    the paths some source port reaches, on top of `load`, the job's connections placed before), then
    for each a free source port that takes it there (searching from `start`: jobs side by side start
    apart)."""
    conns = list(conns)
    specs = [FlowSpec(c.src, c.dst, c.proto, i + 1, c.dport) for i, c in enumerate(conns)]  # keys unique per conn
    index: dict[Connection, dict[Path, list[int]]] = {}
    for c in conns:
        if c not in index:
            index[c] = sports_by_path(graph, tables, model, c, start)
    a = assign(graph, tables, specs, load, candidates=lambda f: sorted(index[conns[f.sport - 1]],
                                                                        key=lambda p: (p.host_port, p.hops)))
    used = set(taken)
    sports, paths = [], []
    for c, f in zip(conns, specs, strict=True):
        want = a.paths[f.key]
        free = [s for s in index[c][want] if s not in used]
        sport = free[0] if free else choose_sport(graph, tables, model, c, want, used, start)
        used.add(sport)
        sports.append(sport)
        paths.append(want)
    candidates = sum(len(index[c]) for c in conns)
    return Placement(sports, paths, a, candidates)


def count_paths(graph: RoutingGraph, tables: Tables, src: str, dst_ip: str) -> int:
    """How many shortest paths (NIC port and every switch's next hop) lead from `src` to `dst_ip`:
    the search space of a path choice (HPN Table 1)."""
    memo: dict[str, int] = {}

    def below(sw: str) -> int:
        if sw not in memo:
            memo[sw] = sum(1 if graph.peer[sw, p] not in graph.adj else below(graph.peer[sw, p])
                           for p in tables.switch[sw].get(dst_ip, ()))
        return memo[sw]

    dst = graph.by_ip[dst_ip]
    reach = tables.host.get((src, dst.nic), {}).get(dst_ip, ())
    return sum(below(l.b) for l in graph.attach[src, dst.nic] if l.a_port in reach)

