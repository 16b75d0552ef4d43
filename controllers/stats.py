"""Requests whose replies a caller waits for, matched by xid: statistics (answered in several multipart replies)
and barriers (one bodiless reply: the switch has applied everything sent before it)."""

from __future__ import annotations

import threading
import time


class StatsWaiter:
    def __init__(self):
        self._bodies: dict[tuple[int, int], list] = {}
        self._done: dict[tuple[int, int], threading.Event] = {}
        self._xid_lock = threading.Lock()

    def request(self, dp, req, timeout: float = 2.0) -> list:
        """Send `req` on `dp` and wait for every part of its reply (whatever arrived by the timeout)."""
        key = self._send(dp, req)
        self._done[key].wait(timeout)
        return self._collect(key)

    def request_all(self, pairs: list[tuple[object, object]], timeout: float = 5.0) -> int:
        """Send every (dp, req) at once, then wait for all their replies within one `timeout`: switches answer
        in parallel. Returns how many did not answer in time."""
        keys = [self._send(dp, req) for dp, req in pairs]
        deadline = time.monotonic() + timeout
        late = sum(not self._done[k].wait(max(0.0, deadline - time.monotonic())) for k in keys)
        for k in keys:
            self._collect(k)
        return late

    def reply(self, msg) -> None:
        key = (msg.datapath.id, msg.xid)
        if key in self._bodies:
            self._bodies[key].extend(getattr(msg, "body", None) or [])
            if not getattr(msg, "flags", 0) & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                self._done[key].set()

    def _send(self, dp, req) -> tuple[int, int]:
        with self._xid_lock:
            dp.set_xid(req)
        key = (dp.id, req.xid)
        self._bodies[key] = []
        self._done[key] = threading.Event()
        dp.send_msg(req)
        return key

    def _collect(self, key: tuple[int, int]) -> list:
        self._done.pop(key, None)
        return self._bodies.pop(key, [])
