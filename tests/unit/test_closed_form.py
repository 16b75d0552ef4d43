"""Every collective's schedule puts exactly its closed form's bytes on the wire (the closed forms are written
out from the definitions, not summed from a schedule)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from traffic.closed_form import of, wire_bytes
from traffic.collectives import ALGORITHMS, build_schedule
from traffic.replay import concurrent


@settings(max_examples=300, deadline=None)
@given(op=st.sampled_from(sorted(ALGORITHMS)), n=st.integers(2, 16), size=st.integers(1, 10**9), data=st.data())
def test_every_schedule_sums_to_its_closed_form(op, n, size, data):
    algorithm = data.draw(st.sampled_from(sorted(ALGORITHMS[op])))
    if algorithm == "halving_doubling":
        n = 1 << (n.bit_length() - 1)
    if op == "sendrecv":
        n += n % 2
    s = build_schedule(op, [(f"h{i}", 0) for i in range(n)], size, algorithm)
    assert s.total_bytes == of(s)


@given(hosts=st.integers(2, 12), rails=st.integers(1, 8), size=st.integers(1, 10**9))
def test_hierarchical_and_concurrent_groups(hosts, rails, size):
    s = build_schedule("allreduce", [(f"h{i}", r) for r in range(rails) for i in range(hosts)], size, "hierarchical")
    assert s.total_bytes == of(s) == 2 * (hosts - 1) * size
    rings = concurrent([build_schedule("allreduce", [(f"h{i}", r) for i in range(hosts)], size) for r in range(rails)])
    assert rings.total_bytes == of(rings) == rails * 2 * (hosts - 1) * size


def test_the_closed_forms_by_hand():
    assert wire_bytes("allreduce", "ring", 8, 1_000) == 14_000
    assert wire_bytes("allgather", "ring", 4, 1_000) == 3_000
    assert wire_bytes("sendrecv", "pairs", 6, 10) == 30
