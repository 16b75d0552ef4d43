"""The controller's reply waiter: barriers to many switches wait in parallel, and a silent switch is counted late."""

import threading
import time
from types import SimpleNamespace

from controllers.stats import StatsWaiter


class FakeDatapath:
    """Answers every request after `delay` seconds on another thread (or never, if delay is None)."""

    def __init__(self, dpid: int, waiter: StatsWaiter, delay: float | None):
        self.id, self.waiter, self.delay, self.next_xid = dpid, waiter, delay, 1
        self.ofproto = SimpleNamespace(OFPMPF_REPLY_MORE=1)

    def set_xid(self, req):
        req.xid, self.next_xid = self.next_xid, self.next_xid + 1

    def send_msg(self, req):
        if self.delay is not None:
            reply = SimpleNamespace(datapath=self, xid=req.xid)  # a barrier reply: no body, no flags
            threading.Timer(self.delay, self.waiter.reply, args=(reply,)).start()


class HeldDatapath(FakeDatapath):
    """Answers only once every switch has its request: a waiter that waited switch by switch would hear nothing
    and count them all late."""

    def __init__(self, dpid: int, waiter: StatsWaiter, all_sent: threading.Barrier):
        super().__init__(dpid, waiter, None)
        self.all_sent = all_sent

    def send_msg(self, req):
        def answer():
            self.all_sent.wait(30)
            self.waiter.reply(SimpleNamespace(datapath=self, xid=req.xid))

        threading.Thread(target=answer, daemon=True).start()


def test_barriers_to_many_switches_are_sent_together_and_wait_for_the_slowest_not_the_sum():
    w = StatsWaiter()
    all_sent = threading.Barrier(10)
    dps = [HeldDatapath(i, w, all_sent) for i in range(10)]
    assert w.request_all([(dp, SimpleNamespace()) for dp in dps], timeout=30.0) == 0


def test_a_switch_that_never_answers_is_counted_late_and_the_wait_ends_at_the_timeout():
    w = StatsWaiter()
    dps = [FakeDatapath(1, w, 0.01), FakeDatapath(2, w, None), FakeDatapath(3, w, None)]
    t0 = time.monotonic()
    assert w.request_all([(dp, SimpleNamespace()) for dp in dps], timeout=0.3) == 2
    assert 0.3 <= time.monotonic() - t0 < 10  # not before the timeout; after it, soon (a generous bound)
    assert not w._bodies and not w._done  # nothing left behind for replies that come later


def test_multipart_statistics_are_joined_until_the_last_part():
    w = StatsWaiter()
    dp = FakeDatapath(7, w, None)
    parts = [SimpleNamespace(datapath=dp, body=[1, 2], flags=1), SimpleNamespace(datapath=dp, body=[3], flags=0)]

    def answer(req):  # the switch answers in two parts before the caller starts waiting
        for p in parts:
            p.xid = req.xid
            w.reply(p)
    dp.send_msg = answer
    assert sorted(w.request(dp, SimpleNamespace(), timeout=2.0)) == [1, 2, 3]
