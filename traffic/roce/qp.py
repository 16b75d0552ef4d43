"""One queue pair's send side as a RoCE NIC runs it (pure code: the caller gives the time and does the I/O):
a message cut at the path MTU into SEND packets, paced at the QP's rate (DCQCN's when it runs, else the line
rate), sent again from where go-back-N says.

Pacing counts what the emulated link's shaper counts for each frame (Ethernet, IPv4, UDP and RoCE headers, the
payload, the ICRC; no preamble or FCS), so a QP at the line rate fills its port and no more. Rates and times are
the pacer's: the emulated line rate and wall seconds; the reaction point is given its parameters in the same
units (the fabric's rates over bytes scale x dilation, its timers times the dilation, as testbed/qos/cc.py does
for the TCP stand-in's DCQCN).
"""

from __future__ import annotations

from dataclasses import dataclass

from .dcqcn import ReactionPoint
from .frames import BTH_LEN, ICRC_LEN, OP_SEND_FIRST, OP_SEND_LAST, OP_SEND_MIDDLE, OP_SEND_ONLY, Header
from .gbn import Reply, Requester

PATH_MTU = 1024  # RoCE's path MTU over 1500-byte Ethernet
FRAME_OVERHEAD = 14 + 20 + 8 + BTH_LEN + ICRC_LEN  # Ethernet, IPv4, UDP, BTH, ICRC: 58 bytes


@dataclass(frozen=True)
class Packet:
    """What to put on the wire next: the packet's place in the message, its PSN, opcode, AckReq and length."""

    index: int
    psn: int
    opcode: int
    ackreq: bool
    payload: int

    @property
    def frame_bytes(self) -> int:
        return self.payload + FRAME_OVERHEAD


class SendQueue:
    """A message of `nbytes` on one QP. `rp`: DCQCN's reaction point (None: the line rate, no congestion
    control, as RoCE without DCQCN)."""

    def __init__(self, nbytes: int, first_psn: int, line_bps: float, rp: ReactionPoint | None = None,
                 mtu: int = PATH_MTU):
        if nbytes < 1 or mtu < 1:
            raise ValueError(f"a message of {nbytes} bytes at a path MTU of {mtu}")
        self.nbytes, self.mtu, self.line_bps, self.rp = nbytes, mtu, line_bps, rp
        self.req = Requester(first_psn, -(-nbytes // mtu))
        self._free_at = float("-inf")  # when the pacer lets the next packet go

    @property
    def done(self) -> bool:
        return self.req.done

    def rate(self, now: float) -> float:
        return self.line_bps if self.rp is None else self.rp.rate(now)

    def due(self, now: float) -> float:
        """When the next packet may leave (now or later); the caller sleeps until then."""
        return max(now, self._free_at)

    def pop(self, now: float) -> Packet | None:
        """The next packet if the pacer lets it go `now`, else None (also when every packet is out, waiting for
        ACKs)."""
        if now < self._free_at:
            return None
        taken = self.req.take()
        if taken is None:
            return None
        i, psn, ackreq = taken
        pkt = Packet(i, psn, self._opcode(i), ackreq, self._payload(i))
        self._free_at = max(self._free_at, now) + pkt.frame_bytes * 8 / self.rate(now)
        return pkt

    def on_ack(self, h: Header) -> None:
        """An ACK or NAK of this QP (from frames.parse)."""
        self.req.on_reply(Reply(h.is_nak, h.psn, h.msn or 0))

    def on_cnp(self, now: float) -> None:
        if self.rp is not None:
            self.rp.on_cnp(now)

    def on_timeout(self) -> None:
        self.req.on_timeout()

    def _payload(self, i: int) -> int:
        return min(self.mtu, self.nbytes - i * self.mtu)

    def _opcode(self, i: int) -> int:
        last = self.req.total - 1
        if last == 0:
            return OP_SEND_ONLY
        return OP_SEND_FIRST if i == 0 else OP_SEND_LAST if i == last else OP_SEND_MIDDLE
