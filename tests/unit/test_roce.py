"""RoCEv2's transport, pure parts (traffic/roce): frames as scapy's RoCE layers (what Wireshark shows) decode them,
the invariant CRC as scapy computes it, PSN arithmetic across the wrap, and go-back-N delivering every packet
once and in order whatever is lost."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.contrib.roce import AETH, BTH, CNPPadding
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from traffic.roce.frames import (
    OP_ACK,
    OP_CNP,
    OP_SEND_MIDDLE,
    PSN_MASK,
    ROCE_PORT,
    SYN_NAK_SEQ,
    ack,
    bth,
    cnp,
    icrc,
    nak_sequence,
    parse,
    psn_add,
    psn_diff,
)
from traffic.roce.gbn import Reply, Requester, Responder


def _wire(transport: bytes, sport: int = 49152) -> IP:
    """The frame as the NIC sends it: IPv4 / UDP to 4791 (checksum 0, as RoCEv2 sends) / BTH..., ICRC added."""
    pkt = IP(src="10.0.0.1", dst="10.0.1.2", tos=26 << 2, id=7, flags="DF") / UDP(sport=sport, dport=ROCE_PORT,
                                                                                     chksum=0)
    pkt = IP(bytes(pkt / Raw(transport + bytes(4))))  # lengths filled in as sent, ICRC's room included
    raw = bytes(pkt)
    return IP(raw[:-4] + icrc(raw[:20], raw[20:28], transport))


def test_a_data_packet_decodes_as_roce_and_its_icrc_is_scapys():
    payload = bytes(range(256)) * 4
    frame = _wire(bth(OP_SEND_MIDDLE, dqpn=0x123456, psn=0xFFFFFE, ackreq=True) + payload)
    b = frame[BTH]
    assert (b.opcode, b.dqpn, b.psn, b.ackreq, b.pkey, b.fecn, b.becn) == (OP_SEND_MIDDLE, 0x123456, 0xFFFFFE, 1,
                                                                         0xFFFF, 0, 0)
    assert bytes(b.payload)[:len(payload)] == payload
    rebuilt = IP(bytes(frame))
    rebuilt[BTH].icrc = None  # scapy computes it again
    assert bytes(rebuilt)[-4:] == bytes(frame)[-4:]
    h = parse(bytes(frame[UDP].payload))
    assert (h.opcode, h.dqpn, h.psn, h.ackreq, h.syndrome) == (OP_SEND_MIDDLE, 0x123456, 0xFFFFFE, True, None)


def test_acks_naks_and_cnps_decode_as_their_headers():
    a = _wire(ack(dqpn=9, psn=100, msn=3))
    assert (a[BTH].opcode, a[BTH].psn, a[AETH].syndrome, a[AETH].msn) == (OP_ACK, 100, 0x1F, 3)
    n = _wire(nak_sequence(dqpn=9, expected=101, msn=3))
    assert (n[AETH].syndrome, n[BTH].psn) == (SYN_NAK_SEQ, 101) and parse(bytes(n[UDP].payload)).is_nak
    assert not parse(bytes(a[UDP].payload)).is_nak
    c = _wire(cnp(dqpn=0xABCDEF))
    assert (c[BTH].opcode, c[BTH].dqpn, c[BTH].becn) == (OP_CNP, 0xABCDEF, 1) and c.haslayer(CNPPadding)


@given(st.integers(0, PSN_MASK), st.integers(-(1 << 23) + 1, (1 << 23) - 1))
def test_psn_arithmetic_wraps_at_24_bits(psn, n):
    assert psn_diff(psn_add(psn, n), psn) == n


def _run(total: int, window: int, lost, first_psn: int = 0, ack_lost=lambda _r: False, coalesce: int = 16):
    """A QP over a path holding `window` packets: each round the requester fills the path, the responder takes
    what arrives (`lost(index, attempt)` drops one on the way), its replies come back (`ack_lost` drops some);
    a round with nothing heard is a retry timeout. Returns the two ends and the PSNs the responder accepted."""
    req, resp = Requester(first_psn, total), Responder(first_psn, coalesce=coalesce)
    attempts: dict[int, int] = {}
    accepted = []
    for _round in range(100 * total):
        if req.done:
            break
        flight = []
        while len(flight) < window and (p := req.take()) is not None:
            flight.append(p)
        heard = False
        for i, psn, ackreq in flight:
            attempts[i] = attempts.get(i, 0) + 1
            if lost(i, attempts[i]):
                continue
            ok, reply = resp.on_packet(psn, ackreq, last_of_message=i == total - 1)
            if ok:
                accepted.append(psn)
            if reply is not None and not ack_lost(reply):
                req.on_reply(reply)
                heard = True
        if not heard:
            req.on_timeout()
    return req, resp, accepted


def test_one_lost_packet_costs_what_was_sent_after_it_again():
    """Packet 3 of a 16-packet window is lost: the responder NAKs at packet 4 and drops 4..15; the requester
    goes back to 3 and sends 3..15 again: 13 resent for 1 lost."""
    req, resp, accepted = _run(total=16, window=16, lost=lambda i, n: i == 3 and n == 1)
    assert req.done and accepted == list(range(16))
    assert (req.resent, req.rewinds, resp.dropped) == (13, 1, 12)


@settings(max_examples=200, deadline=None)
@given(total=st.integers(1, 300), window=st.integers(1, 64), seed=st.integers(0, 2**32 - 1),
       loss=st.floats(0, 0.3), ack_loss=st.floats(0, 0.3), first=st.integers(0, PSN_MASK))
def test_go_back_n_delivers_every_packet_once_and_in_order(total, window, seed, loss, ack_loss, first):
    rng = random.Random(seed)
    req, resp, accepted = _run(total, window, lambda i, n: rng.random() < loss, first_psn=first,
                               ack_lost=lambda r: rng.random() < ack_loss)
    assert req.done, (req, resp)
    assert accepted == [psn_add(first, i) for i in range(total)]
    assert req.sent == total + req.resent and resp.msn == 1


def test_a_stale_or_foreign_reply_changes_nothing():
    req = Requester(first_psn=1000, total=10)
    for _ in range(5):
        req.take()
    req.on_reply(Reply(nak=False, psn=1000 + 7, msn=0))  # past what was sent
    req.on_reply(Reply(nak=True, psn=500, msn=0))  # before the message
    assert (req.una, req.next, req.rewinds) == (0, 5, 0)
    req.on_reply(Reply(nak=False, psn=1002, msn=0))
    assert req.una == 3
