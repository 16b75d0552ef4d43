"""Checks and counters on a running network: all-pairs ping, OVS's own port counters."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from topos.addressing import all_addresses
from topos.model import Topology

from .routes import OFCTL, run
from .workdir import Workdir

PING_WAVE = 8  # hosts pinging at once

_PORT_STATS = re.compile(r"port\s+(\d+): rx pkts=(\d+), bytes=(\d+), drop=(\d+).*?tx pkts=(\d+), bytes=(\d+), "
                         r"drop=(\d+)", re.S)


@dataclass
class PingResult:
    sent: int
    received: int
    failures: list[tuple[str, str]]

    @property
    def loss(self) -> float:
        return 1 - self.received / self.sent if self.sent else 0.0


_FPING_LINE = re.compile(r"^(\S+)\s*: xmt/rcv/%loss = (\d+)/(\d+)/")


def fping_received(stderr: str) -> dict[str, int]:
    """Target -> replies, from `fping -c N -q` (one summary line per target on stderr)."""
    return {m[1]: int(m[3]) for m in map(_FPING_LINE.match, stderr.splitlines()) if m}


def pingall(topo: Topology, node_of, workdir: Workdir, timeout_s: float = 2.0, wave: int = PING_WAVE) -> PingResult:
    """One ping from every host to every other host's every NIC address, and one more for the misses.

    Each host runs one fping over a target file (no command line grows with the
    fabric); `wave` hosts at a time, so the first packets' ARP (answered by the
    controller) does not arrive as one burst of hosts x targets. A target that
    did not answer is pinged once more after the first pass (with three times
    the timeout): a first ping can outlive its timeout waiting for an ARP answer
    from a slow controller (seen under TCG), which the second finds in place.
    """
    addrs = all_addresses(topo)
    todo = {h.name: [a.ip for a in addrs if a.host != h.name] for h in topo.hosts}
    sent = sum(len(t) for t in todo.values())
    for attempt, timeout in enumerate((timeout_s, 3 * timeout_s)):
        missed: dict[str, list[str]] = {}
        names = [h for h in todo if todo[h]]
        for i in range(0, len(names), wave):
            running = []
            for host in names[i:i + wave]:
                f = workdir.write(f"{topo.nodes[host].short}.targets{attempt}", todo[host])
                running.append((host, node_of(host).popen(
                    ["fping", "-c1", "-q", f"-t{int(timeout * 1000)}", "-i1", "-f", f],
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
            for host, p in running:
                got = fping_received(p.communicate(timeout=timeout + 30 + 0.01 * len(todo[host]))[1])
                missed[host] = [ip for ip in todo[host] if got.get(ip, 0) == 0]
        todo = missed
    failures = [(h, ip) for h, ips in todo.items() for ip in ips]
    return PingResult(sent, sent - len(failures), failures)


def port_counters(topo: Topology) -> dict[str, dict[int, dict[str, int]]]:
    """tx/rx bytes and drops of every switch port, read from OVS itself (independent of the controller)."""
    out: dict[str, dict[int, dict[str, int]]] = {}
    for sw in topo.switches:
        text = run([*OFCTL, "dump-ports", sw.short]).stdout
        out[sw.name] = {int(m[0]): {"rx_packets": int(m[1]), "rx_bytes": int(m[2]), "rx_dropped": int(m[3]),
                                    "tx_packets": int(m[4]), "tx_bytes": int(m[5]), "tx_dropped": int(m[6])}
                        for m in _PORT_STATS.findall(text)}
    return out
