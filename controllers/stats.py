"""Statistics requests answered in several multipart replies, matched to their waiting caller by xid."""

from __future__ import annotations

import threading


class StatsWaiter:
    def __init__(self):
        self._bodies: dict[tuple[int, int], list] = {}
        self._done: dict[tuple[int, int], threading.Event] = {}
        self._xid_lock = threading.Lock()

    def request(self, dp, req, timeout: float = 2.0) -> list:
        """Send `req` on `dp` and wait for every part of its reply (whatever arrived by the timeout)."""
        with self._xid_lock:
            dp.set_xid(req)
        key = (dp.id, req.xid)
        self._bodies[key] = []
        done = self._done[key] = threading.Event()
        dp.send_msg(req)
        done.wait(timeout)
        self._done.pop(key, None)
        return self._bodies.pop(key, [])

    def reply(self, msg) -> None:
        key = (msg.datapath.id, msg.xid)
        if key in self._bodies:
            self._bodies[key].extend(msg.body)
            if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                self._done[key].set()
