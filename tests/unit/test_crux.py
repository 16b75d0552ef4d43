"""The Crux-style scheduler on hand-made job sets: intensity, path selection, priorities and compression."""

from __future__ import annotations

import pytest

from controllers.crux import JobDemand, compress, schedule
from controllers.precise import FlowSpec
from controllers.routing import RoutingGraph, compute_tables
from topos import build

MB = 1_000_000


@pytest.fixture(scope="module")
def fabric():
    graph = RoutingGraph(build("hpn"))  # 8 hosts: h0-h3 in segment 0 (10.0.0.1-4), h4-h7 in segment 1
    return graph, compute_tables(graph)


def rate(_link) -> float:
    return 10e6


def job(name, pairs, gpus=4, compute=1.0, nbytes=MB, overlap=0.0, sport=5000):
    flows = tuple((FlowSpec(src, dst, "tcp", sport + i, 7000), nbytes) for i, (src, dst) in enumerate(pairs))
    return JobDemand(name, gpus, compute, flows, overlap)


def test_intensity_orders_priorities_and_contending_jobs_get_different_levels(fabric):
    pairs = [("h0", "10.0.0.5")] * 2
    a = job("A", pairs, compute=1.0)  # A's two flows leave on h0's two ports, B's must share them
    b = job("B", pairs, compute=0.1, sport=6000)
    s = schedule(*fabric, [b, a], rate, levels=4)
    assert s.order == ["A", "B"] and s.level == {"A": 0, "B": 1}
    # t_j: each flow's 1 MB over 10 Mbit/s links = 0.8 s; W_j = 4 GPUs x compute
    assert s.intensity["A"] == pytest.approx(4 * 1.0 / 0.8) and s.intensity["B"] == pytest.approx(4 * 0.1 / 0.8)
    assert frozenset(("A", "B")) in s.contends


def test_jobs_that_share_no_link_share_a_level(fabric):
    a = job("A", [("h0", "10.0.0.2")])  # inside segment 0
    b = job("B", [("h4", "10.0.0.6")], compute=0.2)  # inside segment 1
    s = schedule(*fabric, [a, b], rate, levels=2)
    assert s.contends == set() and s.level == {"A": 0, "B": 0}


def test_the_most_intense_jobs_paths_are_kept_apart(fabric):
    graph, _tables = fabric
    # 8 cross-segment flows of two jobs from different hosts to different hosts: enough ToR uplinks for all
    a = job("A", [(f"h{i}", f"10.0.0.{5 + i}") for i in (0, 1)] * 2, compute=2.0)
    b = job("B", [(f"h{i}", f"10.0.0.{5 + i}") for i in (2, 3)] * 2, compute=0.5, sport=6000)
    s = schedule(*fabric, [b, a], rate, levels=2)
    shared = [h for h, n in s.paths.load.items() if n > 1 and graph.topo.nodes[h[0]].role != "host"]
    assert shared == [] and s.contends == set()
    uplinks_a = {next(h for h in p.hops if graph.topo.nodes[h[0]].role == "tor")
                 for k, p in s.paths.paths.items() if k.startswith("tcp:h0") or k.startswith("tcp:h1")}
    assert len(uplinks_a) == 4  # A's four flows on four distinct ToR uplinks


def test_overlap_lowers_a_jobs_priority(fabric):
    pairs = [("h0", "10.0.0.5")]
    a = job("A", pairs, compute=1.0, overlap=0.6)
    b = job("B", pairs, compute=0.8, sport=6000)
    s = schedule(*fabric, [a, b], rate, levels=4)
    assert s.intensity["A"] > s.intensity["B"] and s.order == ["B", "A"]  # 0.4 x 5 < 1.0 x 4


def test_compression_merges_the_least_costly_adjacent_levels():
    order = ["A", "B", "C", "D"]
    prio = {"A": 10.0, "B": 5.0, "C": 1.0, "D": 0.5}
    chain = {frozenset(p) for p in (("A", "B"), ("B", "C"), ("C", "D"))}
    assert compress(order, chain, prio, levels=8) == {"A": 0, "B": 1, "C": 2, "D": 3}
    # two levels: merging C with D costs 0.5, B with C 1.0, A with B 5.0
    assert compress(order, chain, prio, levels=3) == {"A": 0, "B": 1, "C": 2, "D": 2}
    assert compress(order, chain, prio, levels=2) == {"A": 0, "B": 1, "C": 1, "D": 1}
    assert compress(order, chain, prio, levels=1) == dict.fromkeys(order, 0)
    with pytest.raises(ValueError):
        schedule(RoutingGraph(build("hpn")), None, [], rate, levels=0)
