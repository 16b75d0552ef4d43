from __future__ import annotations

from controllers.routing import RoutingGraph, compute_tables
from controllers.ruleset import RuleSet
from testbed.net.static_routes import bundle_lines, host_route_script, pin_rules
from topos import build


def test_ruleset_reuses_groups_and_reports_only_changes():
    r = RuleSet()
    c = r.update({"10.0.0.1": (1,), "10.0.0.2": (5, 6), "10.0.0.3": (5, 6)})
    assert c.new_groups == {1: (5, 6)}
    assert c.rules == {"10.0.0.1": ("output", 1), "10.0.0.2": ("group", 1), "10.0.0.3": ("group", 1)}
    lines = bundle_lines(c)
    assert lines[0] == "group add group_id=1,type=select,bucket=watch_port:5,output:5,bucket=watch_port:6,output:6"
    assert "flow add priority=100,ip,nw_dst=10.0.0.1,actions=output:1" in lines
    # Same table again: nothing to do.
    assert r.update({"10.0.0.1": (1,), "10.0.0.2": (5, 6), "10.0.0.3": (5, 6)}).empty
    # One destination loses a port, another moves to a new set, one disappears.
    c = r.update({"10.0.0.2": (5,), "10.0.0.3": (6, 7)})
    assert c.new_groups == {2: (6, 7)}
    assert c.rules == {"10.0.0.2": ("output", 5), "10.0.0.3": ("group", 2)}
    assert c.removed == ["10.0.0.1"] and c.stale_groups == [1]
    assert bundle_lines(c) == ["group add group_id=2,type=select,bucket=watch_port:6,output:6,"
                               "bucket=watch_port:7,output:7",
                               "flow add priority=100,ip,nw_dst=10.0.0.2,actions=output:5",
                               "flow add priority=100,ip,nw_dst=10.0.0.3,actions=group:2",
                               "flow delete_strict priority=100,ip,nw_dst=10.0.0.1", "group delete group_id=1"]
    assert r.groups == {(6, 7): 2}


def test_host_routes_add_and_remove_exceptions():
    graph = RoutingGraph(build("hpn"))
    ports = {0: [0, 1], 1: [2, 3]}
    t = compute_tables(graph)
    lines, exc = host_route_script("h0", "h0", ports, t, set())
    assert lines == ["route replace 10.0.0.0/16 nexthop dev h0-eth0 nexthop dev h0-eth1",
                     "route replace 10.0.0.0/16 dev h0-eth0 table 200",
                     "route replace 10.0.0.0/16 dev h0-eth1 table 201",
                     "route replace 10.1.0.0/16 nexthop dev h0-eth2 nexthop dev h0-eth3",
                     "route replace 10.1.0.0/16 dev h0-eth2 table 200",
                     "route replace 10.1.0.0/16 dev h0-eth3 table 201"]
    assert exc == set()
    t = compute_tables(graph, down={"h5:nic0:p0", "h5:nic1:p1"})
    lines, exc = host_route_script("h0", "h0", ports, t, exc)
    assert "route replace 10.0.0.6/32 nexthop dev h0-eth1" in lines
    assert "route replace 10.1.0.6/32 nexthop dev h0-eth2" in lines  # rail 1 keeps only its port 0
    # a source port pinned to the plane that lost h5 falls back to the main table
    assert "route replace throw 10.0.0.6/32 table 200" in lines and "route replace throw 10.1.0.6/32 table 201" in lines
    assert exc == {("10.0.0.6", None), ("10.1.0.6", None), ("10.0.0.6", 200), ("10.1.0.6", 201)}
    t = compute_tables(graph)
    lines, exc = host_route_script("h0", "h0", ports, t, exc)
    assert lines[-4:] == ["route del 10.0.0.6/32", "route del 10.1.0.6/32", "route del 10.0.0.6/32 table 200",
                          "route del 10.1.0.6/32 table 201"] and exc == set()


def test_shortest_mode_pins_every_destination_to_one_port():
    graph = RoutingGraph(build("hpn"))
    lines, exc = host_route_script("h0", "h0", {0: [0, 1], 1: [2, 3]}, compute_tables(graph, mode="shortest"), set())
    assert len({ip for ip, table in exc if table is None}) == 14  # 7 other hosts x 2 rails
    assert "route replace 10.1.0.5/32 nexthop dev h0-eth2" in lines


def test_asic_bundle_hashes_with_the_switch_basis_into_table_1():
    r = RuleSet(basis=99)
    c = r.update({"10.0.0.3": (1,), "10.1.0.3": (5, 6)})
    assert bundle_lines(c) == [
        "flow add table=1,priority=100,reg1=1,reg0=0,actions=output:5",
        "flow add table=1,priority=100,reg1=1,reg0=1,actions=output:6",
        "flow add priority=100,ip,nw_dst=10.0.0.3,actions=output:1",
        "flow add priority=100,ip,nw_dst=10.1.0.3,actions=load:1->NXM_NX_REG1[],"
        "multipath(symmetric_l3l4+udp,99,modulo_n,2,0,NXM_NX_REG0[0..15]),resubmit(,1)"]
    c = r.update({"10.0.0.3": (1,), "10.1.0.3": (6,)})  # port 5 died: the set goes
    assert bundle_lines(c) == ["flow add priority=100,ip,nw_dst=10.1.0.3,actions=output:6",
                               "flow delete table=1,reg1=1"]


def test_pinned_source_ports_are_tcp_ranges_per_nic_port():
    assert pin_rules(2) == ["rule add ipproto tcp sport 40000-49999 lookup 200 priority 500",
                            "rule add ipproto tcp sport 50000-59999 lookup 201 priority 500"]
    assert pin_rules(1) == pin_rules(2)[:1]  # single-homed: nothing to pin to a second port
