"""ECN marking in the kernel at switch egress and DCTCP at the hosts (issue #28): a congested port marks CE,
the senders' alpha follows the marks, and their windows hold the queue near DCTCP's K instead of at XOFF."""

from __future__ import annotations

from pathlib import Path

from testbed.experiment.measure import iperf, receiver_bottleneck
from testbed.net.network import Network
from testbed.qos.cc import DCTCP_NAME
from testbed.qos.shaper import lossless_leaf
from testbed.qos.show import snapshot
from testbed.qos.spec import QosSpec
from testbed.system.ownership import RUN_DIR
from topos import build

DSCP26 = 26 << 2
SECONDS = 6


def incast(cc: str) -> dict:
    """4 hosts of segment 0 into h4 over TCP in the lossless class, with PFC, under `cc`."""
    with Network(build("hpn"), qos=QosSpec(cc=cc)) as net:
        before = net.qos.stats(lossless_leaf(3))
        flows = iperf(net, [(f"h{i}", "h4") for i in range(4)], duration=SECONDS, tos=DSCP26,
                      cc=DCTCP_NAME if cc == "dctcp" else None)
        after = net.qos.stats(lossless_leaf(3))
        registered = DCTCP_NAME in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
        # what `hpnlab qos show` and the web view read, from their own side: the kernel's map by its id
        shown = {f"{r['port']}/p3": r["ecn_marks"] for r in snapshot(net.owner.run_id) if r["class"] == "lossless3"}
        published = RUN_DIR / f"{net.owner.run_id}.ecn.json"
        out = {"shown": shown, "published": published, "marks": net.ecn_marks(),
               "alpha": net.cc.alpha() if net.cc else None, "registered": registered,
               "xoff": net.qos.ports["tor-p0-s1-r0-a:1"].plan.lossless[3].xoff,
               "bottleneck_bps": receiver_bottleneck(net, "h4", before, after),
               "drops": sum(q[0].drops for q in after.values() if q)}
        report = net.stop_qos()
        out["published_after_stop"] = published.exists()
    out["goodput_bps"] = sum(f["bytes"] for f in flows) * 8 / SECONDS
    # the depth of the busiest port toward h4 over the run (the agent's samples, every 50 ms)
    depths = {k: sorted(s["backlog"].get(k, 0) for s in report["samples"])
              for k in ("tor-p0-s1-r0-a:1/p3", "tor-p0-s1-r0-b:1/p3")}
    out["median_depth"] = max(d[len(d) // 2] for d in depths.values())
    out["pauses"] = sum(t["pause_events"] for t in report["pauses_by_tier"].values())
    return out


def test_dctcp_holds_the_queue_at_k_where_plain_tcp_fills_it_to_xoff(no_leftovers):
    plain, dctcp = incast("none"), incast("dctcp")
    print({"none": plain, "dctcp": dctcp})
    assert plain["marks"] is None and dctcp["registered"]
    # the congested ports marked CE: nearly all of the marks toward h4 (an aggregation port the flows collide
    # on may mark a few)
    marks = dctcp["marks"]
    toward_h4 = sum(n for k, n in marks.items() if k.startswith("tor-p0-s1-r0-"))
    assert sum(marks.values()) > 100 and toward_h4 >= 0.9 * sum(marks.values()), marks
    # qos show (another process) sees the same counts (read just before the network's own: within 1%), and
    # none where nothing marks; the map's name goes with the run
    shown = {k: n for k, n in dctcp["shown"].items() if n}
    assert shown.keys() == marks.keys() and all(n <= marks[k] for k, n in shown.items()), (shown, marks)
    assert sum(shown.values()) >= 0.99 * sum(marks.values()), (shown, marks)
    assert set(plain["shown"].values()) == {None} and not plain["published"].exists()
    assert not dctcp["published_after_stop"]
    assert dctcp["alpha"]["marked_windows"] > 0 and dctcp["alpha"]["mean"] > 0
    # the senders' windows fell with the marks: the queue sits at K (a few frames of slack: userspace OVS
    # delivers in batches), where plain TCP fills it until PFC pauses (measured: 22.7 KB against 42 KB, 0
    # pauses against 42)
    k = dctcp["xoff"] // 4  # DCTCP's marking threshold K
    assert dctcp["median_depth"] <= k + 4 * 1514 and dctcp["median_depth"] < plain["median_depth"], (k, dctcp,
                                                                                                     plain)
    assert dctcp["pauses"] < plain["pauses"] / 2, (dctcp["pauses"], plain["pauses"])
    assert dctcp["drops"] == plain["drops"] == 0
    assert dctcp["goodput_bps"] >= 0.85 * dctcp["bottleneck_bps"]
    # the congestion control went with the network (no_leftovers checks it too)
    assert DCTCP_NAME not in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
