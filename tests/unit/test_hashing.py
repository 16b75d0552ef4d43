"""The ASIC hash model: OVS's symmetric_l3l4 hash in pure Python, and the polarization it implies."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from controllers.hashing import FiveTuple, bucket, seed, symmetric_l3l4


def tuples(n: int, rng: random.Random) -> list[FiveTuple]:
    return [FiveTuple(f"10.{rng.randrange(4)}.{rng.randrange(8)}.3", f"10.{rng.randrange(4)}.{rng.randrange(8)}.4",
                      6, rng.randrange(20000, 50000), 9000) for _ in range(n)]


def test_the_hash_is_symmetric_as_ovs_symmetric_l3l4_is():
    t = FiveTuple("10.0.0.3", "10.1.0.3", 6, 20001, 9000)
    back = FiveTuple("10.1.0.3", "10.0.0.3", 6, 9000, 20001)
    assert symmetric_l3l4(t, 7) == symmetric_l3l4(back, 7)
    assert symmetric_l3l4(t, 7) != symmetric_l3l4(t, 8)


def test_buckets_spread_evenly_over_the_next_hops():
    counts = Counter(bucket(t, 8, 0) for t in tuples(8000, random.Random(1)))
    assert sorted(counts) == list(range(8)) and max(counts.values()) / min(counts.values()) < 1.25


def test_same_seed_everywhere_polarizes_and_per_switch_seeds_do_not():
    """A ToR with 8 uplinks, then a switch with 2 next hops: with one seed, every flow the ToR put on
    uplink 0 takes the same one of the 2 (hash mod 8 fixes hash mod 2); with per-switch seeds, half."""
    on_uplink0 = [t for t in tuples(4000, random.Random(2)) if bucket(t, 8, seed("asic", "tor")) == 0]
    same = Counter(bucket(t, 2, seed("asic", "agg")) for t in on_uplink0)
    assert same == Counter({0: len(on_uplink0)})
    seeded = Counter(bucket(t, 2, seed("asic-seeded", "agg")) for t in
                     [t for t in tuples(4000, random.Random(2)) if bucket(t, 8, seed("asic-seeded", "tor")) == 0])
    assert 0.4 < seeded[0] / sum(seeded.values()) < 0.6


def test_seeds_are_16_bit_and_differ_between_switches():
    seeds = {seed("asic-seeded", f"agg-p0-pl0-{i}") for i in range(60)}
    assert len(seeds) == 60 and all(0 <= s < 1 << 16 for s in seeds)
    assert seed("asic", "x") == seed("asic", "y") == 0
    assert seed("ovs", "x") is None  # select groups: OVS's own hash, not predicted
    with pytest.raises(ValueError, match="asic-seeded"):
        seed("crc", "x")


@pytest.mark.parametrize("sport,want", [(1000, 0xF), (1001, 0x29), (1002, 0x15), (1003, 0x28)])
def test_buckets_equal_what_ovs_3_1_traced(sport, want):
    """Read from `ovs-appctl ofproto/trace` of multipath(symmetric_l3l4+udp,0,modulo_n,60,...) on OVS 3.1.0."""
    assert bucket(FiveTuple("10.0.0.3", "10.1.0.3", 6, sport, 9000), 60, 0) == want
