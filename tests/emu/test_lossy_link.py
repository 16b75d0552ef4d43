"""Gray failures on a real link: the BPF program loses frames at the rate asked, the other direction too,
beside ECN marking on the same switch port, and takes itself off again (issue #29)."""

from __future__ import annotations

import math
import shlex
import subprocess

from testbed.experiment.measure import StreamSpec, run_streams
from testbed.net.network import Network
from testbed.qos.spec import QosSpec
from testbed.system.bpf import tcx_egress_programs
from topos import build
from topos.addressing import nic_address
from traffic.transports.listening import wait_listening

RATE = 0.05
PPS, SECONDS = 1000, 3.0
OTHER_FRAMES = 10  # neighbour and router frames a link may carry besides a test's stream in 4 s


def marking(dev: str) -> bool:
    """ECN marking's program at the egress of a root-namespace interface (on a tcx link)."""
    import json
    import socket

    show = lambda i: subprocess.run(["bpftool", "-j", "prog", "show", "id", str(i)],  # noqa: E731
                                    capture_output=True, text=True).stdout
    return [json.loads(show(i)).get("name") for i in tcx_egress_programs(socket.if_nametoindex(dev))] == ["mark_ecn"]


def test_a_lossy_link_loses_frames_at_its_rate_and_is_taken_off_again(no_leftovers):
    """5% each way on h1's NIC 0 port 0, ECN marking on (its program on the ToR port's egress too): with the
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
        # the loss on a clsact of its own making, ECN marking beside it on a tcx link (testbed/system/bpf.py)
        assert "lose_ba" in filters and "mark_ecn" not in filters and marking(tor_port), filters
        streams = [StreamSpec(src="h1", dst="h3", sport=6001, dport=7001, pps=PPS, duration=SECONDS, size=200),
                   StreamSpec(src="h3", dst="h1", sport=6002, dport=7002, pps=PPS, duration=SECONDS, size=200,
                              stream=1)]
        r = run_streams(net, streams, tail=1.0)
        counts = net.gray_counters()[link.name]
        net.gray.restore(link.name)
        after = subprocess.run(["tc", "filter", "show", "dev", tor_port, "egress"], capture_output=True,
                               text=True).stdout
        assert "lose_ba" not in after and marking(tor_port), after  # ours off, ECN's left in place
        assert net.gray_counters() == {}
    for direction in ("a_to_b", "b_to_a"):
        lost, passed = counts["errors"][direction], counts["frames"][direction]
        n = lost + passed
        assert n >= 0.9 * PPS * SECONDS, (direction, counts)  # each direction carried its stream at least
        sd = math.sqrt(n * RATE * (1 - RATE))
        assert abs(lost - n * RATE) < 5 * sd, (direction, lost, n)  # binomial: 5 standard deviations
    # What each receiver missed is what the program dropped on its way, plus the stream's frames that never reached
    # the link (sent - carried + other frames: up to 2 just after start-up in six runs here, 6 once in CI),
    # less other frames dropped, plus any stream frame lost after the
    # link (none may be), less a lost last frame (the receiver cannot count it). What is left is between -1 and
    # the other frames the link carried: 0-2 in 4 s in twelve runs here, 1 in the CI run.
    for direction, (key, stream), sender in (("a_to_b", ("h3:7001", "0"), 0), ("b_to_a", ("h1:7002", "1"), 1)):
        got, sent = r["receivers"][key]["streams"][stream], r["senders"][sender]["sent"]
        dropped, carried = counts["errors"][direction], counts["errors"][direction] + counts["frames"][direction]
        left = got["lost"] - dropped - (sent - carried)
        assert -1 <= left <= OTHER_FRAMES, (direction, left, got, counts, r["senders"])


def test_a_lossy_links_counts_are_frames_even_for_tcp(no_leftovers):
    """TCP hands its egress GSO packets of many frames whatever the device offers; the program counts a packet as
    the frames it carries, and a lossy link's host end sends frame by frame (gray.frames_only). So what the
    program passed is what the ToR port received, frame for frame (without either: 126 'frames' for 1 MB). How much
    of the 1 MB leaves before iperf3's server exits varies (525-644 frames here, 486 once in CI), so the claim is
    each counted frame's size: at most one MTU's frame (a GSO packet is several)."""
    topo = build("hpn", hosts_per_segment=2)
    link = topo.find_link("h1:nic0:p0")
    with Network(topo, qos=QosSpec(pfc={"enabled": False})) as net:
        net.set_link(topo.find_link("h1:nic0:p1").name, up=False)
        key = f"{link.a}:{link.a_port}"
        segs = net.qos.gso_max_segs(key)
        net.gray.set_loss(link.name, 1e-9)  # on, and (almost) never losing: the counts alone
        assert net.qos.gso_max_segs(key) == 1 < segs
        before = net.port_counters()[link.b][link.b_port]
        server = net.popen("h3", ["iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        try:
            assert wait_listening(lambda cmd: net.node("h3").cmd(shlex.join(cmd)), 5201, server, timeout=30)
            out = net.node("h1").cmd(f"iperf3 -c {nic_address(topo.nodes['h3'], 0).ip} -n 1M")
        finally:
            server.wait(timeout=60)
        after = net.port_counters()[link.b][link.b_port]
        got, nbytes = (after[k] - before[k] for k in ("rx_packets", "rx_bytes"))
        counts = net.gray_counters()[link.name]
        assert "iperf Done" in out, out
        assert counts["frames"]["a_to_b"] + counts["errors"]["a_to_b"] == got, (got, counts)
        assert nbytes > 500_000 and nbytes / got <= 1514, (nbytes, got)  # frames, not GSO packets
        net.gray.close()
        assert net.qos.gso_max_segs(key) == segs  # given back
