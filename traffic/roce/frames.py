"""RoCEv2 frames as a NIC puts them on the wire (pure code): the Base Transport Header, the ACK Extended
Transport Header, congestion notification packets and the invariant CRC.

Layouts from the InfiniBand Architecture Specification vol. 1 (BTH 9.2, AETH 9.3.5, ICRC 7.8) and its RoCEv2
annex A17 (UDP destination port 4791, the ICRC over a masked IP/UDP pseudo-header, CNP opcode 0x81). Packed
with `struct` for the transport's per-frame path; the tests decode them with scapy's RoCE layers, which is what
tcpdump and Wireshark show.

Messages go as SEND (first/middle/last/only): NCCL's IB transport writes with RDMA WRITE, whose first packet
carries a 16-byte RETH more; the difference is 16 bytes a message, and this transport registers no memory.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

ROCE_PORT = 4791
PSN_MASK = 0xFFFFFF
PSN_HALF = 1 << 23

OP_SEND_FIRST, OP_SEND_MIDDLE, OP_SEND_LAST, OP_SEND_ONLY = 0x00, 0x01, 0x02, 0x04  # RC
OP_ACK = 0x11  # RC ACKNOWLEDGE
OP_CNP = 0x81  # RoCEv2 congestion notification

# AETH syndromes (IBA 9.7.5.1.1): an ACK with no credit count (0x1F: "invalid", RC without end-to-end credits),
# and the NAK for a PSN sequence error, the one go-back-N answers
SYN_ACK = 0x1F
SYN_NAK_SEQ = 0x60

_BTH = struct.Struct("!BBHII")  # opcode; SE|M|pad|TVer; P_Key; FECN|BECN|resv6 and DestQP; AckReq|resv7 and PSN
_AETH = struct.Struct("!I")  # syndrome and MSN
BTH_LEN, AETH_LEN, ICRC_LEN = _BTH.size, _AETH.size, 4
CNP_RESERVED = 16  # a CNP's payload: 16 reserved bytes
_FECN, _BECN = 0x80000000, 0x40000000
_ACKREQ = 0x80000000
DEFAULT_PKEY = 0xFFFF


def psn_add(psn: int, n: int) -> int:
    return (psn + n) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """a - b in 24-bit serial arithmetic: how far `a` is ahead of `b` (negative: behind), |result| < 2^23."""
    d = (a - b) & PSN_MASK
    return d - (1 << 24) if d >= PSN_HALF else d


@dataclass(frozen=True)
class Header:
    """What a receiver reads off a frame's transport headers."""

    opcode: int
    dqpn: int
    psn: int
    ackreq: bool = False
    fecn: bool = False
    becn: bool = False
    syndrome: int | None = None  # ACKs only
    msn: int | None = None  # ACKs only

    @property
    def is_nak(self) -> bool:
        return self.syndrome is not None and self.syndrome & 0xE0 == 0x60


def bth(opcode: int, dqpn: int, psn: int, ackreq: bool = False, fecn: bool = False, becn: bool = False,
        pad: int = 0, pkey: int = DEFAULT_PKEY) -> bytes:
    """A Base Transport Header (transport version 0, no migration, solicited event off)."""
    word = (dqpn & PSN_MASK) | (_FECN if fecn else 0) | (_BECN if becn else 0)
    return _BTH.pack(opcode, (pad & 3) << 4, pkey, word, (psn & PSN_MASK) | (_ACKREQ if ackreq else 0))


def ack(dqpn: int, psn: int, msn: int) -> bytes:
    """An ACK of every packet up to and including `psn` (coalesced: one for many)."""
    return bth(OP_ACK, dqpn, psn) + _AETH.pack(SYN_ACK << 24 | msn & PSN_MASK)


def nak_sequence(dqpn: int, expected: int, msn: int) -> bytes:
    """A NAK for a PSN sequence error: `expected` is the PSN the responder waits for, where go-back-N resumes."""
    return bth(OP_ACK, dqpn, expected) + _AETH.pack(SYN_NAK_SEQ << 24 | msn & PSN_MASK)


def cnp(dqpn: int) -> bytes:
    """A congestion notification packet to the sender's QP (BECN set, 16 reserved bytes)."""
    return bth(OP_CNP, dqpn, 0, becn=True) + bytes(CNP_RESERVED)


def parse(data: bytes | memoryview) -> Header:
    """The headers of a frame's UDP payload (BTH, and the AETH of an ACK). ValueError for a runt."""
    if len(data) < BTH_LEN:
        raise ValueError(f"a RoCEv2 payload of {len(data)} bytes: shorter than a BTH")
    opcode, _flags, _pkey, word, last = _BTH.unpack_from(data)
    syndrome = msn = None
    if opcode == OP_ACK:
        if len(data) < BTH_LEN + AETH_LEN:
            raise ValueError(f"an ACK of {len(data)} bytes: no AETH")
        (aeth,) = _AETH.unpack_from(data, BTH_LEN)
        syndrome, msn = aeth >> 24, aeth & PSN_MASK
    return Header(opcode, word & PSN_MASK, last & PSN_MASK, bool(last & _ACKREQ), bool(word & _FECN),
                  bool(word & _BECN), syndrome, msn)


def icrc(ip_header: bytes, udp_header: bytes, transport: bytes) -> bytes:
    """The invariant CRC of an IPv4 RoCEv2 packet (A17.8): CRC-32 over 8 bytes of ones (the absent LRH), the IP
    header with TOS, TTL and checksum set to ones, the UDP header with its checksum set to ones, and the BTH
    (FECN, BECN and reserved bits set to ones) with its payload; appended least significant byte first."""
    ip = bytearray(ip_header)
    ip[1], ip[8], ip[10:12] = 0xFF, 0xFF, b"\xff\xff"
    udp = bytearray(udp_header)
    udp[6:8] = b"\xff\xff"
    tr = bytearray(transport)
    tr[4] = 0xFF
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + ip + udp + tr) & 0xFFFFFFFF)
