"""How many paths a precise-routing search covers per connection (HPN Table 1), from the topology engine.

    .venv/bin/python -m bench.path_search

Counts every shortest path (NIC port and each switch's next hop) between two
hosts in different segments (HPN) or pods (3-tier Clos), and how many of them
some source port reaches when every switch hashes with one seed (`asic`) or
its own (`asic-seeded`): host-side precise routing can only choose among those.
Writes its table into docs/benchmarks.md, between the bench:path_search markers.
"""

from __future__ import annotations

import time

from bench.tables import BENCHMARKS, replace_block, stamp, table
from controllers.hostpath import Connection, count_paths, sports_by_path
from controllers.routing import RoutingGraph, compute_tables
from topos import build
from topos.addressing import nic_address

SHAPES = [
    ("HPN pod (paper: 60 aggregation switches per plane)", "hpn",
     dict(segments_per_pod=2, hosts_per_segment=1, rails=1, aggs_per_plane=60, tor_uplinks=60)),
    ("3-tier Clos, 8 ToR uplinks, 64 aggregation uplinks", "dcn_plus",
     dict(pods=2, segments_per_pod=32, hosts_per_segment=1, rails=1, aggs_per_plane=8, tor_uplinks=8,
          core_oversubscription=1)),
    ("3-tier Clos, 16 ToR uplinks, 64 aggregation uplinks", "dcn_plus",
     dict(pods=2, segments_per_pod=32, hosts_per_segment=1, rails=1, aggs_per_plane=16, tor_uplinks=16,
          core_oversubscription=1)),
    ("HPN mini (the default emulated HPN)", "hpn", {}),
    ("DCN+ mini", "dcn_plus", dict(preset="mini")),
]


def main() -> None:
    rows = []
    for label, kind, params in SHAPES:
        topo = build(kind, **params)
        g = RoutingGraph(topo)
        t = compute_tables(g)
        hosts = [h.name for h in topo.hosts]
        dst = nic_address(topo.nodes[hosts[-1]], 0).ip
        c = Connection(hosts[0], dst, "tcp", 9000)
        t0 = time.monotonic()
        reached = {m: len(sports_by_path(g, t, m, c)) for m in ("asic", "asic-seeded")}
        rows.append([label, str(len(topo.switches)), f"{count_paths(g, t, hosts[0], dst):,}", f"{reached['asic']:,}",
                     f"{reached['asic-seeded']:,}", f"{time.monotonic() - t0:.1f}"])
    block = table(["fabric", "switches", "paths per connection", "reached by a source port: asic", "asic-seeded",
                   "search s"], rows)
    print(block)
    replace_block(BENCHMARKS, "path_search", block, stamp())


if __name__ == "__main__":
    main()
