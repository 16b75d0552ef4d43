from __future__ import annotations

import pytest

from controllers.precise import FlowSpec, assign, candidate_paths
from controllers.routing import RoutingGraph, compute_tables
from controllers.state import ControllerState
from topos import build


def cross_segment_flows(n):
    # h0..h3 in segment 0 to h4..h7 in segment 1, rail 0 (10.0.0.5 .. 10.0.0.8)
    return [FlowSpec(f"h{i % 4}", f"10.0.0.{5 + i % 4}", "udp", 5000 + i, 7000) for i in range(n)]


def uplinks(a, graph):
    return [next(h for h in p.hops if graph.topo.nodes[h[0]].role == "tor") for p in a.paths.values()]


@pytest.mark.parametrize("n", [1, 4, 8])
def test_flows_get_disjoint_uplinks_when_enough_exist(n):
    graph = RoutingGraph(build("hpn"))
    a = assign(graph, compute_tables(graph), cross_segment_flows(n))
    ups = uplinks(a, graph)
    assert len(ups) == n and len(set(ups)) == n
    assert a.shared_links() == 0  # no link, host ports included, carries two flows


def test_more_flows_than_paths_spread_evenly():
    graph = RoutingGraph(build("hpn"))
    a = assign(graph, compute_tables(graph), cross_segment_flows(16))  # 8 uplinks for 16 flows
    ups = uplinks(a, graph)
    assert {ups.count(u) for u in set(ups)} == {2}
    assert max(a.load.values()) == 2  # every link, host ports included, carries exactly 2


def test_candidate_paths_cover_both_planes():
    graph = RoutingGraph(build("hpn"))
    paths = candidate_paths(graph, compute_tables(graph), "h0", "10.0.0.5")
    assert len(paths) == 8 and {p.host_port for p in paths} == {0, 1}


def test_state_moves_only_broken_flows_and_logs():
    st = ControllerState(build("hpn"), "precise")
    for s in st.topo.switches:
        st.switch_connected(s.name)
    st.declare(cross_segment_flows(4))
    before = dict(st.assignment.paths)
    victim_sw, victim_port = before[cross_segment_flows(4)[0].key].hops[0]
    up = st.link_event(victim_sw, victim_port, up=False)
    moved = {r.flow.key for r in up.precise_add}
    assert moved == {cross_segment_flows(4)[0].key}
    assert {r.flow.key for r in up.precise_del} == moved
    new = st.assignment.paths[cross_segment_flows(4)[0].key]
    assert (victim_sw, victim_port) not in new.hops
    ev = st.events[-1]
    assert ev["event"] == "link-down" and ev["flows_moved"] == 1 and ev["rules_changed"] > 0
    # A late "up" from the far end does not revive a link whose near end is still down.
    link = st.port_link[victim_sw, victim_port]
    far = (link.b, link.b_port) if link.a == victim_sw else (link.a, link.a_port)
    st.link_event(*far, up=False)
    assert st.link_event(*far, up=True) is None and link.name in st.down
    st.link_event(victim_sw, victim_port, up=True)
    assert link.name not in st.down and st.events[-1]["event"] == "link-up"


def test_state_rejects_bad_declarations():
    st = ControllerState(build("hpn"), "precise")
    with pytest.raises(ValueError, match="src="):
        st.declare([FlowSpec("t0", "10.0.0.5")])
    with pytest.raises(ValueError, match="dst="):
        st.declare([FlowSpec("h0", "192.0.2.1")])
    with pytest.raises(ValueError, match="proto="):
        st.declare([FlowSpec("h0", "10.0.0.5", "sctp")])
    with pytest.raises(ValueError, match="mode="):
        ControllerState(build("hpn"), "ecmp").declare(cross_segment_flows(1))
    with pytest.raises(KeyError):
        st.withdraw(["nope"])


def test_withdraw_frees_links():
    st = ControllerState(build("hpn"), "precise")
    st.declare(cross_segment_flows(4))
    assert st.withdraw(None).precise_del
    assert st.flows == {} and st.assignment.load == {}


def test_a_flow_named_twice_in_one_request_is_one_flow():
    st = ControllerState(build("hpn"), "precise")
    f = cross_segment_flows(1)[0]
    st.declare([f, f])
    assert list(st.flows) == [f.key] and max(st.assignment.load.values()) == 1
    assert st.withdraw([f.key, f.key]).precise_del
    assert st.flows == {} and st.assignment.paths == {} and st.assignment.load == {}
    st.declare(cross_segment_flows(2))  # the state is whole: declaring again works
    assert len(st.assignment.paths) == 2


def test_fat_tree_flows_disjoint_up_to_the_core():
    graph = RoutingGraph(build("fat_tree", k=4))
    pod1 = [h for h in graph.topo.hosts if h.pod == 1]
    flows = [FlowSpec(f"h{i}", f"10.0.0.{pod1[i].index + 1}", "udp", 6000 + i, 7000) for i in range(4)]
    a = assign(graph, compute_tables(graph), flows)
    assert len(a.paths) == 4 and a.shared_links() == 0
    cores = {h[0] for p in a.paths.values() for h in p.hops if graph.topo.nodes[h[0]].role == "core"}
    assert len(cores) == 4  # (k/2)^2 cores, one per flow


def test_lldp_wiring_check_reports_a_swapped_cable():
    from controllers.wiring import expected_neighbours, wiring_mismatches

    topo = build("hpn")
    seen = dict(expected_neighbours(topo))
    assert wiring_mismatches(topo, seen, set()) == []
    # Two uplinks of one ToR plugged into each other's aggregation switch ports.
    a, b = ("tor-p0-s0-r0-a", 5), ("tor-p0-s0-r0-a", 6)
    seen[a], seen[b] = seen[b], seen[a]
    bad = wiring_mismatches(topo, seen, set())
    assert [m["port"] for m in bad] == ["tor-p0-s0-r0-a:5", "tor-p0-s0-r0-a:6"]
    assert bad[0]["expected"] == "agg-p0-pl0-0:1" and bad[0]["seen"] == "agg-p0-pl0-1:1"
    # A link that is down is not a wiring fault.
    del seen[a]
    link = topo.find_link("tor-p0-s0-r0-a:5-agg-p0-pl0-0:1")
    assert [m["port"] for m in wiring_mismatches(topo, seen, {link.name})] == ["tor-p0-s0-r0-a:6"]
