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
    """One ping from every host to every other host's every NIC address.

    Each host runs one fping over a target file (no command line grows with the
    fabric); `wave` hosts at a time, so the first packets' ARP (answered by the
    controller) does not arrive as one burst of hosts x targets.
    """
    addrs = all_addresses(topo)
    sent = received = 0
    failures: list[tuple[str, str]] = []
    hosts = list(topo.hosts)
    for i in range(0, len(hosts), wave):
        running = []
        for h in hosts[i:i + wave]:
            targets = [a.ip for a in addrs if a.host != h.name]
            f = workdir.write(f"{h.short}.targets", targets)
            running.append((h, targets, node_of(h.name).popen(
                ["fping", "-c1", "-q", f"-t{int(timeout_s * 1000)}", "-i1", "-f", f],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)))
        for h, targets, p in running:
            got = fping_received(p.communicate(timeout=timeout_s + 30 + 0.01 * len(targets))[1])
            for ip in targets:
                sent += 1
                if got.get(ip, 0) > 0:
                    received += 1
                else:
                    failures.append((h.name, ip))
    return PingResult(sent, received, failures)


def port_counters(topo: Topology) -> dict[str, dict[int, dict[str, int]]]:
    """tx/rx bytes and drops of every switch port, read from OVS itself (independent of the controller)."""
    out: dict[str, dict[int, dict[str, int]]] = {}
    for sw in topo.switches:
        text = run([*OFCTL, "dump-ports", sw.short]).stdout
        out[sw.name] = {int(m[0]): {"rx_packets": int(m[1]), "rx_bytes": int(m[2]), "rx_dropped": int(m[3]),
                                    "tx_packets": int(m[4]), "tx_bytes": int(m[5]), "tx_dropped": int(m[6])}
                        for m in _PORT_STATS.findall(text)}
    return out
