"""How far userspace OVS is behind: the frames waiting in its receive sockets, per switch port.

Userspace OVS receives each port's frames through a packet socket of its own (bootstrap gives each 16 MB, so
that none is dropped there) and forwards every port's from one thread. While that thread is behind, a port's
frames wait in its socket: they have left the upstream queue, so a PFC pause no longer holds them, and they
reach their egress queue late and together. Measured (a 7-to-1 DCQCN incast over the roce transport at scale
10,000): up to 1.5 MB of socket memory in all, 410 KB at one aggregation port (~35 ms of its rate), and
the lossless queue fed by it past XOFF + headroom with a PFC reaction of at most 2.5 ms. A late pause is then the
fabric's CPU, not the agent.

What is read is each socket's memory (/proc/net/packet's Rmem: every frame's buffer, about twice a 1 KB frame),
every PERIOD_S, for the sockets ovs-vswitchd holds; the peak between two of the sampler's rows goes in the row.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

PERIOD_S = 0.02  # a backlog that makes a pause late lasts tens of ms (above); 50 reads a second cost ~1% of a core
PACKET_SOCKETS = Path("/proc/net/packet")


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets process `pid` holds (its descriptors' `socket:[inode]` links)."""
    out = set()
    fds = Path(f"/proc/{pid}/fd")
    for fd in fds.iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue  # closed since the listing
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def waiting(text: str, inodes: set[int]) -> dict[int, int]:
    """Socket memory per interface index, from /proc/net/packet's text, for the sockets whose inode is given.

    Its columns: sk RefCnt Type Proto Iface R Rmem User Inode."""
    out: dict[int, int] = {}
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 9 and int(f[8]) in inodes and int(f[6]):
            out[int(f[4])] = out.get(int(f[4]), 0) + int(f[6])
    return out


@dataclass(frozen=True)
class Peak:
    bytes: int = 0  # socket memory
    port: str | None = None  # the switch port (`node:port`) it waited at


class RxBacklog:
    """A thread reading OVS's receive sockets every PERIOD_S; `take()` is the peak since the last take.

    ports: interface index (root namespace) -> switch port key, for the ports OVS receives on."""

    def __init__(self, pid: int, ports: dict[int, str], period: float = PERIOD_S):
        self.ports, self.period = ports, period
        self.inodes = socket_inodes(pid)
        self.error: str | None = None  # why reading stopped, if it did: then rows carry no peak
        self._peak = Peak()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hpnlab-ovs-backlog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.period):
                per_port = waiting(PACKET_SOCKETS.read_text(), self.inodes)
                if not per_port:
                    continue
                ifindex, b = max(per_port.items(), key=lambda kv: kv[1])
                with self._lock:
                    if b > self._peak.bytes:
                        self._peak = Peak(b, self.ports.get(ifindex, f"ifindex {ifindex}"))
        except (OSError, ValueError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"[:200]
            log.warning("OVS's receive backlog is no longer read: %s", self.error)

    def take(self) -> Peak | None:
        """The peak since the last take (None once reading has failed: not known, not zero)."""
        with self._lock:
            peak, self._peak = self._peak, Peak()
        return None if self.error else peak

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
