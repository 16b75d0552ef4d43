"""Host-side precise routing (pure): predicting a connection's path from its source port, and choosing one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controllers.hashing import TCP, FiveTuple
from controllers.hostpath import (
    Connection,
    choose_sport,
    count_paths,
    place,
    predict,
    sports_by_path,
)
from controllers.precise import candidate_paths
from controllers.routing import RoutingGraph, compute_tables, trace
from topos import build
from topos.addressing import PINNED_SPORTS, nic_address, nic_port_of

HPN = build("hpn")
HPN_G = RoutingGraph(HPN)
HPN_T = compute_tables(HPN_G)
DCN = build("dcn_plus", preset="mini")
DCN_G = RoutingGraph(DCN)
DCN_T = compute_tables(DCN_G)


def ip(topo, host: str, nic: int = 0) -> str:
    return nic_address(topo.nodes[host], nic).ip


def test_source_port_ranges_pick_the_nic_port():
    assert nic_port_of(PINNED_SPORTS[0].start) == 0 and nic_port_of(PINNED_SPORTS[1].stop - 1) == 1
    assert nic_port_of(20000) is None  # ECMP's sequential ports: the host's own hash decides
    assert not set(PINNED_SPORTS[0]) & set(PINNED_SPORTS[1])


fabrics = st.sampled_from([(HPN, HPN_G, HPN_T), (DCN, DCN_G, DCN_T)])


@settings(max_examples=60, deadline=None)
@given(fabric=fabrics, pair=st.tuples(st.integers(0, 7), st.integers(0, 7)).filter(lambda p: p[0] != p[1]),
       model=st.sampled_from(["asic", "asic-seeded"]), dport=st.integers(1, 65535), pick=st.integers(0, 10**6))
def test_a_chosen_source_port_takes_the_wanted_path(fabric, pair, model, dport, pick):
    topo, g, t = fabric
    src, dst = f"h{pair[0]}", f"h{pair[1]}"
    c = Connection(src, ip(topo, dst), "tcp", dport)
    reached = sports_by_path(g, t, model, c)
    cands = candidate_paths(g, t, src, ip(topo, dst))
    assert set(reached) <= set(cands)
    if model == "asic-seeded" or topo is HPN:  # one hashing tier (HPN), or independent seeds: every path
        assert set(reached) == set(cands)
    want = sorted(reached, key=lambda p: (p.host_port, p.hops))[pick % len(reached)]
    sport = choose_sport(g, t, model, c, want, set())
    got = predict(g, t, model, src, FiveTuple(ip(topo, src), ip(topo, dst), TCP, sport, dport))
    assert got == want
    assert tuple(sw for sw, _ in got.hops) in trace(g, t, src, ip(topo, dst))  # a path the fabric has


@settings(max_examples=40, deadline=None)
@given(sport=st.integers(1024, 65535), dport=st.integers(1, 65535))
def test_a_prediction_is_one_of_the_fabrics_paths_or_none_when_unpinned(sport, dport):
    t5 = FiveTuple(ip(DCN, "h0"), ip(DCN, "h6"), TCP, sport, dport)
    p = predict(DCN_G, DCN_T, "asic", "h0", t5)
    if nic_port_of(sport) is None:
        assert p is None  # the host's own multipath hash: not predicted
    else:
        assert p in candidate_paths(DCN_G, DCN_T, "h0", ip(DCN, "h6"))
    assert predict(DCN_G, DCN_T, "ovs", "h0", t5) is None  # select groups: OVS's own hash


def test_a_ring_whose_hops_all_cross_segments_gets_disjoint_paths():
    order = ["h0", "h4", "h1", "h5", "h2", "h6", "h3", "h7"]
    conns = [Connection(order[i], ip(HPN, order[(i + 1) % 8]), "tcp", 9000) for i in range(8) for _c in range(2)]
    pl = place(HPN_G, HPN_T, "asic", conns)
    assert pl.assignment.shared_links() == 0
    assert len({p.hops[0] for p in pl.paths}) == 16 and len(set(pl.sports)) == 16
    for c, sport, path in zip(conns, pl.sports, pl.paths, strict=True):
        assert predict(HPN_G, HPN_T, "asic", c.src, FiveTuple(ip(HPN, c.src), c.dst, TCP, sport, 9000)) == path
    assert pl.candidates == 16 * 8  # 2 planes x 4 uplinks each


def test_a_second_job_starts_its_search_elsewhere():
    conns = [Connection("h0", ip(HPN, "h4"), "tcp", 9000)]
    first = place(HPN_G, HPN_T, "asic", conns).sports[0]
    later = place(HPN_G, HPN_T, "asic", conns, start=2500).sports[0]
    assert first < PINNED_SPORTS[0].start + 2500 <= later


def test_after_a_failure_a_pinned_port_that_lost_the_destination_is_not_predicted():
    t = compute_tables(HPN_G, down={"h4:nic0:p0"})
    sport = PINNED_SPORTS[0].start
    assert predict(HPN_G, t, "asic", "h0", FiveTuple(ip(HPN, "h0"), ip(HPN, "h4"), TCP, sport, 9000)) is None


@pytest.mark.parametrize("kind,params,paths", [
    # HPN Table 1: a plane of the paper's pod: 60 uplinks, one way down from each aggregation switch
    ("hpn", dict(segments_per_pod=2, hosts_per_segment=1, rails=1, aggs_per_plane=60, tor_uplinks=60), 2 * 60),
    # a 3-tier single-plane Clos (DCN+-like): ToR fan-out x aggregation fan-out x the destination's two ToRs
    ("dcn_plus", dict(pods=2, segments_per_pod=8, hosts_per_segment=1, rails=1, aggs_per_plane=8, tor_uplinks=8,
                      core_oversubscription=1), 2 * 8 * 16 * 2),
])
def test_path_search_space(kind, params, paths):
    topo = build(kind, **params)
    g = RoutingGraph(topo)
    t = compute_tables(g)
    hosts = [h.name for h in topo.hosts]
    assert count_paths(g, t, hosts[0], ip(topo, hosts[-1])) == paths


def test_one_seed_in_a_3_tier_clos_leaves_most_paths_unreachable():
    """DCN+: ToR, aggregation and core switches all hash; with one seed their buckets are functions of the
    same hash, so only some combinations of choices occur for any 5-tuple (polarization); per-switch seeds
    make every path reachable. HPN's dual plane has one hashing tier: every path is reachable either way."""
    c = Connection("h0", ip(DCN, "h6"), "tcp", 9000)
    total = len(candidate_paths(DCN_G, DCN_T, "h0", c.dst))
    assert total == 64
    assert len(sports_by_path(DCN_G, DCN_T, "asic", c)) == 8
    assert len(sports_by_path(DCN_G, DCN_T, "asic-seeded", c)) == 64


def test_only_tcp_ports_are_pinned():
    """RoCEv2's UDP source ports overlap the pinned ranges; the host rules match TCP only."""
    t5 = FiveTuple(ip(HPN, "h0"), ip(HPN, "h4"), 17, PINNED_SPORTS[0].start, 4791)
    assert predict(HPN_G, HPN_T, "asic", "h0", t5) is None
    with pytest.raises(ValueError, match="proto='udp'"):
        sports_by_path(HPN_G, HPN_T, "asic", Connection("h0", ip(HPN, "h4"), "udp", 4791))
