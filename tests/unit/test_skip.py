"""Compute skipping (traffic/skip.py): when the clock may jump, and a Skipper jumping a Clock."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from traffic.skip import MARGIN_S, MIN_JUMP_S, Skipper, jump
from traffic.timebase import Clock, Timebase


def test_the_clock_jumps_to_just_before_the_first_compute_ends():
    assert jump(100.0, [101.0, 100.5]) == pytest.approx(0.5 - MARGIN_S)
    assert jump(100.0, [101.0, 100.5], limit=100.2) == pytest.approx(0.2 - MARGIN_S)  # a failure is due first


def test_a_busy_rank_a_past_compute_or_a_short_gap_holds_the_clock():
    assert jump(100.0, [101.0, None]) == 0  # one rank sends, receives or has not said
    assert jump(100.0, [101.0, 99.0]) == 0  # its compute has ended: it is busy again
    assert jump(100.0, [100.0 + MARGIN_S + MIN_JUMP_S / 2]) == 0
    assert jump(100.0, []) == 0  # no rank at all: nothing says the network is empty
    assert jump(100.0, [float("inf")] * 2) == 0  # every iteration over: nothing to jump to
    assert jump(100.0, [float("inf"), 101.0]) == pytest.approx(1.0 - MARGIN_S)  # one over, one computing


@given(st.floats(0, 1e6), st.lists(st.one_of(st.none(), st.floats(-10, 10)), max_size=6),
       st.one_of(st.none(), st.floats(-10, 10)))
def test_a_jump_never_reaches_a_compute_end_or_the_limit(now, rel, limit):
    ends = [None if r is None else now + r for r in rel]
    gap = jump(now, ends, None if limit is None else now + limit)
    assert gap >= 0
    if gap:
        assert all(e is not None and now + gap < e for e in ends)
        assert limit is None or now + gap < now + limit


@pytest.mark.timing
def test_a_skipper_jumps_the_clock_once_every_rank_computes_and_wakes_its_sleepers():
    clock = Clock(Timebase(10.0))
    sk = Skipper(clock)
    heard: list[float] = []
    sk.listen(heard.append)
    sk.join(["a", "b"])
    sk.start()
    try:
        woke = threading.Event()
        target = clock.epoch() + 5.0  # five wall seconds of compute for both ranks

        def sleeper():
            clock.sleep_until(target)
            woke.set()

        threading.Thread(target=sleeper, daemon=True).start()
        sk.computing("a", target)
        time.sleep(0.1)
        assert sk.jumps == 0 and clock.skipped == 0  # b has not said: it may be sending
        t0 = time.monotonic()
        sk.computing("b", target + 1.0)
        assert woke.wait(2.0), "the sleeper was not woken by the jump"
        assert time.monotonic() - t0 < 1.0
        assert sk.jumps == 1 and heard == [clock.skipped]
        assert clock.skipped == pytest.approx(5.0 - 0.1 - MARGIN_S, abs=0.05)
        assert clock.now() == pytest.approx(clock.wall_now() / 10 + clock.skipped / 10, abs=1e-3)
    finally:
        sk.stop()


def test_ranks_whose_iteration_is_over_do_not_hold_the_clock():
    clock = Clock()
    sk = Skipper(clock)
    sk.join(["a", "b"])
    sk.start()
    try:
        sk.finished("b")  # b ended its iteration first; a still computes its last stretch
        sk.computing("a", clock.epoch() + 3.0)
        deadline = time.monotonic() + 2
        while sk.jumps == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sk.jumps == 1 and clock.skipped > 2.5
        sk.join(["a", "b"])  # the next iteration: both busy again until they say otherwise
        sk.computing("a", clock.epoch() + 3.0)
        time.sleep(0.1)
        assert sk.jumps == 1
    finally:
        sk.stop()


def test_ranks_that_left_do_not_hold_the_clock():
    clock = Clock()
    sk = Skipper(clock)
    sk.join(["a", "b"])
    sk.start()
    try:
        sk.computing("a", clock.epoch() + 3.0)
        time.sleep(0.05)
        assert sk.jumps == 0
        sk.leave(["b"])  # b's job ended
        deadline = time.monotonic() + 2
        while sk.jumps == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sk.jumps == 1 and clock.skipped > 2.5
    finally:
        sk.stop()
