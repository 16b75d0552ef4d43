from __future__ import annotations

import itertools

import pytest

from controllers.routing import RoutingGraph, compute_tables, trace
from topos import build
from topos.addressing import nic_address


def all_pairs_paths(graph, tables):
    out = {}
    for src, dst in itertools.permutations(graph.topo.hosts, 2):
        for nic in range(dst.nics):
            ip = nic_address(dst, nic).ip
            out[src.name, ip] = trace(graph, tables, src.name, ip)
    return out


@pytest.mark.parametrize("name,params", [("hpn", {}), ("hpn", {"preset": "mini-core"}), ("dcn_plus", {}),
                                         ("fat_tree", {"k": 4}), ("spine_leaf", {}), ("rail_optimized", {})])
def test_every_pair_reachable_without_loops(name, params):
    graph = RoutingGraph(build(name, **params))
    paths = all_pairs_paths(graph, compute_tables(graph))
    assert all(paths.values())


def test_hpn_path_counts():
    graph = RoutingGraph(build("hpn"))
    t = compute_tables(graph)
    h0, h1, h4 = (graph.topo.nodes[h] for h in ("h0", "h1", "h4"))
    # Same segment: one hop through ToR-A or ToR-B of the rail.
    assert len(trace(graph, t, "h0", nic_address(h1, 0).ip)) == 2
    # Across segments: 2 planes x 4 aggregation switches.
    cross = trace(graph, t, "h0", nic_address(h4, 1).ip)
    assert len(cross) == 8
    planes = {graph.topo.nodes[p[1]].plane for p in cross}
    assert planes == {0, 1}
    for p in cross:  # a path never changes plane
        assert len({graph.topo.nodes[s].plane for s in p}) == 1


def test_fat_tree_inter_pod_paths_are_k2_over_4():
    graph = RoutingGraph(build("fat_tree", k=4))
    t = compute_tables(graph)
    far = next(h for h in graph.topo.hosts if h.pod == 3)
    assert len(trace(graph, t, "h0", nic_address(far, 0).ip)) == 4


def test_shortest_mode_has_one_path():
    graph = RoutingGraph(build("hpn"))
    t = compute_tables(graph, mode="shortest")
    paths = all_pairs_paths(graph, t)
    assert {len(p) for p in paths.values()} == {1}


def test_host_port_down_moves_traffic_to_other_plane():
    graph = RoutingGraph(build("hpn"))
    dst = graph.topo.nodes["h5"]
    ip = nic_address(dst, 0).ip
    t = compute_tables(graph, down={"h5:nic0:p0"})
    # Plane 0 has no route to h5 nic0 any more; every other host sends on its port 1 (plane 1).
    assert all(ip not in t.switch[s.name] for s in graph.topo.switches if s.plane == 0)
    for h in graph.topo.hosts:
        if h.name != "h5":
            assert t.host[h.name, 0][ip] == (1,)
    # h5 itself only has port 1 on NIC 0 and still reaches everyone.
    assert t.host_live["h5", 0] == (1,)
    paths = all_pairs_paths(graph, t)
    assert all(paths.values())
    assert all(graph.topo.nodes[p[0]].plane == 1 for p in paths["h0", ip])


def test_single_homed_host_is_cut_off():
    graph = RoutingGraph(build("rail_optimized"))
    t = compute_tables(graph, down={"h5:nic0:p0"})
    ip = nic_address(graph.topo.nodes["h5"], 0).ip
    assert t.host["h0", 0][ip] == ()
    with pytest.raises(LookupError):
        trace(graph, t, "h0", ip)


def test_uplink_down_shrinks_ecmp_set():
    graph = RoutingGraph(build("hpn"))
    up = next(l for l in graph.topo.links if l.kind == "tor-agg" and l.a == "tor-p0-s0-r0-a")
    t = compute_tables(graph, down={up.name})
    ip = nic_address(graph.topo.nodes["h4"], 0).ip
    assert len(t.switch["tor-p0-s0-r0-a"][ip]) == 3
    assert up.a_port not in t.switch["tor-p0-s0-r0-a"][ip]
