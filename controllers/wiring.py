"""Is the fabric wired as the topology says? LLDP out of every switch-to-switch port, compared with what arrives."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from topos.model import Topology

log = logging.getLogger("hpnlab.controller")

SETTLE_S = 5.0  # how long LLDP frames may take to come back


def expected_neighbours(topo: Topology) -> dict[tuple[str, int], tuple[str, int]]:
    """(switch, port) -> (switch, port) at the other end, for every switch-to-switch link."""
    out = {}
    for l in topo.links:
        if l.kind != "host-tor":
            out[l.a, l.a_port] = (l.b, l.b_port)
            out[l.b, l.b_port] = (l.a, l.a_port)
    return out


def wiring_mismatches(topo: Topology, seen: dict[tuple[str, int], tuple[str, int]], down: set[str]) -> list[dict]:
    """Ports whose LLDP neighbour (as `seen` from the sender's side) is not the topology's; down links excluded."""
    down_ports = {end for l in topo.links if l.name in down for end in ((l.a, l.a_port), (l.b, l.b_port))}
    out = []
    for (sw, port), want in sorted(expected_neighbours(topo).items()):
        got = seen.get((sw, port))
        if got != want and (sw, port) not in down_ports:
            out.append({"port": f"{sw}:{port}", "expected": f"{want[0]}:{want[1]}",
                        "seen": None if got is None else f"{got[0]}:{got[1]}"})
    return out


class WiringCheck:
    """Collects the LLDP frames that arrive and, once all were sent, reports the ports that disagree."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self.expected = expected_neighbours(topo)
        self.seen: dict[tuple[str, int], tuple[str, int]] = {}
        self.report: dict | None = None

    def heard(self, src: tuple[str, int], at: tuple[str, int]) -> None:
        self.seen[src] = at

    def run(self, send: Callable[[str, int], None], down: set[str]) -> dict:
        self.seen.clear()
        for sw, port in self.expected:
            send(sw, port)
        deadline = time.time() + SETTLE_S
        while time.time() < deadline and len(self.seen) < len(self.expected):
            time.sleep(0.05)
        mismatches = wiring_mismatches(self.topo, self.seen, down)
        self.report = {"checked_ports": len(self.expected), "seen": len(self.seen), "mismatches": mismatches}
        for m in mismatches:
            log.warning("wiring mismatch at %s: expected %s, LLDP saw %s", m["port"], m["expected"], m["seen"])
        if not mismatches:
            log.info("LLDP: all %d switch ports wired as the topology says", len(self.expected))
        return self.report
