"""bench/dcqcn_model.py, the ideal fabric the emulated DCQCN is read against: PFC alone holds the queue between
XON and XOFF at the port's full rate; DCQCN cuts the queue below its marking ramp; nothing is lost either way."""

from __future__ import annotations

from bench.dcqcn_model import STEP_S, Port, incast, run
from testbed.qos.ecn import PMAX, published

KMIN, KMAX = published(200)
FRAME = 15_140
PORT = dict(senders=4, bytes_each=20e6, rate_bps=200e9, frame=FRAME, kmin=KMIN, kmax=KMAX, pmax=PMAX,
            xoff=2.9e6, xon=1.45e6)


def test_pfc_alone_keeps_the_port_busy_between_xon_and_xoff():
    out = run(Port(**PORT, dcqcn=False))
    ideal = 4 * 20e6 * 8 / 200e9
    # the port never idles while senders have bytes (it finishes within two steps of the ideal)
    assert ideal <= out.seconds <= ideal + 2 * STEP_S, (out.seconds, ideal)
    # once the first burst is in, the queue stays between XON (less one step's drain) and XOFF (plus one step's
    # arrivals)
    arrivals = 4 * 2 * FRAME
    settled = out.queue[len(out.queue) // 4:-len(out.queue) // 4]
    assert min(settled) >= PORT["xon"] - 200e9 * STEP_S / 8 and max(out.queue) <= PORT["xoff"] + arrivals
    assert out.percentile(0.5) > (KMIN + KMAX) / 2  # nothing slows the senders: the queue stands deep in the ramp


def test_dcqcn_cuts_the_queue_below_where_pfc_alone_stands_and_loses_nothing():
    for dequeue in (False, True):
        alone = run(Port(**PORT, dcqcn=False))
        dcqcn = run(Port(**PORT, dequeue=dequeue))
        assert dcqcn.percentile(0.5) < alone.percentile(0.5) / 2, (dequeue, dcqcn.percentile(0.5))
        # every byte left the port: the run ended with the FIFO empty, not at the time limit
        assert dcqcn.queue[-1] == 0 and dcqcn.seconds < 1.0
        # the price of the cuts: idle capacity, never faster than the line
        assert dcqcn.seconds >= alone.seconds


def test_two_ports_report_the_slower_one_and_the_deeper_queue():
    four, three = Port(**PORT, dcqcn=False), Port(**{**PORT, "senders": 3}, dcqcn=False)
    seconds, p50, _ = incast([four, three])
    assert seconds == run(four, 1).seconds > run(three, 2).seconds
    assert p50 >= run(four, 1).percentile(0.5)
