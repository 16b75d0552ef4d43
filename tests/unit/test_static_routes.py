from __future__ import annotations

from controllers.routing import Fabric, compute_tables
from testbed.static_routes import SwitchRules, host_route_script
from topos import build


def test_switch_rules_groups_for_ecmp_and_stale_groups_removed():
    r = SwitchRules()
    groups, flows, stale = r.render({"10.0.0.1": (1,), "10.0.0.2": (5, 6), "10.0.0.3": (5, 6)})
    assert groups == ["group_id=1,type=select,bucket=output:5,bucket=output:6"]
    assert "priority=100,ip,nw_dst=10.0.0.1,actions=output:1" in flows
    assert sum("group:1" in f for f in flows) == 2
    assert stale == []
    groups, flows, stale = r.render({"10.0.0.2": (5,), "10.0.0.3": (6, 7)})
    assert groups == ["group_id=2,type=select,bucket=output:6,bucket=output:7"]
    assert stale == [1]
    assert r.groups == {(6, 7): 2}


def test_host_routes_add_and_remove_exceptions():
    fab = Fabric(build("hpn"))
    intfs = {(0, 0): "h0-eth0", (0, 1): "h0-eth1", (1, 0): "h0-eth2", (1, 1): "h0-eth3"}
    t = compute_tables(fab)
    lines, exc = host_route_script("h0", 2, intfs, t, set())
    assert lines == ["route replace 10.0.0.0/16 nexthop dev h0-eth0 nexthop dev h0-eth1",
                     "route replace 10.1.0.0/16 nexthop dev h0-eth2 nexthop dev h0-eth3"]
    assert exc == set()
    t = compute_tables(fab, down={"h5:nic0:p0"})
    lines, exc = host_route_script("h0", 2, intfs, t, exc)
    assert "route replace 10.0.0.6/32 nexthop dev h0-eth1" in lines
    assert exc == {"10.0.0.6"}
    t = compute_tables(fab)
    lines, exc = host_route_script("h0", 2, intfs, t, exc)
    assert lines[-1] == "route del 10.0.0.6/32" and exc == set()
