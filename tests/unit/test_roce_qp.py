"""One queue pair's send side (traffic/roce/qp.py): a message cut into SEND packets at the path MTU, paced at
the line rate or DCQCN's, and sent again from where go-back-N says."""

from __future__ import annotations

from pytest import approx

from traffic.roce.dcqcn import ReactionPoint, RpParams
from traffic.roce.frames import OP_SEND_FIRST, OP_SEND_LAST, OP_SEND_MIDDLE, OP_SEND_ONLY, nak_sequence, parse
from traffic.roce.qp import FRAME_OVERHEAD, SendQueue

LINE = 20e6  # a 200G port at 1/10,000


def _drain(q: SendQueue, until: float = 10.0) -> list[tuple[float, object]]:
    """Every packet the pacer lets go, at its time, with nothing acknowledged (from when it may send)."""
    out, now = [], q.due(0.0)
    while now < until and (pkt := q.pop(now)) is not None:
        out.append((now, pkt))
        now = q.due(now)
    return out


def test_a_message_is_cut_at_the_mtu_into_first_middle_last_with_ackreq_on_the_last():
    q = SendQueue(nbytes=3 * 1024 + 100, first_psn=5, line_bps=LINE)
    pkts = [p for _t, p in _drain(q)]
    assert [p.opcode for p in pkts] == [OP_SEND_FIRST, OP_SEND_MIDDLE, OP_SEND_MIDDLE, OP_SEND_LAST]
    assert [p.payload for p in pkts] == [1024, 1024, 1024, 100] and [p.psn for p in pkts] == [5, 6, 7, 8]
    assert [p.ackreq for p in pkts] == [False, False, False, True]
    assert [p.opcode for _t, p in _drain(SendQueue(10, 0, LINE))] == [OP_SEND_ONLY]


def test_the_pacer_sends_at_the_line_rate_counting_every_frame_byte():
    q = SendQueue(nbytes=100 * 1024, first_psn=0, line_bps=LINE)
    sent = _drain(q)
    (t0, _), (t1, last) = sent[0], sent[-1]
    bits = sum(p.frame_bytes for _t, p in sent[:-1]) * 8  # the last leaves at t1: the ones before took the time
    assert bits / (t1 - t0) == approx(LINE) and last.frame_bytes == 1024 + FRAME_OVERHEAD


def test_a_cnp_slows_the_pacer_to_dcqcns_rate():
    # the reaction point in the pacer's units (the transport scales the fabric's: cc.py's DcqcnParams.packed);
    # timers of a second here, so nothing recovers within the test
    rp = ReactionPoint(RpParams(line_bps=LINE, t_alpha_s=1, t_dec_s=1, t_inc_s=1, min_bps=LINE / 100))
    q = SendQueue(nbytes=1000 * 1024, first_psn=0, line_bps=LINE, rp=rp)
    q.pop(0.0)
    q.on_cnp(0.0)  # the first CNP halves the rate
    t = q.due(0.0)
    p = q.pop(t)
    assert q.due(t) - t == approx(p.frame_bytes * 8 / (LINE / 2), rel=1e-6)


def test_a_nak_sends_again_from_the_psn_it_names():
    q = SendQueue(nbytes=8 * 1024, first_psn=100, line_bps=LINE)
    first = [p.psn for _t, p in _drain(q)]
    q.on_ack(parse(nak_sequence(dqpn=1, expected=103, msn=0)))
    again = [p.psn for _t, p in _drain(q, until=20.0)]
    assert first == list(range(100, 108)) and again == list(range(103, 108))
    assert (q.req.resent, q.done) == (5, False)
