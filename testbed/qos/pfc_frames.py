"""802.1Qbb PAUSE frames on the wire, for watching (`pfc.frames`): the gates (shaper.py) enforce a pause, these
show it to tcpdump or Wireshark on the link."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class PauseFrames:
    """802.1Qbb frames on a raw socket of the root namespace (where every switch port lives)."""

    def __init__(self):
        import socket

        from scapy.contrib.mac_control import MACControlClassBasedFlowControl
        from scapy.layers.l2 import Ether

        def frame(prio: int, quanta: int) -> bytes:
            return bytes(Ether(dst="01:80:c2:00:00:01", src="02:00:00:ff:ff:fe", type=0x8808)
                         / MACControlClassBasedFlowControl(**{f"c{prio}_enabled": 1, f"c{prio}_pause_time": quanta}))

        self._bytes = {(prio, pause): frame(prio, 0xFFFF if pause else 0) for prio in range(8)
                       for pause in (True, False)}
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)

    def send(self, ifname: str, priority: int, pause: bool) -> None:
        try:
            self._sock.sendto(self._bytes[priority, pause], (ifname, 0))
        except OSError as exc:  # a port going away mid-run is not worth stopping the agent for
            log.debug("PFC frame on %s: %s", ifname, exc)
