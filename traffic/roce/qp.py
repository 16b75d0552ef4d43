"""One queue pair's send side as a RoCE NIC runs it (pure code: the caller gives the time and does the I/O):
messages posted in order, each cut at the path MTU into SEND packets, paced at the QP's rate (DCQCN's when it
runs, else the line rate), sent again from where go-back-N says.

Pacing counts what the emulated link's shaper counts for each frame (Ethernet, IPv4, UDP and RoCE headers, the
payload, the ICRC; no preamble or FCS), so a QP at the line rate fills its port and no more. Rates and times are
the pacer's: the emulated line rate and wall seconds; the reaction point is given its parameters in the same
units (the fabric's rates over bytes scale x dilation, its timers times the dilation, as testbed/qos/cc.py does
for the TCP stand-in's DCQCN).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from .dcqcn import ReactionPoint
from .frames import BTH_LEN, ICRC_LEN, OP_SEND_FIRST, OP_SEND_LAST, OP_SEND_MIDDLE, OP_SEND_ONLY, Header
from .gbn import Reply, Requester

PATH_MTU = 1024  # RoCE's path MTU over 1500-byte Ethernet
FRAME_OVERHEAD = 14 + 20 + 8 + BTH_LEN + ICRC_LEN  # Ethernet, IPv4, UDP, BTH, ICRC: 58 bytes


@dataclass(frozen=True)
class Packet:
    """What to put on the wire next: its message, its place in the stream, its PSN, opcode, AckReq, and the
    byte offset and length of its payload in the message."""

    message: int
    index: int
    psn: int
    opcode: int
    ackreq: bool
    offset: int
    payload: int

    @property
    def frame_bytes(self) -> int:
        return self.payload + FRAME_OVERHEAD


@dataclass(frozen=True)
class _Message:
    first: int  # its first packet's index in the QP's stream
    count: int
    nbytes: int


class SendQueue:
    """One QP's send queue: messages posted in order (`post`), sent as one stream of PSNs, each complete once
    all its packets are acknowledged. `rp`: DCQCN's reaction point (None: the line rate, no congestion control,
    as RoCE without DCQCN)."""

    def __init__(self, first_psn: int, line_bps: float, rp: ReactionPoint | None = None, mtu: int = PATH_MTU):
        if mtu < 1:
            raise ValueError(f"a path MTU of {mtu}")
        self.mtu, self.line_bps, self.rp = mtu, line_bps, rp
        self.req = Requester(first_psn)
        self._messages: list[_Message] = []
        self._starts: list[int] = []  # each message's first packet: bisect finds a packet's message
        self._completed = 0  # messages whose every packet is acknowledged
        self._free_at = float("-inf")  # when the pacer lets the next packet go

    def post(self, nbytes: int) -> int:
        """A message of `nbytes` at the end of the queue; its number (0, 1, ...)."""
        if nbytes < 1:
            raise ValueError(f"a message of {nbytes} bytes")
        count = -(-nbytes // self.mtu)
        self._messages.append(_Message(self.req.total, count, nbytes))
        self._starts.append(self.req.total)
        self.req.extend(count)
        return len(self._messages) - 1

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
        k = bisect_right(self._starts, i) - 1
        m = self._messages[k]
        j = i - m.first
        offset = j * self.mtu
        pkt = Packet(k, i, psn, _opcode(j, m.count), ackreq or j == m.count - 1, offset,
                     min(self.mtu, m.nbytes - offset))
        self._free_at = max(self._free_at, now) + pkt.frame_bytes * 8 / self.rate(now)
        return pkt

    def on_ack(self, h: Header) -> list[int]:
        """An ACK or NAK of this QP (from frames.parse); the messages it completed."""
        self.req.on_reply(Reply(h.is_nak, h.psn, h.msn or 0))
        done = []
        while self._completed < len(self._messages):
            m = self._messages[self._completed]
            if m.first + m.count > self.req.una:
                break
            done.append(self._completed)
            self._completed += 1
        return done

    def on_cnp(self, now: float) -> None:
        if self.rp is not None:
            self.rp.on_cnp(now)

    def on_timeout(self) -> None:
        self.req.on_timeout()


def _opcode(j: int, count: int) -> int:
    """The SEND opcode of a message's j-th of `count` packets."""
    if count == 1:
        return OP_SEND_ONLY
    return OP_SEND_FIRST if j == 0 else OP_SEND_LAST if j == count - 1 else OP_SEND_MIDDLE
