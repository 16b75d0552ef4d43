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


def test_a_key_under_the_home_folder_is_found_as_written(cluster_dir, monkeypatch):
    """`key: ~/.ssh/x`, as the README's walk-through writes it (HOME is root's under sudo)."""
    home = cluster_dir / "home"
    (home / ".ssh").mkdir(parents=True)
    (cluster_dir / "id_test").rename(home / ".ssh" / "hpnlab")
    monkeypatch.setenv("HOME", str(home))
    (cluster_dir / "cluster.yaml").write_text(GOOD.replace("key: id_test", "key: ~/.ssh/hpnlab"))
    spec = load_cluster(cluster_dir / "cluster.yaml")
    assert {s.key for s in spec.servers} == {str((home / ".ssh" / "hpnlab").resolve())}


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


def test_ssh_to_a_server_uses_its_key_port_and_the_run_s_one_connection(cluster_dir):
    from testbed.cluster.servers import agent_argv

    (cluster_dir / "cluster.yaml").write_text(GOOD)
    s2 = load_cluster(cluster_dir / "cluster.yaml").servers[1]
    argv = agent_argv(s2, "run1-s2", "/opt/hpnlab", "/tmp/x/ssh-s2")
    opts = dict(zip(argv[1:-2:2], argv[2:-2:2], strict=True))
    assert argv[0] == "ssh" and argv[-2] == "root@127.0.0.1" and opts["-p"] == "2202" and opts["-i"] == s2.key
    assert {"ControlPath=/tmp/x/ssh-s2", "ControlMaster=yes", "ControlPersist=no", "BatchMode=yes"} <= set(
        v for k, v in zip(argv[1:-2:2], argv[2:-2:2], strict=True) if k == "-o")
    assert argv[-1] == "cd /opt/hpnlab && exec sudo -E .venv/bin/python -m testbed.cluster.agent run1-s2"
    # the node shells ride on that connection and never open their own master
    assert "ControlMaster=no" in s2.ssh_options("/tmp/x/ssh-s2") and "ControlPath" not in " ".join(s2.ssh_options())


def test_what_several_servers_do_not_do_yet_is_refused_before_anything_starts(cluster_dir):
    from testbed.cluster.servers import refuse_on_servers

    (cluster_dir / "cluster.yaml").write_text(GOOD)
    spec = load_cluster(cluster_dir / "cluster.yaml")
    with pytest.raises(InputError) as exc:
        refuse_on_servers(spec, delay_ms=2.0)
    assert exc.value.field == "delay" and "several servers" in exc.value.line()
    refuse_on_servers(spec.model_copy(update={"servers": spec.servers[:1]}), delay_ms=2.0)  # one server
    refuse_on_servers(spec, delay_ms=None)  # shaping, with or without PFC, spreads
    assert spec.mtu == 1450


def _doctor_out(caps: dict, first: float, last: float, tail: str = "tunnel-ok\ntunnel-ip-ok") -> str:
    import json

    from testbed.cluster.doctor import SEPARATOR

    return f"{first}\n{json.dumps(caps, indent=1)}\n{SEPARATOR}\n{tail}\n{last}\n"


GOOD_CAPS = {"root": True, "mininet_version": "2.3.0", "ovs_running": True, "ovs_version": "3.5.0",
             "datapath": "kernel"}


@pytest.mark.parametrize("caps, first, last, tail, failing", [
    (GOOD_CAPS, 100.2, 101.0, "tunnel-ok\ntunnel-ip-ok", set()),
    (GOOD_CAPS, 98.0, 101.0, "tunnel-ok\ntunnel-ip-ok", {"clock"}),        # 2 s behind
    (GOOD_CAPS, 100.2, 104.0, "tunnel-ok\ntunnel-ip-ok", {"clock"}),       # 2 s ahead
    (GOOD_CAPS | {"ovs_running": False}, 100.2, 101.0, "tunnel-ok\ntunnel-ip-ok", {"Open vSwitch"}),
    (GOOD_CAPS | {"mininet_version": None}, 100.2, 101.0, "tunnel-ok\ntunnel-ip-ok", {"Mininet"}),
    (GOOD_CAPS, 100.2, 101.0, "RTNETLINK answers: Not supported\ntunnel-ip-ok", {"vxlan tunnels"}),
    (GOOD_CAPS, 100.2, 101.0, "tunnel-ok", {"tunnel_ip"}),
])
def test_doctor_names_what_a_server_lacks(cluster_dir, caps, first, last, tail, failing):
    from testbed.cluster.doctor import findings

    (cluster_dir / "cluster.yaml").write_text(GOOD)
    s2 = load_cluster(cluster_dir / "cluster.yaml").servers[1]
    # asked at t=100 here, answered at t=102: its clock read 100.2 first and `last` at the end
    rep = findings(s2, "vxlan", 0, _doctor_out(caps, first, last, tail), 100.0, 102.0, local=False)
    assert {what for what, ok, _ in rep.checks if not ok} == failing, rep.checks
    assert rep.ok is (not failing)


def test_doctor_says_which_server_it_cannot_reach_or_lacks_hpnlab(cluster_dir):
    from testbed.cluster.doctor import findings

    (cluster_dir / "cluster.yaml").write_text(GOOD)
    s2 = load_cluster(cluster_dir / "cluster.yaml").servers[1]
    refused = "ssh: connect to host 127.0.0.1 port 2202: Connection refused"
    rep = findings(s2, "vxlan", 255, "", 0, 1, False, err=refused)
    assert not rep.ok and rep.checks == [("ssh", False, "ssh: connect to host 127.0.0.1 port 2202: Connection "
                                                        "refused")]
    rep = findings(s2, "vxlan", 1, "100.5\n--- hpnlab doctor ---\n100.6", 100, 101, False,
                   err="sh: 1: cd: can't cd to /opt/hpnlab")
    assert not rep.ok and rep.checks[-1][0] == "hpnlab" and "same path" in rep.checks[-1][2]


def test_the_controller_takes_openflow_on_the_first_server_s_cluster_address(cluster_dir, tmp_path):
    """...and admits each switch of another server only from that server's address."""
    from testbed.cluster.servers import ClusterRun
    from testbed.system.ownership import Ownership
    from testbed.system.site import LocalSite

    (cluster_dir / "cluster.yaml").write_text(GOOD)
    spec = load_cluster(cluster_dir / "cluster.yaml")
    topo = build("hpn")
    placement = place(topo, spec.names)
    run = ClusterRun(spec, placement, LocalSite(Ownership("unit"), tmp_path), "/opt/hpnlab")
    where = run.controller_listen([s.name for s in topo.switches])
    assert where["of_host"] == "192.168.7.1"
    assert set(where["remote_switches"]) == {s.name for s in topo.switches if placement.server_of[s.name] == "s2"}
    assert set(where["remote_switches"].values()) == {"192.168.7.2"} and len(where["remote_switches"]) == 8


def test_a_run_records_each_server_s_versions_and_the_placement(cluster_dir, tmp_path):
    from testbed.cluster.servers import ClusterRun
    from testbed.experiment.results import cluster_line
    from testbed.system.ownership import Ownership
    from testbed.system.site import LocalSite

    (cluster_dir / "cluster.yaml").write_text(GOOD)
    spec = load_cluster(cluster_dir / "cluster.yaml")
    topo = build("hpn")
    run = ClusterRun(spec, place(topo, spec.names), LocalSite(Ownership("unit"), tmp_path), "/opt/hpnlab")
    # what start() learns from this machine and from each agent's hello
    run.capabilities = {"s1": {"datapath": "user"}, "s2": {"datapath": "kernel"}}
    run.versions = {"s1": {"kernel": "6.1.0", "git": "abc1234"}, "s2": {"kernel": "7.2.13", "git": "abc1234"}}
    rec = run.record()
    assert rec["servers"]["s2"] == {"host": spec.servers[1].host, "tunnel_ip": "192.168.7.2", "datapath": "kernel",
                                    "versions": {"kernel": "7.2.13", "git": "abc1234"}}
    placed = rec["placement"]
    assert sorted(n for nodes in placed["servers"].values() for n in nodes) == sorted(topo.nodes)
    assert len(placed["crossing_links"]) == 16 and set(placed["crossing_gbps"]) == {"s1", "s2"}
    assert cluster_line(rec) == ("Spread over 2 servers: s1 (12 nodes, user datapath, kernel 6.1.0, hpnlab abc1234), "
                                 "s2 (12 nodes, kernel datapath, kernel 7.2.13, hpnlab abc1234); 16 links cross "
                                 f"between them over {spec.tunnel} tunnels")


def test_remote_lines_keep_every_word_one_word():
    """ssh joins its arguments into one line the remote root shell parses again: a folder or run id with a space
    or ';' must not become two commands."""
    import shlex

    from testbed.cluster.servers import remote_line

    line = remote_line("/srv/hp nlab;touch x", ["sudo", "-E", ".venv/bin/hpnlab", "clean", "--force"])
    assert shlex.split(line) == ["cd", "/srv/hp nlab;touch x", "&&", "sudo", "-E", ".venv/bin/hpnlab", "clean",
                                 "--force"]


def test_a_site_runs_a_script_longer_than_one_argument_may_be(tmp_path):
    """The offloads script of a 128-host HPN is past the kernel's 128 KiB cap on one argument: `sh -c` refused it
    (E2BIG) before a 128-host network could start."""
    from testbed.system.ownership import Ownership
    from testbed.system.site import LocalSite

    lines = [f"echo line{i} >/dev/null" for i in range(12_000)] + ["echo done"]
    script = "\n".join(lines)
    assert len(script) > 128 * 1024
    rc, out = LocalSite(Ownership("unit"), tmp_path).sh(script)
    assert (rc, out) == (0, "done\n")
