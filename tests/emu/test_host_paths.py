"""HPN's host-side precise routing on real switches: source ports the `asic` hash takes onto disjoint paths."""

from __future__ import annotations

import pytest

from testbed.experiment.measure import port_delta
from testbed.net.network import Network
from testbed.net.routes import OFCTL, run
from testbed.qos.spec import QosSpec
from topos import build
from topos.addressing import PINNED_SPORTS
from traffic.collectives import build_schedule
from traffic.replay import Replayer
from traffic.transports.tcp import TcpTransport

SCALE = 20_000
SIZE = 2_000_000


def rule_count(net: Network) -> int:
    return sum(len(run([*OFCTL, "dump-flows", sw.short]).stdout.splitlines()) - 1 for sw in net.topo.switches)


@pytest.mark.parametrize("routing", ["static", "controller"])
def test_source_ports_put_a_jobs_connections_on_disjoint_uplinks(no_leftovers, routing):
    """A ring whose every hop crosses segments (h0,h4,h1,h5,...): 16 connections over 8 ToR uplinks per
    direction. Every uplink carries exactly one connection, as the host planned, per OVS's counters;
    the switches gained no rule for it."""
    with Network(build("hpn"), routing=routing, mode="ecmp", hashing="asic", qos=QosSpec(scale=SCALE)) as net:
        tr = TcpTransport(net)
        tr.start()
        try:
            rules = rule_count(net)
            order = ["h0", "h4", "h1", "h5", "h2", "h6", "h3", "h7"]
            rp = Replayer(net, tr, channels=2, routing="precise-host")
            before = net.port_counters()
            r = rp.run(build_schedule("allreduce", [(h, 0) for h in order], SIZE))
            delta = port_delta(before, net.port_counters())
            assert rule_count(net) == rules  # no per-flow state in any switch
        finally:
            tr.stop()
    assert r.bytes_delivered == r.bytes_expected == 2 * 7 * SIZE
    per_conn = 2 * 7 * SIZE // 8 // 2  # a rank's share, over its two connections
    # each connection left on the NIC port its source port is pinned to, and on the uplink planned for it
    for (src, _dst, _c), path in rp.placed.items():
        sport = rp._sports[src, _dst, _c]
        link = next(l for l in net.topo.links_of(src[0]) if l.kind == "host-tor" and l.a_port == path.host_port)
        assert sport in PINNED_SPORTS[link.nic_port]
    planned = {path.hops[0] for path in rp.placed.values()}
    assert len(planned) == len(rp.placed) == 16  # 16 connections, 16 distinct ToR uplinks
    rail0 = [l for l in net.topo.links if l.kind == "tor-agg" and net.topo.nodes[l.a].rail == 0]
    uplinks = {(l.a, l.a_port) for l in rail0}
    assert planned == uplinks
    carried = {u: delta[u] for u in uplinks}
    # one connection's payload on each (plus headers and this ring's ACK-free direction): within 10%
    assert all(per_conn <= b <= 1.1 * per_conn * 1.06 for b in carried.values()), carried
    # ... and each aggregation switch's way down to a ToR carries one connection too
    downs = {(l.b, l.b_port): delta[l.b, l.b_port] for l in rail0}
    assert all(per_conn <= b <= 1.1 * per_conn * 1.06 for b in downs.values()), downs
    assert rp.candidates == 16 * 8  # each searched 2 planes x 4 uplinks


def agg_downlinks(net: Network, delta: dict) -> list[int]:
    """Bytes each aggregation-to-ToR link of rail 0 carried down."""
    return [delta[l.b, l.b_port] for l in net.topo.links if l.kind == "tor-agg" and net.topo.nodes[l.a].rail == 0]


@pytest.mark.parametrize("hashing,used", [("asic", 8), ("asic-seeded", 16)])
def test_one_seed_polarizes_the_aggregation_layer_of_a_single_plane(no_leftovers, hashing, used):
    """Single plane: each aggregation switch chooses between the receiver's two ToRs with the same hash the
    sender's ToR used to choose it (hash mod 4 fixes hash mod 2): under `asic` every aggregation switch sends
    all of it down one of its two links to a ToR pair, half the links stay idle; per-switch seeds use them all.
    64 connections across the segments, counted by OVS."""
    topo = build("hpn", dual_plane=False)
    with Network(topo, routing="static", mode="ecmp", hashing=hashing, qos=QosSpec(scale=SCALE)) as net:
        tr = TcpTransport(net)
        tr.start()
        try:
            order = ["h0", "h4", "h1", "h5", "h2", "h6", "h3", "h7"]
            rp = Replayer(net, tr, channels=8, nic_port_choice="round-robin")
            before = net.port_counters()
            r = rp.run(build_schedule("allreduce", [(h, 0) for h in order], SIZE))
            delta = port_delta(before, net.port_counters())
        finally:
            tr.stop()
    assert r.bytes_delivered == r.bytes_expected
    per_conn = 2 * 7 * SIZE // 8 // 8
    downs = agg_downlinks(net, delta)
    assert len(downs) == 16 and sum(b >= per_conn // 2 for b in downs) == used, downs
    # the others carried only acknowledgements (the reverse direction hashes the same, symmetric fields)
    assert all(b < per_conn // 20 for b in downs if b < per_conn // 2), downs
