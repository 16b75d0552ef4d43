"""Lossless at scale (#45 item 4): a 31-to-1 UDP incast in the lossless class on a 128-host HPN.

UDP has no congestion control, as RoCE without DCQCN: only pauses that reach the senders' NICs keep the fabric
lossless. The HPN is the scale probe's 128 hosts (16 segments of 8, 2 rails, one pod); h0 receives on NIC 0 from
h1-h31, 7 beside it and 24 in three other segments, whose frames cross the aggregation tier. The scale is the one
`auto` takes for the incast's NICs (what an experiment of it gets). PFC counts each ingress port's bytes
(`model: ingress`, 802.1Qbb); the egress model drops here (bench/pfc_bench.py measures both). The same fabric then
runs the incast again without PFC: the lossless queues drop.
"""

from __future__ import annotations

import pytest

from testbed.experiment.measure import udp_incast
from testbed.net.network import Network
from testbed.qos.scale import choose_scale, offered_load, probe_params
from testbed.qos.spec import QosSpec
from topos import build

DSCP26 = 26 << 2
HOSTS, RECEIVER = 128, "h0"
SENDERS = [f"h{i}" for i in range(1, 32)]


@pytest.mark.slow
def test_a_31_to_1_udp_incast_on_128_hosts_is_lossless_with_pfc_and_drops_without():
    topo = build("hpn", **probe_params(HOSTS))
    scale = choose_scale(offered_load(topo, [(h, 0) for h in [RECEIVER, *SENDERS]]), hosts=HOSTS).scale
    with Network(topo, qos=QosSpec(scale=scale, pfc={"model": "ingress"})) as net:
        on = udp_incast(net, RECEIVER, SENDERS, 1.0, DSCP26)
        report = net.stop_qos()
        net.start_qos(QosSpec(scale=scale, pfc={"enabled": False}))
        off = udp_incast(net, RECEIVER, SENDERS, 1.0, DSCP26)
    tiers = {tier: t["ports_paused"] for tier, t in report["pauses_by_tier"].items() if t["pause_events"]}
    assert (on.received, on.lossless_drops) == (on.sent, 0), (on, tiers)
    assert (report["kernel_lost_events"], report["kernel_no_leaf"]) == (0, 0)
    # the pauses spread hop by hop to the senders: the aggregation tier, the other segments' ToRs, their NICs
    far = {k.split(":")[0] for k, p in report["ports"].items() if p["pause_events"] and k.startswith("h")}
    assert set(tiers) == {"host", "tor", "agg"}, tiers
    assert far & {f"h{i}" for i in range(8, 32)}, far
    assert off.lossless_drops > 0 and off.received < off.sent, off
