"""cluster.yaml and where each node of a fabric runs when it is spread over servers (issue #18)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.cluster.placement import check_fits, place, segments
from testbed.cluster.spec import load_cluster
from topos import build
from topos.errors import InputError

GOOD = """
servers:
  - {name: s1, ssh: 127.0.0.1:2201, key: id_test, tunnel_ip: 192.168.7.1}
  - {name: s2, ssh: "127.0.0.1:2202", user: root, key: id_test, tunnel_ip: 192.168.7.2, tunnel_dev: ens4}
tunnel: vxlan
link_gbps: 0.5
"""


@pytest.fixture
def cluster_dir(tmp_path):
    key = tmp_path / "id_test"
    key.write_text("not a real key")
    os.chmod(key, 0o600)
    return tmp_path


def test_a_cluster_file_loads_with_its_key_resolved(cluster_dir):
    (cluster_dir / "cluster.yaml").write_text(GOOD)
    spec = load_cluster(cluster_dir / "cluster.yaml")
    assert spec.names == ["s1", "s2"] and spec.tunnel == "vxlan" and spec.link_gbps == 0.5
    s1, s2 = spec.servers
    assert (s1.host, s1.port, s1.user, str(s1.tunnel_ip)) == ("127.0.0.1", 2201, "root", "192.168.7.1")
    assert s2.tunnel_dev == "ens4" and s2.key == str((cluster_dir / "id_test").resolve())


@pytest.mark.parametrize("text, field, what", [
    (GOOD.replace("name: s2", "name: s1"), "servers[1].name", "servers[1].name='s1': given twice"),
    (GOOD.replace("192.168.7.2", "192.168.7.1"), "servers[1].tunnel_ip", "='192.168.7.1': given twice"),
    (GOOD.replace("tunnel: vxlan", "tunnel: gretap"), "tunnel", "input should be 'vxlan', 'gre' or 'ssh'"),
    (GOOD.replace("192.168.7.2", "192.168.7"), "servers.1.tunnel_ip", "ipv4"),
    (GOOD.replace("link_gbps: 0.5", "link_gbps: 0"), "link_gbps", "greater than 0"),
    (GOOD.replace("tunnel: vxlan", "tunnel: vxlan\nport: 3"), "port", "unknown parameter"),
    (GOOD.replace("key: id_test, tunnel_ip: 192.168.7.1", "key: nothere, tunnel_ip: 192.168.7.1"),
     "servers[0].key", "no such key file"),
    ("servers: []\n", "servers", "at least 1 item"),
])
def test_a_bad_cluster_file_is_one_line_naming_the_field(cluster_dir, text, field, what):
    (cluster_dir / "cluster.yaml").write_text(text)
    with pytest.raises(InputError) as exc:
        load_cluster(cluster_dir / "cluster.yaml")
    assert exc.value.field == field and what in exc.value.line().lower(), exc.value.line()
    assert "\n" not in exc.value.line()


def test_a_key_others_can_read_is_refused(cluster_dir):
    os.chmod(cluster_dir / "id_test", 0o644)
    (cluster_dir / "cluster.yaml").write_text(GOOD)
    with pytest.raises(InputError, match="chmod 600"):
        load_cluster(cluster_dir / "cluster.yaml")


def test_hpn_on_two_servers_keeps_segments_whole_and_splits_each_plane_s_aggregation():
    topo = build("hpn", segments_per_pod=4)  # 4 segments of 4 hosts and 4 ToRs; 4 aggregation switches per plane
    p = place(topo, ["s1", "s2"])
    for seg in segments(topo):
        assert len({p.server_of[n] for n in seg}) == 1  # a segment never spans servers
    assert Counter(p.server_of[h.name] for h in topo.hosts) == {"s1": 8, "s2": 8}
    for plane in (0, 1):
        aggs = [n.name for n in topo.by_role("agg") if n.plane == plane]
        assert Counter(p.server_of[a] for a in aggs) == {"s1": 2, "s2": 2}
    # only ToR-aggregation links cross: each ToR has 4 uplinks, one per aggregation switch of its plane, 2 remote
    assert {l.kind for l in p.crossing} == {"tor-agg"} and len(p.crossing) == 16 * 2
    assert p.crossing_gbps() == {"s1": 32 * 400.0, "s2": 32 * 400.0}  # balanced, each way


def test_one_server_holds_everything_and_nothing_crosses():
    topo = build("hpn")
    p = place(topo, ["only"])
    assert set(p.server_of.values()) == {"only"} and p.crossing == []


def test_three_tier_fabrics_spread_core_too():
    topo = build("fat_tree")  # k=4: 4 pods, 4 core switches
    p = place(topo, ["a", "b"])
    assert {l.kind for l in p.crossing} <= {"tor-agg", "agg-core"}
    assert all(p.server_of[l.a] == p.server_of[l.b] for l in topo.links if l.kind == "host-tor")
    loads = p.crossing_gbps()
    assert max(loads.values()) <= 1.5 * min(loads.values())


def test_crossing_bandwidth_above_the_servers_link_is_refused_with_the_numbers():
    p = place(build("hpn", segments_per_pod=4), ["s1", "s2"])
    check_fits(p, scale=20_000, link_gbps=1.0)  # 12,800 Gbit/s / 20,000 = 640 Mbit/s each way: fits 1 Gbit/s
    with pytest.raises(InputError) as exc:
        check_fits(p, scale=10_000, link_gbps=1.0)  # 1,280 Mbit/s
    line = exc.value.line()
    assert exc.value.field == "scale" and "1280.0 Mbit/s" in line and "1000.0 Mbit/s" in line
    assert "scale >= 12800" in line


@settings(max_examples=25, deadline=None)
@given(segs=st.integers(1, 6), hosts=st.integers(1, 4), n=st.integers(1, 4))
def test_any_hpn_on_any_number_of_servers_crosses_only_above_the_tors(segs, hosts, n):
    topo = build("hpn", segments_per_pod=segs, hosts_per_segment=hosts)
    servers = [f"s{i}" for i in range(n)]
    p = place(topo, servers)
    assert set(p.server_of) == set(topo.nodes)
    assert all(l.kind != "host-tor" for l in p.crossing)
    used = set(p.server_of[h.name] for h in topo.hosts)
    assert len(used) == min(n, segs)  # segments spread over as many servers as there are
