from __future__ import annotations

import json

import pytest

from topos import BUILDERS, Topology, build
from topos.addressing import all_addresses, nic_ip


@pytest.mark.parametrize("name", list(BUILDERS))
def test_json_round_trip(name):
    topo = build(name)
    again = Topology.from_json(topo.to_json())
    assert again.nodes == topo.nodes
    assert again.links == topo.links
    assert again.figures == json.loads(json.dumps(topo.figures))
    d = json.loads(topo.to_json())
    assert all("dpid" in n for n in d["nodes"] if n["role"] != "host")


def test_networkx_keeps_parallel_links():
    topo = build("hpn", tor_uplinks=8)  # two parallel links from each ToR to each aggregation switch
    g = topo.to_networkx()
    assert g.number_of_nodes() == len(topo.nodes)
    assert g.number_of_edges() == len(topo.links) == 32 + 8 * 8
    tor, agg = "tor-p0-s0-r0-a", "agg-p0-pl0-0"
    assert g.number_of_edges(tor, agg) == 2
    assert g.nodes[tor]["plane"] == 0 and g.nodes[tor]["rail"] == 0


def test_dpids_unique_and_stable():
    a, b = build("hpn", preset="mini-core"), build("hpn", preset="mini-core")
    dpids = [s.dpid for s in a.switches]
    assert len(set(dpids)) == len(dpids)
    assert dpids == [s.dpid for s in b.switches]
    assert a.nodes["tor-p0-s0-r0-a"].dpid == (1 << 40) | 1


def test_address_plan_distinct_and_rail_subnets():
    topo = build("hpn", hosts_per_segment=150, segments_per_pod=2)  # 300 hosts: crosses the 200-per-octet step
    addrs = all_addresses(topo)
    assert len({a.ip for a in addrs}) == len(addrs) == 600
    assert len({a.mac for a in addrs}) == len(addrs)
    assert nic_ip(0, 0) == "10.0.0.1" and nic_ip(199, 1) == "10.1.0.200" and nic_ip(200, 1) == "10.1.1.1"
    assert all(a.ip.startswith(f"10.{a.nic}.") for a in addrs)
