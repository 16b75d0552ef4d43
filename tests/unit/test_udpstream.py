"""The paced UDP stream's receiver on loopback: it counts a stream that outlasts its window."""

from __future__ import annotations

import socket
import threading

from traffic import udpstream


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_receiver_stays_open_while_packets_still_come():
    """A 0.5 s window and a 1.5 s stream (a queue still draining when the window would close): every packet
    is counted, and the receiver closes once the stream has stopped."""
    port = free_udp_port()
    got: dict = {}
    bound = threading.Event()
    t = threading.Thread(target=lambda: got.update(udpstream.recv(port, duration=0.5, gap_ms=100,
                                                                  on_bound=bound.set)))
    t.start()
    assert bound.wait(10)  # bound before the first packet (its window opens at the first packet, not here)
    sent = udpstream.send("127.0.0.1", port, 0, pps=200, duration=1.5, size=200, stream=3)
    t.join(timeout=10)
    assert not t.is_alive()
    stream = got["streams"]["3"]
    assert sent["sent"] >= 250 and stream["received"] == sent["sent"] and stream["lost"] == 0
    assert stream["last"] - stream["first"] > 1.2


def test_a_sender_started_at_the_ready_line_loses_nothing():
    """`recv --ready` says "ready" on stderr once bound: a stream sent at that moment, with no wait, arrives
    whole (callers used to guess a wait, and a slow remote shell outlasted it and the stream)."""
    import json
    import subprocess
    import sys

    port = free_udp_port()
    p = subprocess.Popen([sys.executable, "-m", "traffic.udpstream", "recv", "--port", str(port), "--duration", "0.5",
                          "--ready"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stderr.readline() == "ready\n"
    sent = udpstream.send("127.0.0.1", port, 0, pps=500, duration=0.4, size=100, stream=1)
    out, err = p.communicate(timeout=10)
    stream = json.loads(out)["streams"]["1"]
    assert sent["sent"] >= 150 and stream["received"] == sent["sent"] and stream["lost"] == 0 and err == ""
