"""Real Mininet + OVS: all-pairs reachability and dual-ToR failover."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from testbed.net.naming import host_intfs, switch_intfs
from testbed.net.network import Network
from topos import build
from topos.addressing import nic_address


def route_dev(net, src: str, ip: str) -> str:
    out = net.node(src).cmd(f"ip -o route get {ip}")
    return out.split(" dev ")[1].split()[0]


def test_hpn_all_pairs_and_host_port_failover(no_leftovers):
    topo = build("hpn")  # 2 segments x 4 hosts x 2 rails, 4 aggregation switches per plane
    with Network(topo) as net:
        r = net.pingall()
        assert (r.sent, r.received) == (8 * 7 * 2, 8 * 7 * 2), r.failures

        target = nic_address(topo.nodes["h5"], 0).ip
        net.set_link("h5:nic0:p0", up=False)
        # Every other host now sends to h5's rail-0 address through its own port 1 (plane 1) ...
        devs = {h.name: route_dev(net, h.name, target) for h in topo.hosts if h.name != "h5"}
        assert devs == {h: f"{topo.nodes[h].short}-eth1" for h in devs}
        # ... and the host with the failed port still reaches every other host, and is reached.
        r = net.pingall()
        assert r.received == r.sent == 112, r.failures
        out = net.node("h5").cmd("ip -o link show h5-eth0")
        assert "NO-CARRIER" in out or "state DOWN" in out

        net.set_link("h5:nic0:p0", up=True)
        assert route_dev(net, "h0", target) in ("h0-eth0", "h0-eth1")
        assert all(nic_address(topo.nodes["h5"], 0).ip not in {ip for ip, _ in exc}
                   for exc in net.routes.host_exceptions.values())
        assert net.pingall().received == 112


def test_dcn_plus_baseline_all_pairs_and_node_shells_shared_by_threads(no_leftovers):
    with Network(build("dcn_plus")) as net:
        r = net.pingall()
        assert (r.sent, r.received) == (112, 112), r.failures

        # The failure injector, the replay and the CLI each use node shells from their own thread.
        # Mininet's shell takes one command at a time (unguarded, this raised a bare AssertionError).
        def echo(node: str, tag: str) -> list[str]:
            return [net.node(node).cmd(f"sleep 0.005; echo {tag}{i}").strip() for i in range(25)]

        with ThreadPoolExecutor(4) as pool:
            runs = {(n, t): pool.submit(echo, n, t) for n in ("h0", net.topo.switches[0].name) for t in "ab"}
        for (node, tag), fut in runs.items():
            assert fut.result() == [f"{tag}{i}" for i in range(25)], node


def test_single_homed_failure_cuts_the_host_off(no_leftovers):
    topo = build("rail_optimized")
    with Network(topo) as net:
        net.set_link("h5:nic0:p0", up=False)
        r = net.pingall()
        # h5's rail-0 address is unreachable from 7 hosts and h5 reaches nobody on rail 0: 14 failures.
        assert len(r.failures) == 14
        assert r.received == r.sent - 14


def test_network_start_failure_leaves_nothing(no_leftovers, monkeypatch):
    topo = build("hpn")

    def boom(self):
        raise RuntimeError("injected failure after the switches were created")

    from testbed.net.hosts import Hosts

    monkeypatch.setattr(Hosts, "configure", lambda self, static_neighbours: boom(self))
    with pytest.raises(RuntimeError, match="injected"):
        with Network(topo):
            pass


@pytest.mark.slow
def test_64_hosts_ping_all_pairs(no_leftovers):
    """No host command grows with the fabric: 64 hosts x 126 NIC addresses, every one answers."""
    topo = build("hpn", segments_per_pod=8, hosts_per_segment=8)
    assert len(topo.hosts) == 64 and len(topo.switches) == 40
    with Network(topo) as net:
        r = net.pingall()
    assert (r.sent, r.received) == (64 * 63 * 2, 64 * 63 * 2), r.failures[:5]


def _gro(out: str) -> list[str]:
    return [line.split(":")[1].split()[0] for line in out.splitlines() if line.startswith("generic-receive-offload:")]


def test_hosts_and_switches_take_a_flows_frames_in_order_and_switches_unmerged(no_leftovers):
    """GRO on every port (testbed/net/links.py): a veth in NAPI mode takes frames through one ring in the order
    they were sent (per CPU backlogs reordered flows: 5-38 segments in each quiet all-reduce, 0 with it); on a
    switch port GRO merges nothing (gro_max_size 1), so userspace OVS gets single frames."""
    topo = build("hpn", hosts_per_segment=2)
    with Network(topo) as net:
        switch_side = [i for s in topo.switches for i in switch_intfs(topo, s.name)]
        out = subprocess.run(["sh", "-c", "; ".join(f"ethtool -k {i}" for i in switch_side)], capture_output=True,
                             text=True).stdout
        assert _gro(out) == ["on"] * len(switch_side), out[-500:]
        out = subprocess.run(["sh", "-c", "; ".join(f"ip -d link show {i}" for i in switch_side)], capture_output=True,
                             text=True).stdout
        assert re.findall(r" gro_max_size (\d+)", out) == ["1"] * len(switch_side), out[-500:]
        for h in topo.hosts:
            host_side = list(host_intfs(topo, h.name).values())
            out = net.node(h.name).cmd(" ; ".join(f"ethtool -k {i}" for i in host_side))
            assert _gro(out) == ["on"] * len(host_side), (h.name, out[-500:])
            tso = [line for line in out.splitlines() if line.startswith("tcp-segmentation-offload:")]
            assert tso and all(line.split()[1] == "off" for line in tso), tso
