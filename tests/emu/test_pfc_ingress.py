"""802.1Qbb's ingress accounting (`pfc.model: ingress`: testbed/qos/kmmu.py, bpf/mmu.bpf.h) on real veths and OVS.

Two leaves under one spine. h0 and h1 both send to h2, all three on leaf 0: leaf 0's port toward h2 is congested.
Meanwhile h3 (leaf 1) sends to h0 through the spine: its frames come into leaf 0 by the spine's port and leave by
h0's, which nothing congests. With model egress the congested queue pauses every ingress neighbour of leaf 0, the
spine's port toward it too, and h3's stream waits behind the incast (PFC's head-of-line blocking); with model
ingress only the ports whose own frames fill the shared buffer, h0's and h1's, are paused.
"""

from __future__ import annotations

import time

import pytest

from testbed.experiment.measure import StreamSpec, run_streams
from testbed.net.network import Network
from testbed.qos.shaper import lossless_leaf
from testbed.qos.spec import QosSpec
from tests.streams import delivered
from topos import build

DSCP26 = 26 << 2
PPS, SECONDS = 1000, 4.0  # 11.2 Mbit/s per stream on 20 Mbit/s host ports: two into h2 are 12% too many
LEAF0, SPINE = "tor-p0-s0", "agg-p0-pl0-0"
FROM_H0, FROM_H1, FROM_SPINE = f"{LEAF0}:1/p3", f"{LEAF0}:2/p3", f"{LEAF0}:4/p3"  # leaf 0's ingress accounts
SPINE_FROM_LEAF1, SPINE_TO_LEAF0 = f"{SPINE}:2/p3", f"{SPINE}:1/p3"


def _run(model: str) -> tuple[dict, dict, dict]:
    """The incast and h3's stream: (received / sent per destination, the agent's report, lossless drops per
    port)."""
    topo = build("spine_leaf", leaves=2, hosts_per_leaf=3, spines=1)
    pairs = [("h0", "h2"), ("h1", "h2"), ("h3", "h0")]
    specs = [StreamSpec(src=src, dst=dst, sport=6000 + i, dport=7000 + i, pps=PPS, duration=SECONDS, size=1400,
                        stream=i, tos=DSCP26) for i, (src, dst) in enumerate(pairs)]
    with Network(topo, qos=QosSpec(pfc={"model": model})) as net:
        r = run_streams(net, specs, tail=1.0)
        drops = {k: q[0].drops for k, q in net.qos.stats(lossless_leaf(3)).items() if q and q[0].drops}
        report = net.pfc.report()
        net.stop_qos()
    got = delivered(specs, r)
    return got, report, drops


@pytest.mark.slow
def test_ingress_pauses_only_the_ports_whose_frames_fill_the_buffer(no_leftovers):
    got, report, drops = _run("ingress")
    acc, ingress = report["ingress"]["accounts"], report["ingress"]
    print(f"received/sent {got}; ports paused {report['ports']}; accounts {acc}; drained "
          f"{ingress['drained_bytes']}, unfollowed {ingress['unfollowed']}; buffers {ingress['buffers']}")
    assert report["model"] == "ingress" and drops == {} and min(got.values()) == 1.0, (got, drops)
    assert acc[FROM_H0]["xoff_events"] >= 1 and acc[FROM_H1]["xoff_events"] >= 1, acc  # the incast's own ports
    assert {"h0:0/p3", "h1:0/p3"} <= set(report["ports"]), report["ports"]  # ... pause their senders
    assert acc[FROM_SPINE]["max_bytes"] > 0 and acc[FROM_SPINE]["xoff_events"] == 0, acc  # counted, never paused
    assert not any(k.startswith(SPINE) or k.startswith("h3") for k in report["ports"]), report["ports"]
    # the spine counted h3's frames by its port from leaf 1: the source MAC leaf 1's port wrote crossed OVS
    assert acc[SPINE_FROM_LEAF1]["max_bytes"] > 0, acc
    assert all(a["bytes"] == 0 for a in acc.values()), acc  # all that came in went out: nothing left counted
    assert ingress["unfollowed"] == 0 and ingress["unnamed"] == 0, ingress
    # a few frames in ten thousand leave their queue unseen by the dequeue tracepoint: taken off when it empties
    assert ingress["drained_bytes"] <= 0.005 * ingress["counted_bytes"], ingress
    for a in acc.values():
        assert a["max_over"] <= a["headroom"], acc  # no pause came late


@pytest.mark.slow
def test_the_egress_model_pauses_the_spine_behind_the_incast(no_leftovers):
    """The control: the same traffic under model egress pauses the spine's port toward leaf 0 (h3's stream)."""
    got, report, drops = _run("egress")
    print(f"received/sent {got}; ports paused {report['ports']}")
    assert report["model"] == "egress" and drops == {} and "ingress" not in report
    assert SPINE_TO_LEAF0 in report["ports"], report["ports"]


@pytest.mark.slow
def test_a_link_taken_down_releases_what_its_queue_held_at_every_hop(no_leftovers):
    """leaf 1's queue toward h4 held paused by hand while h0 streams to h4: leaf 1's account of the spine's port
    fills and pauses the spine, and so on back to h0. Then h4's link goes down, which empties that queue with no
    dequeue: the reset's drain must take its bytes off the spine's account, and every pause must unwind."""
    import json

    from testbed.system.ownership import RUN_DIR

    topo = build("spine_leaf", leaves=2, hosts_per_leaf=3, spines=1)
    spec = StreamSpec(src="h0", dst="h4", sport=6000, dport=7000, pps=1000, duration=2.0, size=1400, tos=DSCP26)
    held, link = "tor-p0-s1:2", topo.find_link("h4:nic0:p0").name
    seen: dict = {}
    with Network(topo, qos=QosSpec(pfc={"model": "ingress"})) as net:
        state = RUN_DIR / f"{net.owner.run_id}.pfc.json"
        paused = lambda: json.loads(state.read_text())["paused"] if state.exists() else []  # noqa: E731

        def cut() -> None:
            t0 = time.monotonic()
            while "h0:0/p3" not in paused():  # the pause walked back to the sender
                assert time.monotonic() - t0 < 30, f"the pause never reached h0: {paused()}"
                time.sleep(0.05)
            seen["held"] = paused()
            net.set_link(link, False)

        run_streams(net, [spec], actions=[(0.3, lambda: net.qos.set_paused(held, 3, True)), (1.0, cut)], tail=0.5)
        t0 = time.monotonic()
        while paused():
            assert time.monotonic() - t0 < 10, f"pauses still held with the link down: {paused()}"
            time.sleep(0.05)
        net.set_link(link, True)
        net.qos.set_paused(held, 3, False)
        report = net.pfc.report()
        net.stop_qos()
    ingress = report["ingress"]
    print(f"held {seen['held']}; accounts {ingress['accounts']}; discarded {ingress['discarded_bytes']}")
    assert {"agg-p0-pl0-0:2/p3", "tor-p0-s0:4/p3", "h0:0/p3"} <= set(seen["held"]), seen["held"]
    assert ingress["discarded_bytes"] > 0  # what the reset queue held, taken off the spine's account
    assert all(a["bytes"] == 0 for a in ingress["accounts"].values()), ingress["accounts"]
