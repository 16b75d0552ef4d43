"""Queue disciplines only the full kernel has, applied and measured: netem delay on the fabric, RED/ECN marking."""

from __future__ import annotations

import re
import subprocess
import time

from test_full_kernel import SMALL_HPN  # noqa: E402 - same small fabric

from testbed.net.network import Network
from topos import build
from topos.addressing import nic_address


def test_netem_delay_is_applied_and_measured():
    topo = build("hpn", **SMALL_HPN)
    with Network(topo, routing="static", delay_ms=5) as net:
        a, b = topo.hosts[0], topo.hosts[-1]
        out = net.node(a.name).cmd(f"ping -c 5 -i 0.2 -q {nic_address(b, 0).ip}")
        avg = float(re.search(r"= [\d.]+/([\d.]+)/", out).group(1))
        # ToR -> agg -> ToR -> host: 3 switch egresses each way at 5 ms
        print(f"\nnetem 5 ms per switch egress: RTT {avg:.1f} ms across the aggregation layer (expected 30)")
        assert 30 <= avg < 45


def test_red_marks_ecn_instead_of_dropping():
    """RED with ecn on a 10 Mbit/s bottleneck: ECN-capable TCP gets marks, not drops."""
    ns = [f"hpnlab-vmred-{i}" for i in range(2)]
    try:
        for n in ns:
            subprocess.run(["ip", "netns", "add", n], check=True)
        sh = lambda n, c: subprocess.run(["ip", "netns", "exec", n, "sh", "-c", c], check=True,  # noqa: E731
                                         capture_output=True, text=True).stdout
        subprocess.run(["ip", "link", "add", "vr0", "netns", ns[0], "type", "veth", "peer", "name", "vr1",
                        "netns", ns[1]], check=True)
        sh(ns[0], "ip addr add 192.0.2.1/24 dev vr0 && ip link set vr0 up && ip link set lo up && "
                  "sysctl -qw net.ipv4.tcp_ecn=1 && "
                  "tc qdisc add dev vr0 root handle 1: htb default 1 && "
                  "tc class add dev vr0 parent 1: classid 1:1 htb rate 10mbit && "
                  "tc qdisc add dev vr0 parent 1:1 handle 10: red limit 400000 min 15000 max 45000 avpkt 1000 "
                  "burst 25 probability 0.1 bandwidth 10mbit ecn")
        sh(ns[1], "ip addr add 192.0.2.2/24 dev vr1 && ip link set vr1 up && ip link set lo up && "
                  "sysctl -qw net.ipv4.tcp_ecn=1")
        server = subprocess.Popen(["ip", "netns", "exec", ns[1], "iperf3", "-s", "-1"], stdout=subprocess.DEVNULL)
        time.sleep(0.5)
        sh(ns[0], "iperf3 -c 192.0.2.2 -t 4 -P 4 >/dev/null")
        server.wait(timeout=30)
        stats = sh(ns[0], "tc -s qdisc show dev vr0")
        marked = int(re.search(r"marked (\d+)", stats).group(1))
        early = int(re.search(r"early (\d+)", stats).group(1))
        print(f"\nRED/ECN on 10 Mbit/s: {marked} packets marked, {early} dropped early")
        # ECN-capable data is marked; the few early drops are non-ECT packets (SYNs of the 4 connections)
        assert marked >= 20 and early <= marked // 10
    finally:
        for n in ns:
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
