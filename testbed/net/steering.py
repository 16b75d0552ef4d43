"""Pinning declared precise flows to the host port the controller chose, by 5-tuple (policy routing).

This is how an HPN host picks a path: the port (plane) here, the rest by the
exact-match rules the controller put on the switches. After a failure the
controller re-places broken flows; `follow` moves their pinning along.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import threading
import time

from controllers.client import ControllerClient

IFNAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,14}")  # Linux: at most 15 characters
IP_TIMEOUT_S = 10.0


def steer_match(flow: dict) -> list[str]:
    """The `ip rule` selector of a flow, as arguments (fields checked: they come from the controller's REST)."""
    return ["to", _address(flow["dst"]), "ipproto", _choice("proto", flow["proto"], ("tcp", "udp")),
            "sport", str(_port("sport", flow["sport"])), "dport", str(_port("dport", flow["dport"]))]


def rule_priority(flow: dict) -> int:
    return 1000 + flow["cookie"] % 30000


def _address(v: object) -> str:
    try:
        return str(ipaddress.IPv4Address(v))
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise ValueError(f"dst={v!r}: not an IPv4 address") from None


def _choice(field: str, v: object, allowed: tuple[str, ...]) -> str:
    if v not in allowed:
        raise ValueError(f"{field}={v!r}: use one of {', '.join(allowed)}")
    return v


def _port(field: str, v: object) -> int:
    if type(v) is not int or not 0 <= v <= 65535:
        raise ValueError(f"{field}={v!r}: a port is an integer 0..65535")
    return v


def _ifname(v: object) -> str:
    if not isinstance(v, str) or not IFNAME.fullmatch(v):
        raise ValueError(f"egress.ifname={v!r}: not an interface name")
    return v


def ip(node, *args: str) -> None:
    """`ip ARGS` in the node's namespace as an argument list (no shell); a failure raises with ip's own words."""
    p = node.popen(["ip", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _out, err = p.communicate(timeout=IP_TIMEOUT_S)
    if p.returncode:
        raise RuntimeError(f"ip {' '.join(args)} on {node.name} failed: {err.strip() or f'exit {p.returncode}'}")


class Steering:
    def __init__(self, node_of):
        self.node_of = node_of
        self.steered: dict[str, dict] = {}  # flow key -> the controller's view of it
        # The replay pins and unpins flows while the failure injector's thread moves them: a flow
        # unpinned in between must not come back pinned.
        self._lock = threading.RLock()

    def steer(self, flow: dict) -> None:
        e = flow["egress"]
        table = str(100 + _port("egress.port", e["port"]))
        match, dev = steer_match(flow), _ifname(e["ifname"])
        with self._lock:
            node = self.node_of(flow["src"])
            ip(node, "route", "replace", f"{match[1]}/32", "dev", dev, "table", table)
            ip(node, "rule", "add", *match, "lookup", table, "priority", str(rule_priority(flow)))
            self.steered[flow["flow"]] = flow

    def unsteer(self, flow: dict) -> None:
        with self._lock:
            ip(self.node_of(flow["src"]), "rule", "del", *steer_match(flow), "priority", str(rule_priority(flow)))
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
