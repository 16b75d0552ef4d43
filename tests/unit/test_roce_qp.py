"""One queue pair's send side (traffic/roce/qp.py): a message cut into SEND packets at the path MTU, paced at
the line rate or DCQCN's, and sent again from where go-back-N says."""

from __future__ import annotations

from pytest import approx

from traffic.roce.dcqcn import ReactionPoint, RpParams
from traffic.roce.frames import OP_SEND_FIRST, OP_SEND_LAST, OP_SEND_MIDDLE, OP_SEND_ONLY, ack, nak_sequence, parse
from traffic.roce.qp import FRAME_OVERHEAD, SendQueue

LINE = 20e6  # a 200G port at 1/10,000


def _drain(q: SendQueue, until: float = 10.0) -> list[tuple[float, object]]:
    """Every packet the pacer lets go, at its time, with nothing acknowledged (from when it may send)."""
    out, now = [], q.due(0.0)
    while now < until and (pkt := q.pop(now)) is not None:
        out.append((now, pkt))
        now = q.due(now)
    return out


def _queue(nbytes: int, first_psn: int = 0, **kw) -> SendQueue:
    q = SendQueue(first_psn=first_psn, line_bps=LINE, **kw)
    q.post(nbytes)
    return q


def test_a_message_is_cut_at_the_mtu_into_first_middle_last_with_ackreq_on_the_last():
    q = _queue(3 * 1024 + 100, first_psn=5)
    pkts = [p for _t, p in _drain(q)]
    assert [p.opcode for p in pkts] == [OP_SEND_FIRST, OP_SEND_MIDDLE, OP_SEND_MIDDLE, OP_SEND_LAST]
    assert [p.payload for p in pkts] == [1024, 1024, 1024, 100] and [p.psn for p in pkts] == [5, 6, 7, 8]
    assert [p.ackreq for p in pkts] == [False, False, False, True] and [p.offset for p in pkts] == [0, 1024, 2048, 3072]
    assert [p.opcode for _t, p in _drain(_queue(10))] == [OP_SEND_ONLY]


def test_messages_run_on_one_psn_stream_and_complete_when_their_last_packet_is_acknowledged():
    q = _queue(2048, first_psn=0xFFFFFE)  # the stream wraps at 2^24
    q.post(10)
    q.post(1500)
    pkts = [p for _t, p in _drain(q)]
    assert [(p.message, p.opcode, p.psn) for p in pkts] == [
        (0, OP_SEND_FIRST, 0xFFFFFE), (0, OP_SEND_LAST, 0xFFFFFF), (1, OP_SEND_ONLY, 0), (2, OP_SEND_FIRST, 1),
        (2, OP_SEND_LAST, 2)]
    assert [p.ackreq for p in pkts] == [False, True, True, False, True]
    assert q.on_ack(parse(ack(dqpn=1, psn=0xFFFFFF, msn=1))) == [0]
    assert q.on_ack(parse(ack(dqpn=1, psn=1, msn=2))) == [1]  # message 2's first packet: not yet complete
    assert (q.on_ack(parse(ack(dqpn=1, psn=2, msn=3))), q.done) == ([2], True)


def test_the_pacer_sends_at_the_line_rate_counting_every_frame_byte():
    q = _queue(100 * 1024)
    sent = _drain(q)
    (t0, _), (t1, last) = sent[0], sent[-1]
    bits = sum(p.frame_bytes for _t, p in sent[:-1]) * 8  # the last leaves at t1: the ones before took the time
    assert bits / (t1 - t0) == approx(LINE) and last.frame_bytes == 1024 + FRAME_OVERHEAD


def test_a_cnp_slows_the_pacer_to_dcqcns_rate():
    # the reaction point in the pacer's units (the transport scales the fabric's: cc.py's DcqcnParams.packed);
    # timers of a second here, so nothing recovers within the test
    rp = ReactionPoint(RpParams(line_bps=LINE, t_alpha_s=1, t_dec_s=1, t_inc_s=1, min_bps=LINE / 100))
    q = _queue(1000 * 1024, rp=rp)
    q.pop(0.0)
    q.on_cnp(0.0)  # the first CNP halves the rate
    t = q.due(0.0)
    p = q.pop(t)
    assert q.due(t) - t == approx(p.frame_bytes * 8 / (LINE / 2), rel=1e-6)


def test_a_nak_sends_again_from_the_psn_it_names():
    q = _queue(8 * 1024, first_psn=100)
    first = [p.psn for _t, p in _drain(q)]
    q.on_ack(parse(nak_sequence(dqpn=1, expected=103, msn=0)))
    again = [p.psn for _t, p in _drain(q, until=20.0)]
    assert first == list(range(100, 108)) and again == list(range(103, 108))
    assert (q.req.resent, q.done) == (5, False)
