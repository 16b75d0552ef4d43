"""Placing jobs compactly or scattered, and how much of their rings crosses segments."""

from __future__ import annotations

import pytest

from controllers.placement import place, ring_crossings, segments_spanned
from topos import build


def test_compact_keeps_a_job_in_one_segment_scattered_spreads_it():
    topo = build("hpn")  # 2 segments x 4 hosts x 2 rails
    compact = place(topo, [("A", 8)], "compact")["A"]
    assert len(compact) == 8 and segments_spanned(topo, compact) == 1
    assert ring_crossings(topo, compact) == (0, 8)  # 4 hosts x 2 rails, no hop leaves the segment
    scattered = place(topo, [("A", 8)], "scattered")["A"]
    assert segments_spanned(topo, scattered) == 2
    assert ring_crossings(topo, scattered) == (8, 8)  # hosts alternate segments: every hop crosses


def test_jobs_share_the_fabric_without_sharing_hosts():
    topo = build("hpn")
    jobs = place(topo, [("A", 6), ("B", 4), ("C", 6)], "compact")
    per_job = [{h for h, _ in ranks} for ranks in jobs.values()]
    assert sum(map(len, per_job)) == len(set().union(*per_job)) == 8  # no host in two jobs, all 8 used
    assert sum(len(r) for r in jobs.values()) == 16
    assert {j: segments_spanned(topo, r) for j, r in jobs.items()} == {"A": 1, "B": 1, "C": 2}
    with pytest.raises(ValueError, match="need 1 hosts of 2 GPUs, 0 are free"):
        place(topo, [("A", 16), ("B", 1)])


def test_placement_counts_gpus_not_nics():
    """16 hosts of 8 GPUs behind 2 NICs each hold a 128-GPU job (ceil(GPUs / NICs) hosts asked for 64)."""
    topo = build("hpn", hosts_per_segment=8, rails=2, gpus_per_host=8)
    ranks = place(topo, [("big", 128)], "compact")["big"]
    assert len(ranks) == 128 and len({h for h, _g in ranks}) == 16
    assert {g for _h, g in ranks} == set(range(8))
    two = place(topo, [("A", 12), ("B", 8)], "compact")
    assert [len({h for h, _g in r}) for r in two.values()] == [2, 1]


def test_a_2300_gpu_job_spans_3_hpn_segments():
    """HPN §4: 1,024 GPUs per segment, so a 2,300-GPU job spans 3 segments (19 on DCN+, not built here)."""
    topo = build("hpn", preset="paper")
    ranks = place(topo, [("big", 2300)], "compact")["big"]
    assert len(ranks) == 2300 and segments_spanned(topo, ranks) == 3
    crossing, hops = ring_crossings(topo, ranks)
    assert (crossing, hops) == (3 * 8, 288 * 8)  # 288 hosts, each rail's ring leaves a segment 3 times
    scattered = place(topo, [("big", 2300)], "scattered")["big"]
    assert segments_spanned(topo, scattered) == 15 and ring_crossings(topo, scattered)[0] == 288 * 8
