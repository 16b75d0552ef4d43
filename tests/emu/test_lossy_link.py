"""Gray failures on a real link: the BPF program loses frames at the rate asked, the other direction too,
beside ECN marking on the same switch port, and takes itself off again (issue #29)."""

from __future__ import annotations

import math
import subprocess

from testbed.experiment.measure import StreamSpec, run_streams
from testbed.net.network import Network
from testbed.qos.spec import QosSpec
from topos import build

RATE = 0.05
PPS, SECONDS = 1000, 3.0


def test_a_lossy_link_loses_frames_at_its_rate_and_is_taken_off_again(no_leftovers):
    """5% each way on h1's NIC 0 port 0, ECN marking on (its program shares the ToR port's clsact): with the
    NIC's other port down every frame of h1's rail 0 takes it; h1 sends 3,000 UDP frames to h3 and h3 as many
    back. The program's counts follow the binomial, and what the receivers missed is what it dropped."""
    topo = build("hpn", hosts_per_segment=2)
    link = topo.find_link("h1:nic0:p0")
    with Network(topo, qos=QosSpec(pfc={"enabled": False}, ecn={"enabled": True})) as net:
        net.set_link(topo.find_link("h1:nic0:p1").name, up=False)
        net.gray.set_loss(link.name, RATE)
        tor_port = net.intf_name(link.b, link.b_port)
        filters = subprocess.run(["tc", "filter", "show", "dev", tor_port, "egress"], capture_output=True,
                                 text=True).stdout
        assert "lose_ba" in filters and "mark_ecn" in filters, filters  # one clsact, both programs
        streams = [StreamSpec(src="h1", dst="h3", sport=6001, dport=7001, pps=PPS, duration=SECONDS, size=200),
                   StreamSpec(src="h3", dst="h1", sport=6002, dport=7002, pps=PPS, duration=SECONDS, size=200,
                              stream=1)]
        r = run_streams(net, streams, tail=1.0)
        counts = net.gray_counters()[link.name]
        net.gray.restore(link.name)
        after = subprocess.run(["tc", "filter", "show", "dev", tor_port, "egress"], capture_output=True,
                               text=True).stdout
        assert "lose_ba" not in after and "mark_ecn" in after, after  # ours off, ECN's left in place
        assert net.gray_counters() == {}
    for direction in ("a_to_b", "b_to_a"):
        lost, passed = counts["errors"][direction], counts["frames"][direction]
        n = lost + passed
        assert n >= 0.9 * PPS * SECONDS, (direction, counts)  # each direction carried its stream at least
        sd = math.sqrt(n * RATE * (1 - RATE))
        assert abs(lost - n * RATE) < 5 * sd, (direction, lost, n)  # binomial: 5 standard deviations
    # What each receiver missed is what the program dropped on its way, but for frames of other kinds the link
    # carried that way (7 of them once, 5 of those dropped): the drops beyond the stream's are at most those
    # frames (and a lost last frame, which the receiver cannot count).
    for direction, (key, stream) in (("a_to_b", ("h3:7001", "0")), ("b_to_a", ("h1:7002", "1"))):
        got = r["receivers"][key]["streams"][stream]
        dropped, carried = counts["errors"][direction], counts["errors"][direction] + counts["frames"][direction]
        others = max(0, carried - PPS * SECONDS)
        assert 0 <= dropped - got["lost"] <= others + 1, (direction, got, counts)
