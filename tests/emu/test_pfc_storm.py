"""A PFC pause storm (a stuck NIC that keeps pausing its ToR) on real veths and OVS, without and with the PFC
watchdog (testbed/qos/pfc_watchdog.py, pfc_storms.py).

Two leaves under one spine, one host NIC each: h0 and h1 on leaf 0, h2 and h3 on leaf 1, so every path is
fixed. h2's NIC storms for the whole run. A lossless stream h0 -> h2 fills leaf 1's queue toward h2; past XOFF
leaf 1 pauses its ingress, the spine's queue toward leaf 1 fills and pauses leaf 0, whose queues pause h0 and
h1: the innocent stream h1 -> h3, which shares no port with h2, stalls behind it (PFC's head-of-line blocking
spread by a storm). The watchdog finds the stalled queue and drops (or forwards) what it holds; the rest of the
fabric runs again.
"""

from __future__ import annotations

import pytest

from testbed.experiment.measure import StreamSpec, run_streams
from testbed.net.network import Network
from testbed.qos.shaper import lossless_leaf
from testbed.qos.spec import QosSpec
from tests.streams import delivered
from topos import build

DSCP26 = 26 << 2
PPS, SECONDS = 1000, 4.0  # 11.2 Mbit/s per stream on 20 Mbit/s host ports: nothing congests but the storm
STORMING = "h2:nic0:p0"


def _run(watchdog: dict | None) -> tuple[dict, dict, dict, str]:
    """The two streams with h2's NIC storming throughout: (received / sent per destination, the agent's report,
    lossless drops per port, the stalled queue's name in reports)."""
    topo = build("spine_leaf", leaves=2, hosts_per_leaf=2, spines=1)
    link = topo.find_link(STORMING)
    stalled = f"{link.b}:{link.b_port}/p3"
    qos = QosSpec(pfc={"watchdog": watchdog or {"enabled": False}, "reaction_ms": 1000.0})
    specs = [StreamSpec(src="h0", dst="h2", sport=6000, dport=7000, pps=PPS, duration=SECONDS, size=1400, stream=0,
                        tos=DSCP26),
             StreamSpec(src="h1", dst="h3", sport=6001, dport=7001, pps=PPS, duration=SECONDS, size=1400, stream=1,
                        tos=DSCP26)]
    with Network(topo, qos=qos) as net:
        net.pfc_storm(STORMING, True)  # before the traffic: the agent takes it at its next wake-up
        r = run_streams(net, specs, tail=1.0)
        drops = {k: q[0].drops for k, q in net.qos.stats(lossless_leaf(3)).items() if q and q[0].drops}
        report = net.pfc.report()
        net.pfc_storm(STORMING, False)
        net.stop_qos()
    got = delivered(specs, r)
    return got, report, drops, stalled


@pytest.mark.slow
def test_a_storm_without_the_watchdog_stalls_innocent_traffic_and_drops_nothing(no_leftovers):
    got, report, drops, stalled = _run(None)
    print(f"received/sent {got}; ports paused {sorted(report['ports'])}; drops {drops}")
    assert report["stuck_peers"] == [stalled.split("/")[0]]
    assert drops == {}  # lossless: the storm holds everything, it loses nothing
    assert got["h3:7001"] < 0.25, got  # the innocent stream stalled behind the storm
    assert any(k.startswith("h1:") for k in report["ports"]), report["ports"]  # the pause reached its sender
    assert "watchdog" not in report


@pytest.mark.slow
@pytest.mark.parametrize("action", ["drop", "forward"])
def test_the_watchdog_breaks_the_storm_and_the_innocent_stream_runs(no_leftovers, action):
    got, report, drops, stalled = _run({"enabled": True, "action": action})
    wd = report["watchdog"]
    print(f"{action}: received/sent {got}; watchdog {wd}; drops {drops}")
    assert wd["queues"][stalled]["storms"] == 1, wd  # once: the NIC never lets go, so it is never restored
    found = [e["t"] for e in wd["events"] if e["queue"] == stalled]
    assert found == [wd["events"][0]["t"]], wd  # found first (a queue it stalled upstream may be in the same poll)
    for queue in set(wd["queues"]) - {stalled}:  # those stalled by the spread were let go: restored, for good
        assert [e["change"] for e in wd["events"] if e["queue"] == queue] == ["storm", "restored"], wd
    assert got["h3:7001"] >= 0.75, got  # stalled only until the storm was found (~0.2-0.3 s of 4 s)
    assert wd["queues"][stalled]["storm_s"] > 0.5 * SECONDS, wd  # mitigated from its finding to the end
    if action == "drop":  # what the stormed queues held, and what came to them in the storm
        stormed = {q.split("/")[0] for q in wd["queues"]}
        assert stalled.split("/")[0] in drops and set(drops) <= stormed and got["h2:7000"] < 0.5, (drops, got)
        assert wd["drops"] == sum(drops.values()), wd  # every one of them the watchdog's (the verdict's count)
    else:  # forward: sent past the pause, nothing lost
        assert drops == {} and got["h2:7000"] == 1.0, got
