"""Pinning declared precise flows to the host port the controller chose, by 5-tuple (policy routing).

This is how an HPN host picks a path: the port (plane) here, the rest by the
exact-match rules the controller put on the switches. After a failure the
controller re-places broken flows; `follow` moves their pinning along.
"""

from __future__ import annotations

import threading
import time

from controllers.client import ControllerClient


def steer_match(flow: dict) -> str:
    return f"to {flow['dst']} ipproto {flow['proto']} sport {flow['sport']} dport {flow['dport']}"


def rule_priority(flow: dict) -> int:
    return 1000 + flow["cookie"] % 30000


class Steering:
    def __init__(self, node_of):
        self.node_of = node_of
        self.steered: dict[str, dict] = {}  # flow key -> the controller's view of it
        # The replay pins and unpins flows while the failure injector's thread moves them: a flow
        # unpinned in between must not come back pinned.
        self._lock = threading.RLock()

    def steer(self, flow: dict) -> None:
        e = flow["egress"]
        table = 100 + e["port"]
        with self._lock:
            self.node_of(flow["src"]).cmd(
                f"ip route replace {flow['dst']}/32 dev {e['ifname']} table {table}; "
                f"ip rule add {steer_match(flow)} lookup {table} priority {rule_priority(flow)}")
            self.steered[flow["flow"]] = flow

    def unsteer(self, flow: dict) -> None:
        with self._lock:
            self.node_of(flow["src"]).cmd(f"ip rule del {steer_match(flow)} priority {rule_priority(flow)}")
            self.steered.pop(flow["flow"], None)

    def follow(self, controller: ControllerClient, events_before: int, wait_s: float = 2.0) -> None:
        """After the controller re-placed precise flows, move their host pinning to the new ports."""
        deadline = time.monotonic() + wait_s
        while len(controller.get("/events")) <= events_before and time.monotonic() < deadline:
            time.sleep(0.02)  # the controller hears the port status a few ms after the link changed
        for view in controller.get("/flows"):
            with self._lock:
                old = self.steered.get(view["flow"])
                if old is not None and view["egress"] is not None and view["egress"] != old["egress"]:
                    self.unsteer(old)
                    self.steer(view)
