"""The PFC watchdog's state machine (testbed/qos/pfc_watchdog.py): a storm is a queue paused through whole poll
intervals with bytes queued and none sent; it ends once the peer's pause has been released long enough."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from testbed.qos.pfc_watchdog import Action, Change, QueueWatch, Sample, Watchdog, WatchdogConfig

CFG = WatchdogConfig()  # 100 ms polls, 2 to detect, 200 ms to restore
KEY = ("tor-p0-s0-r0-a:1", 3)


def _polls(watch: QueueWatch, samples: list[tuple[float, Sample]]) -> list[tuple[float, Change]]:
    return [(t, c) for t, s in samples if (c := watch.poll(t, s, CFG)) is not None]


def test_a_queue_paused_with_frames_and_sending_none_is_a_storm_at_the_second_stalled_poll():
    stuck = Sample(paused_since=0.0, backlog=9000, sent=500)
    assert _polls(QueueWatch(), [(0.0, stuck), (0.1, stuck), (0.2, stuck)]) == [(0.2, Change.STORM)]


def test_a_paused_queue_that_still_sends_or_holds_nothing_or_was_paused_mid_interval_is_no_storm():
    sending = [(t / 10, Sample(0.0, 9000, 500 + t)) for t in range(10)]  # paused part of each interval
    empty = [(t / 10, Sample(0.0, 0, 500)) for t in range(10)]  # paused with nothing to send: no harm
    fresh = [(t / 10, Sample(t / 10 - 0.05, 9000, 500)) for t in range(10)]  # each pause began inside its interval
    unpaused = [(t / 10, Sample(None, 9000, 500)) for t in range(10)]
    assert [_polls(QueueWatch(), s) for s in (sending, empty, fresh, unpaused)] == [[], [], [], []]


def test_one_poll_with_progress_starts_the_count_again():
    stuck, moved = Sample(0.0, 9000, 500), Sample(0.0, 9000, 600)
    samples = [(0.0, stuck), (0.1, stuck), (0.2, moved), (0.3, moved), (0.4, moved)]
    assert _polls(QueueWatch(), samples) == [(0.4, Change.STORM)]


def test_a_storm_lasts_while_the_peer_pauses_and_ends_restore_ms_after_it_lets_go():
    w = QueueWatch()
    stuck = Sample(0.0, 9000, 500)
    assert _polls(w, [(0.0, stuck), (0.1, stuck), (0.2, stuck)]) == [(0.2, Change.STORM)]
    # mitigated (the queue drains), the peer still pausing: no restore however long
    still = [(0.2 + t / 10, Sample(0.0, 0, 9500)) for t in range(1, 20)]
    assert _polls(w, still) == []
    # released at 2.2, paused again at 2.3 (before 200 ms): the clock starts again from the next release
    again = [(2.2, Sample(None, 0, 9500)), (2.3, Sample(2.25, 0, 9500)), (2.4, Sample(None, 0, 9500)),
             (2.5, Sample(None, 0, 9500)), (2.6, Sample(None, 0, 9500))]
    assert _polls(w, again) == [(2.6, Change.RESTORED)]
    assert w.storms == 1 and abs(w.storm_s - 2.4) < 1e-9


def test_the_watchdog_reports_each_queues_storms_and_ends_them_with_the_run():
    dog = Watchdog(WatchdogConfig(action=Action.FORWARD))
    other = ("agg-p0-pl0-0:2", 3)
    for t in range(4):
        dog.poll(t / 10, {KEY: Sample(0.0, 9000, 7), other: Sample(None, 100, t)})
    assert dog.in_storm() == [KEY] and [e[1:] for e in dog.events] == [(KEY, Change.STORM)]
    assert dog.report(0.5).queues == {KEY: (1, 0.3)}  # a storm still on counts until now
    assert dog.end(1.0) == [KEY] and dog.in_storm() == [] and dog.events[-1] == (1.0, KEY, Change.RESTORED)
    report = dog.report(2.0)  # ended at 1.0: nothing after counts
    assert (report.action, report.storms, report.storm_s) == (Action.FORWARD, 1, 0.8)
    assert report.queues == {KEY: (1, 0.8)}


@given(st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=40))
def test_a_storm_is_only_ever_called_after_detect_polls_stalled_intervals(steps):
    """Random polls: each says whether the queue was paused through the interval, held bytes, and sent none;
    a storm is called exactly when the last `detect_polls` intervals (outside a storm) all stalled."""
    w, sent, run = QueueWatch(), 0, 0
    w.poll(0.0, Sample(None, 0, sent), CFG)
    for i, (paused, queued, stuck) in enumerate(steps, start=1):
        now = i / 10
        sent += 0 if stuck else 1500
        in_storm = w.storm_since is not None
        change = w.poll(now, Sample(0.0 if paused else None, 9000 if queued else 0, sent), CFG)
        if in_storm:
            assert change != Change.STORM
            continue
        run = run + 1 if paused and queued and stuck else 0
        assert (change == Change.STORM) == (run >= CFG.detect_polls)
        run = 0 if change == Change.STORM else run


def test_a_queue_left_out_of_a_poll_was_not_paused_and_counts_its_stalled_polls_again():
    """The agent samples only the queues paused now: one that went unpaused between two stalled polls is no
    storm at the next (its last poll and count are forgotten)."""
    dog = Watchdog()
    stuck = Sample(paused_since=0.0, backlog=9000, sent=500)
    assert dog.poll(0.0, {KEY: stuck}) == []
    assert dog.poll(0.1, {}) == []  # resumed, then paused again before the next poll
    again = Sample(paused_since=0.15, backlog=9000, sent=500)
    assert dog.poll(0.2, {KEY: again}) == [] and dog.poll(0.3, {KEY: again}) == []
    assert dog.poll(0.4, {KEY: again}) == [(KEY, Change.STORM)]


def test_the_spec_gives_the_machine_the_fabric_times_dilated_and_refuses_a_bad_action():
    import pytest

    from testbed.qos.spec import QosSpec
    from topos.errors import InputError

    wd = QosSpec(pfc={"watchdog": {"enabled": True, "action": "forward"}}).pfc.watchdog
    assert wd.config(5.0) == WatchdogConfig(500.0, 2, 1000.0, Action.FORWARD)
    assert QosSpec().pfc.watchdog.enabled is False  # off by default, as on switches
    with pytest.raises((InputError, ValueError), match="action"):
        QosSpec(pfc={"watchdog": {"action": "ignore"}})
