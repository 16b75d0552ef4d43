"""bench/dcqcn_fluid.py, DCQCN's published fluid model: its terms meet their limits where the marking
probability does, and sixteen flows settle where the model says DCQCN does: the link full, the queue just past
Kmin (where the marks that cut balance the timer's increases), no oscillation left."""

from __future__ import annotations

import statistics

import pytest

from bench.dcqcn_fluid import STEP_S, _terms, run
from bench.dcqcn_model import Port
from testbed.qos.ecn import PMAX, published
from traffic.roce.dcqcn import RpParams

KMIN, KMAX = published(200)


def test_the_terms_are_continuous_into_their_limits():
    rc, tau, timer = 25e6, 50e-6, 55e-6  # 200 Gbit/s of 1,000-byte frames
    at_zero, near_zero = _terms(0.0, rc, tau, 10_000, timer, 1), _terms(1e-12, rc, tau, 10_000, timer, 1)
    assert near_zero == pytest.approx(at_zero, rel=1e-6, abs=1e-8)  # a = tau rc p: 1.25e-9 there
    assert _terms(1.0, rc, tau, 10_000, timer, 1) == (1.0, 0.0, 0.0, 0.0, 0.0)
    a, b, c, d, e = _terms(0.01, rc, tau, float("inf"), timer, 1)
    assert b == c == 0 and 0 < e < d and a == pytest.approx(1 - 0.99 ** (tau * rc))


def test_sixteen_flows_settle_just_past_kmin_with_the_link_full():
    m = Port(senders=16, bytes_each=1e12, rate_bps=200e9, frame=1000, kmin=KMIN, kmax=KMAX, pmax=PMAX, xoff=0,
             xon=0)  # no PFC in the fluid model
    tr = run(m, RpParams(line_bps=200e9), limit_s=0.03)
    last = int(0.005 / STEP_S)  # the last 5 ms
    q, rate = tr.queue[-last:], tr.rate[-last:]
    assert KMIN < min(q) and max(q) < KMIN + 0.05 * (KMAX - KMIN), (min(q), max(q))
    assert statistics.mean(rate) * 16 == pytest.approx(200e9, rel=0.01)
    # every flow started at the line rate: the first marks cut them far below their share before they settled
    assert min(tr.rate) < 200e9 / 16 / 2
