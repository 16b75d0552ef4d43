"""Byte totals of every schedule against the closed forms, and step structure."""

from __future__ import annotations

import pytest

from topos.errors import InputError
from traffic.collectives import build_schedule, hierarchical_allreduce, pipelined_broadcast
from traffic.metrics import OpResult, busbw_factor


def ranks(n):
    return [(f"h{i}", 0) for i in range(n)]


@pytest.mark.parametrize("n", [2, 3, 4, 8, 7])
@pytest.mark.parametrize("size", [8000, 1_000_003])
def test_ring_family_per_rank_bytes(n, size):
    ar = build_schedule("allreduce", ranks(n), size, "ring")
    assert len(ar.steps) == 2 * (n - 1)
    # Each rank sends 2(n-1)/n of the buffer (exactly, up to the chunks' rounding).
    for r in ranks(n):
        assert abs(ar.sent_by(r) - 2 * (n - 1) * size / n) <= 2 * (n - 1)
    assert ar.total_bytes == 2 * (n - 1) * size  # every chunk crosses n-1 edges twice
    for op in ("allgather", "reducescatter"):
        s = build_schedule(op, ranks(n), size)
        assert len(s.steps) == n - 1
        assert s.total_bytes == (n - 1) * size
    a2a = build_schedule("alltoall", ranks(n), size)
    assert len(a2a.steps) == n - 1
    assert a2a.total_bytes == (n - 1) * size
    # In all-to-all every ordered pair meets exactly once.
    pairs = [(f.src, f.dst) for st in a2a.steps for f in st]
    assert len(pairs) == len(set(pairs)) == n * (n - 1)


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_halving_doubling(n):
    size = 1 << 20
    s = build_schedule("allreduce", ranks(n), size, "halving_doubling")
    assert len(s.steps) == 2 * (n.bit_length() - 1)
    for r in ranks(n):
        assert s.sent_by(r) == 2 * (n - 1) * size // n
    # partners are distinct per step and symmetric
    for st in s.steps:
        assert {(f.dst, f.src) for f in st} == {(f.src, f.dst) for f in st}


def test_halving_doubling_rejects_non_power_of_two():
    with pytest.raises(InputError) as exc:
        build_schedule("allreduce", ranks(6), 1000, "halving_doubling")
    assert exc.value.field == "ranks"


def test_broadcast_pipeline_and_sendrecv():
    s = pipelined_broadcast(ranks(5), 10_000, chunks=4)
    assert len(s.steps) == 5 - 1 + 4 - 1
    assert s.total_bytes == 4 * 10_000
    assert s.sent_by(("h4", 0)) == 0 and s.sent_by(("h0", 0)) == 10_000
    sr = build_schedule("sendrecv", ranks(4), 777)
    assert [(f.src[0], f.dst[0], f.bytes) for f in sr.steps[0]] == [("h0", "h1", 777), ("h2", "h3", 777)]


def test_hierarchical_rings_per_rail_run_together():
    hosts = [f"h{i}" for i in range(4)]
    s = hierarchical_allreduce(hosts, rails=2, size=8000)
    assert len(s.steps) == 2 * 3
    for st in s.steps:
        assert all(f.src[1] == f.dst[1] for f in st)  # rail-local: NIC r only talks to NIC r
        assert {f.src[1] for f in st} == {0, 1}
    assert s.sent_by(("h0", 1)) == 2 * 3 * (4000 // 4)


@pytest.mark.parametrize("args,field", [
    (("gather", ranks(4), 100), "op"),
    (("allreduce", ranks(4), 0), "size"),
    (("allreduce", ranks(1), 100), "ranks"),
    (("allreduce", ranks(4), 100, "tree"), "algorithm"),
    (("allreduce", [("h0", 0), ("h0", 0)], 100), "ranks"),
])
def test_bad_collective_input(args, field):
    with pytest.raises(InputError) as exc:
        build_schedule(*args)
    assert exc.value.field == field


def test_busbw_factors_and_fraction():
    assert busbw_factor("allreduce", 8) == pytest.approx(1.75)
    assert busbw_factor("allgather", 8) == pytest.approx(0.875)
    assert busbw_factor("broadcast", 8) == 1.0
    r = OpResult("allreduce", "ring", 8, 1_000_000, 1.0, 20e6, [0.5, 0.5], 14_000_000, 14_000_000)
    assert r.algbw_bps == 8e6 and r.busbw_bps == pytest.approx(14e6)
    assert r.fraction_of_ideal == pytest.approx(0.7)
    assert r.scaled_back(10_000)["busbw_bps"] == pytest.approx(14e10)
