"""DCQCN's reaction point (traffic/roce/dcqcn.py), against what the DCQCN paper and the HPCC simulator's timers
say it does: the first CNP halves the rate, alpha follows its EWMA, cuts come at most every T_dec, the rate
recovers through fast recovery, additive and hyper increase to the line rate, and the lazy timers give the same
rate however often the sender looks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from pytest import approx

from traffic.roce.dcqcn import ReactionPoint, RpParams

LINE = 100e9
P = RpParams(line_bps=LINE)


def test_the_first_cnp_sets_alpha_to_one_and_halves_the_rate_at_once():
    rp = ReactionPoint(P)
    assert rp.rate(0.0) == LINE
    rp.on_cnp(1e-3)
    assert (rp.alpha, rp.rate_bps, rp.target_bps, rp.cuts) == (1.0, LINE / 2, LINE, 1)


def test_a_cnp_within_t_dec_waits_and_alpha_is_the_ewma_of_cnps():
    rp = ReactionPoint(P)
    rp.on_cnp(0.0)
    rp.on_cnp(20e-6)  # inside T_dec (50 us): no cut yet
    assert rp.cuts == 1 and rp.rate(40e-6) == LINE / 2
    # at 50 us: T_alpha passed with a CNP in it, alpha = (1 - g) + g = 1; the pending CNP cuts by alpha / 2
    assert rp.rate(50e-6) == approx(LINE / 4) and rp.alpha == approx(1.0) and rp.cuts == 2
    # 10 quiet intervals: alpha = (1 - g)^10
    rp.rate(50e-6 + 10 * P.t_alpha_s + 1e-9)
    assert rp.alpha == approx((1 - P.g) ** 10)


def test_without_cnps_the_rate_recovers_in_stages_to_the_line_rate():
    rp = ReactionPoint(P)
    rp.on_cnp(0.0)
    r0, t = rp.rate_bps, P.t_inc_s
    assert rp.rate(t + 1e-9) == approx((r0 + LINE) / 2)  # fast recovery: halfway to the target (the old rate)
    assert rp.target_bps == LINE  # capped: additive increase cannot pass the line rate
    rp.on_cnp(t + 2e-9)  # cut: the target becomes the rate it had, then additive increase raises it by R_AI
    target = rp.target_bps
    rp.rate(t + 2e-9 + 2 * P.t_inc_s + 1e-9)
    assert rp.target_bps == approx(min(LINE, target + P.r_ai))
    assert rp.rate(1.0) == approx(LINE)  # a second later: back at the line rate


def test_a_cnp_every_60_us_drives_the_rate_to_the_floor_and_alpha_is_its_ewma():
    """Past T_dec apart, every CNP cuts (to the floor in the end); alpha is the EWMA of "a CNP came in this
    50 us interval", computed here on its own (1 us past each 60 us: no CNP on an interval's edge)."""
    rp = ReactionPoint(P)
    times = [0.0] + [k * 60e-6 + 1e-6 for k in range(1, 200)]
    for t in times:
        rp.on_cnp(t)
    assert rp.rate_bps == P.min_bps and rp.cuts == 200
    expected = 1.0
    for i in range(int(times[-1] / P.t_alpha_s)):  # the intervals that ended by the last CNP
        came = any(i * 50 <= round(t * 1e6) < (i + 1) * 50 for t in times[1:])
        expected = (1 - P.g) * expected + (P.g if came else 0.0)
    assert rp.alpha == approx(expected, rel=1e-9) and 0.8 < rp.alpha < 0.95


@settings(max_examples=150, deadline=None)
@given(cnps=st.lists(st.floats(0, 0.01), max_size=40), looks=st.lists(st.floats(0, 0.02), max_size=40),
       end=st.floats(0.02, 0.05))
def test_the_rate_is_the_same_however_often_the_sender_looks(cnps, looks, end):
    """Lazy timers: looking at the rate between CNPs changes nothing; and it stays within [floor, line]."""
    quiet, busy = ReactionPoint(P), ReactionPoint(P)
    events = sorted([(t, "cnp") for t in cnps] + [(t, "look") for t in looks])
    for t, what in events:
        if what == "cnp":
            quiet.on_cnp(t)
            busy.on_cnp(t)
        else:
            assert P.min_bps <= busy.rate(t) <= LINE and 0 <= busy.alpha <= 1
    assert quiet.rate(end) == approx(busy.rate(end), rel=1e-9)
    assert (quiet.cuts, quiet.alpha) == (busy.cuts, approx(busy.alpha, rel=1e-9))


def test_the_notification_point_sends_at_most_one_cnp_per_50_us():
    """A CE-marked frame every 7 us for 1 ms: a CNP for the first, then for the first frame 50 us or more after
    the last CNP (every 8th: 56 us apart), none withheld longer."""
    from traffic.roce.dcqcn import NotificationPoint

    np_ = NotificationPoint()
    marks = [k * 7e-6 for k in range(143)]
    sent = [t for t in marks if np_.on_ce(t)]
    assert sent == marks[::8] and np_.sent == 18
