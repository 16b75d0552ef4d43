"""Shaping, priority classes and PFC on real veths and OVS, measured with iperf3 and qdisc counters."""

from __future__ import annotations

import shlex
import subprocess
import sys
import time

import pytest

from testbed.experiment.fidelity import verdict
from testbed.experiment.measure import goodput_between, iperf, receiver_bottleneck, shaped_rate
from testbed.net.naming import root_intfs
from testbed.net.network import Network
from testbed.qos.shaper import lossless_leaf
from testbed.qos.spec import HIGH_MINOR, QosSpec
from topos import build
from topos.addressing import nic_address
from traffic.transports.listening import wait_listening
from traffic.transports.tcp import AGENT_PORT

TC_H_ROOT = 0xFFFFFFFF
DSCP26 = 26 << 2
TIMING = pytest.mark.timing
# 4 senders at 15 Mbit/s into a host's two 20 Mbit/s ports: 30 on each even if the hash splits them 2/2
# (at 9 Mbit/s an even split congested nothing, and whether a run tested PFC at all was up to the hash)
PPS = 1340
# The network the last tests of this module share (conftest's shared_network; they come last, so no network of
# the tests above is up beside it)
NETWORKS = {"hpn-qos": lambda: Network(build("hpn"), qos=QosSpec())}
SHARED = pytest.mark.parametrize("shared_network", ["hpn-qos"], indirect=True)


@pytest.mark.timing
def test_single_flow_gets_the_shaped_rate(no_leftovers, cpu_window):
    with Network(build("hpn"), qos=QosSpec(pfc={"enabled": False})) as net:
        rate = net.qos.ports["h0:0"].plan.rate_bps  # 200G / 10,000 = 20 Mbit/s
        s: dict = {}
        # the busiest of h0's two rail-0 ports: the one the flow hashed onto
        flows = iperf(net, [("h0", "h4")], duration=7, during=lambda: shaped_rate(net, ("h0:0", "h0:1"), 4, s))
        achieved = s["bps"]
        assert achieved <= 1.02 * rate, f"{achieved / 1e6:.2f} Mbit/s of {rate / 1e6:.0f}"  # the shaper holds
        cpu_window.rates_are_meaningful()
        assert 0.95 * rate <= achieved, f"{achieved / 1e6:.2f} Mbit/s of {rate / 1e6:.0f}"
        # over the seconds the shaper and the CPU were measured in (a stall outside them, e.g. at start-up on a
        # loaded machine, is not the shaper's); TCP/IP headers are ~4.4% of a 1514-byte frame
        goodput = goodput_between(flows[0], 1, 5)
        assert goodput >= 0.9 * rate, f"{goodput / 1e6:.2f} Mbit/s of {rate / 1e6:.0f}"


def incast(pfc: bool, seconds: float = 6):
    with Network(build("hpn"), qos=QosSpec(pfc={"enabled": pfc})) as net:
        before = net.qos.stats(lossless_leaf(3))
        flows = iperf(net, [(f"h{i}", "h7") for i in range(7)], duration=seconds, tos=DSCP26)
        lossless = net.qos.stats(lossless_leaf(3))
        plans = {k: p.plan for k, p in net.qos.ports.items()}
        bottleneck = receiver_bottleneck(net, "h7", before, lossless)  # h7's ports the flows hashed onto
        report = net.stop_qos()
    goodput = sum(f["bytes"] for f in flows) * 8 / seconds
    drops = {k: q[0].drops for k, q in lossless.items() if q and q[0].drops}
    return goodput, bottleneck, drops, report, plans


@pytest.mark.timing
def test_incast_lossless_with_pfc_and_lossy_without(no_leftovers, cpu_window):
    goodput, bottleneck, drops, report, plans = incast(pfc=True)
    assert drops == {}, f"lossless queues dropped: {drops}"
    for key, q in report["queues"].items():  # switch queues; a paused host NIC holds its data (no limit)
        if not q["host"]:
            port, prio = key.split("/p")
            plan = plans[port].lossless[int(prio)]
            assert q["max_backlog"] <= plan.xoff + plan.headroom, key
    assert report["pauses_by_tier"]["host"]["pause_events"] > 0
    assert bottleneck >= 20e6

    _goodput, _bottleneck, drops_off, _, _ = incast(pfc=False)
    assert sum(drops_off.values()) > 50, drops_off
    cpu_window.rates_are_meaningful()
    assert goodput >= 0.9 * bottleneck, f"{goodput / 1e6:.1f} of {bottleneck / 1e6:g} Mbit/s"


# The headroom covers `reaction_ms` of line-rate ingress after a crossing. At 1 s, nothing is lost unless the
# agent stalls for longer, so the behaviour holds on any machine (in full runs here the hypervisor stalled it
# 170-260 ms). The default (auto: this machine's measured reaction) holds only while the machine keeps pace with
# it, which is the timing tier's to show; so is the poll, the fallback where BPF is missing.
@pytest.mark.parametrize("detect,reaction_ms", [("kernel", 1000.0), pytest.param("kernel", "auto", marks=TIMING),
                                                pytest.param("poll", "auto", marks=TIMING)])
def test_pause_reaches_the_sending_hosts_and_nothing_is_lost(no_leftovers, detect, reaction_ms):
    """UDP like RoCE (no congestion control), 4 hosts of segment 0 into one of segment 1 at ~1.5x its ports;
    crossings seen by the kernel's BPF programs, and by the poll where a machine has none."""
    from testbed.experiment.measure import StreamSpec, run_streams

    specs = [StreamSpec(src=f"h{i}", dst="h4", sport=6000 + i, dport=7000, pps=PPS, duration=3, size=1400,
                        stream=i, tos=DSCP26) for i in range(4)]  # see PPS
    with Network(build("hpn"), qos=QosSpec(pfc={"detect": detect, "reaction_ms": reaction_ms})) as net:
        r = run_streams(net, specs, tail=4)
        lossless = net.qos.stats(lossless_leaf(3))
        report = net.stop_qos()
    streams = r["receivers"]["h4:7000"]["streams"]
    sent = sum(s["sent"] for s in r["senders"])
    assert sent >= 4 * 0.9 * PPS * 3  # the senders kept (close to) their pace
    drops = sum(q[0].drops for q in lossless.values() if q)
    timing = report["poll_period_ms"], report["poll_ms"], report["reaction_ms"], report["realtime"]
    if drops and reaction_ms == "auto":
        # The default headroom covers this machine's measured reaction. In full suites here (2026-11-27, 3 runs
        # of 3) the agent was late by 170-260 ms and 218-531 frames were dropped: a known defect (issue #45).
        # Never silently: the run's verdict names the late pause from the agent's own queue figures.
        v = verdict([{"cpu_idle": 0.4, "steal": 0.0, "ovs_thread": 0.3}], report, pfc_enabled=True,
                    lossless_drops=drops)
        print(f"{drops} lossless drops with the default headroom; verdict: {v['reasons']}; agent {timing}")
        assert any(r.startswith("a PFC pause came late") for r in v["reasons"]), (v["reasons"], timing)
        return
    assert drops == 0, timing  # the claim: within what the headroom covers, a late agent is the testbed's defect
    assert report["realtime"] and report["detect"] == detect  # the agent ran SCHED_FIFO, as asked
    timed = report["poll_ms"] if detect == "poll" else report["reaction_ms"]  # polls, or reactions, timed
    assert timed["max"] is not None, timing
    assert sum(s["received"] for s in streams.values()) == sent  # every packet sent arrived
    assert all(s["lost"] == 0 for s in streams.values())
    tiers = report["pauses_by_tier"]
    assert tiers["agg"]["pause_events"] > 0
    assert any(k.split(":")[0] in {"h0", "h1", "h2", "h3"} for k in report["ports"]), report["ports"]


def test_a_pause_stops_its_priority_and_a_resume_sends_at_once(no_leftovers):
    """A lossless stream from h0 paused at h0's NIC ports by hand (as the PFC agent pauses them), held past the
    stream's end, then resumed with nothing else to send: while paused each gate lets at most the one frame it
    was finishing go; on resume the backlog leaves at once (the kick runs the qdisc, shaper.py) and every packet
    arrives."""
    from testbed.experiment.measure import StreamSpec, run_streams
    from testbed.qos.shaper import KICK_MINOR

    spec = StreamSpec(src="h0", dst="h4", sport=6000, dport=7000, pps=1000, duration=1.5, size=1400, tos=DSCP26)
    with Network(build("hpn"), qos=QosSpec()) as net:
        ports = [k for k, p in net.qos.ports.items() if p.node == "h0"]
        gates = lambda: {k: q[0] for k, q in net.qos.stats(lossless_leaf(3)).items() if k in ports}  # noqa: E731
        seen: dict = {}

        def pause() -> None:
            for k in ports:
                net.qos.set_paused(k, 3, True)
            seen["paused"] = gates()

        def resume() -> None:  # after the stream: nothing else would run the qdisc
            seen["held"] = gates()
            t0 = time.monotonic()
            for k in ports:
                net.qos.set_paused(k, 3, False)
            while sum(q.packets for q in gates().values()) == sum(q.packets for q in seen["held"].values()):
                assert time.monotonic() - t0 < 10, "a resumed gate sent nothing"
            seen["first_frame_ms"] = 1000 * (time.monotonic() - t0)
            while any(q.backlog for q in gates().values()):
                assert time.monotonic() - t0 < 30, "a resumed gate kept its backlog"
                time.sleep(0.01)

        r = run_streams(net, [spec], actions=[(0.5, pause), (spec.duration + 0.5, resume)], tail=2)
        kicks = {k: q[0].drops for k, q in net.qos.stats(KICK_MINOR << 16).items() if k in ports}
    paused, held = seen["paused"], seen["held"]
    print(f"backlog held {sum(q.backlog for q in held.values()):,} B; first frame {seen['first_frame_ms']:.1f} ms "
          "after the resume")
    assert sum(q.backlog for q in held.values()) >= 20 * 1400  # the pause held traffic back
    assert all(held[k].packets - paused[k].packets <= 1 for k in ports), (paused, held)  # the frame on the wire
    assert kicks == dict.fromkeys(ports, 1)  # one kick per resume, dropped in its class
    stream = r["receivers"]["h4:7000"]["streams"]["0"]
    assert stream["lost"] == 0 and stream["received"] == r["senders"][0]["sent"]


@pytest.mark.slow
def test_each_lossless_priority_pauses_alone(no_leftovers):
    """Two lossless priorities (802.1p 3 and 4) congested in turn by a UDP incast into h4, while a light stream
    of the other priority crosses the same switches to h5: both lossless, and only the congested one paused."""
    from testbed.experiment.measure import StreamSpec, run_streams
    from testbed.qos.show import snapshot

    dscp = {3: 26, 4: 34}

    def phase(hot: int, cold: int, dport: int) -> list[StreamSpec]:
        # 4 x 14.6 Mbit/s into h4's two 20 Mbit/s ports: congested however the flows hash onto them
        incast = [StreamSpec(src=f"h{i}", dst="h4", sport=6000 + i, dport=dport, pps=1300, duration=3, size=1400,
                             stream=i, tos=dscp[hot] << 2) for i in range(4)]
        light = StreamSpec(src="h1", dst="h5", sport=6100, dport=dport + 1, pps=150, duration=3, size=1400,
                           stream=9, tos=dscp[cold] << 2)
        return [*incast, light]

    # headroom for 1 s of ingress: the claim is each priority's own pause, whatever the agent's pace (CI's
    # rehearsal lost 118 priority-4 frames to a 232 ms late agent at the default; the pause test says why)
    spec = QosSpec(lossless=[{"priority": p, "dscp": d} for p, d in dscp.items()], pfc={"reaction_ms": 1000.0})
    with Network(build("hpn"), qos=spec) as net:
        rows = snapshot(net.owner.run_id, "h0")
        assert {r["class"] for r in rows} == {"high", "lossless3", "lossless4", "default"}
        results, counters = [], []
        for hot, cold, dport in ((3, 4, 7000), (4, 3, 7100)):
            results.append(run_streams(net, phase(hot, cold, dport), tail=4))
            counters.append({int(k): v for k, v in net.pfc.report()["by_priority"].items()})
        drops = {p: sum(q[0].drops for q in net.qos.stats(lossless_leaf(p)).values() if q) for p in dscp}
        report = net.stop_qos()
    period = report["poll_period_ms"], report["poll_ms"], report["realtime"]  # gap, poll itself, SCHED_FIFO
    assert drops == {3: 0, 4: 0}, period
    for r in results:
        sent = sum(s["sent"] for s in r["senders"])
        got = sum(s["received"] for rep in r["receivers"].values() for s in rep["streams"].values())
        assert got == sent  # both priorities lossless, the light stream too
    first, second = counters
    print("per-priority counters after each phase:", counters, "drops:", drops)
    # phase 1: priority 3 congested and paused, priority 4 never; phase 2 the other way round
    assert first[3]["pause_events"] > 0 and first[3]["xoff_events"] > 0
    assert first[4]["pause_events"] == 0 and first[4]["xoff_events"] == 0
    assert second[4]["pause_events"] > 0
    assert second[3]["pause_events"] == first[3]["pause_events"]  # nothing more for the uncongested one
    assert all(k.endswith(("/p3", "/p4")) for k in report["ports"])


def test_stopping_qos_restores_interface_defaults(no_leftovers):
    with Network(build("hpn", hosts_per_segment=2), qos=QosSpec()) as net:
        ports = list(net.qos.ports.values())
        roots = {k: [q.kind for q in qs if q.parent == TC_H_ROOT] for k, qs in net.qos.stats(ports=ports).items()}
        assert all(kinds == ["htb"] for kinds in roots.values())
        assert len(ports) == 2 * len(net.topo.links)
        net.pfc.stop()
        net.pfc.close()  # its process ended, the kernel's queue watch taken out
        removed = net.qos.remove()
        assert removed == len(ports)
        from testbed.qos.shaper import Shaper

        after = Shaper(ports, net.qos_spec).stats(ports=ports)
        kinds = {k: sorted(q.kind for q in qs) for k, qs in after.items()}
        assert all(v == ["noqueue"] for v in kinds.values()), {k: v for k, v in kinds.items() if v != ["noqueue"]}
        net.qos = net.pfc = None


def test_raw_dump_agrees_with_pyroute2(no_leftovers):
    from pyroute2 import IPRoute

    from testbed.qos.netlink import QdiscDumper

    with Network(build("hpn", hosts_per_segment=2), qos=QosSpec(pfc={"enabled": False})) as net:
        d = QdiscDumper()
        before = {(q.ifindex, q.handle): (q.kind, q.bytes) for q in d.dump()}
        with IPRoute() as ipr:
            ref = {(m["index"], m["handle"]): (m.get_attr("TCA_KIND"), m.get_attr("TCA_STATS2")
                                               .get_attr("TCA_STATS_BASIC")["bytes"])
                   for m in ipr.get_qdiscs()}
        after = {(q.ifindex, q.handle): (q.kind, q.bytes) for q in d.dump()}
        lossless = lossless_leaf(3)  # the PFC agent's lean read of the same queues
        lean = {(i, h): sent for i, h, _b, _d, sent in d.backlogs(frozenset((lossless,))) if h == lossless}
        d.close()
        assert lean.keys() == {(i, h) for (i, h) in ref if h == lossless}
        for k, sent in lean.items():  # its bytes sent, read last: the same counter as the dumps', or more
            assert ref[k][1] <= after[k][1] <= sent, k
        assert before.keys() == ref.keys() == after.keys()
        for k, (kind, nbytes) in ref.items():  # counters only grow between the three reads
            assert before[k][0] == kind and before[k][1] <= nbytes <= after[k][1], k
        assert sum(1 for (_i, h) in ref if h == lossless_leaf(3)) == len(root_intfs(net.topo))


def test_qos_show_reads_the_live_run(no_leftovers, hpnlab):
    with Network(build("hpn", hosts_per_segment=2), qos=QosSpec()) as net:
        assert net.pingall().received == 4 * 3 * 2
        r = hpnlab("qos", "show", "--busy")
        assert r.returncode == 0, r.stderr
        from testbed.qos.show import snapshot

        rows = snapshot(net.owner.run_id)
        assert len(rows) == 3 * len(net.qos.ports)
        # Pings are lossy traffic: the default class of h0's ports sent them, lossless sent nothing.
        h0 = {(r["port"], r["class"]): r for r in rows if r["port"].startswith("h0:")}
        assert sum(h0[p, "default"]["sent_bytes"] for p in ("h0:0", "h0:1")) > 0
        assert sum(h0[p, "lossless3"]["sent_bytes"] for p in ("h0:0", "h0:1")) == 0
    assert hpnlab("qos", "show").returncode == 2


def test_pfc_frames_are_on_the_wire(no_leftovers, tmp_path):
    """With frames on, a host that gets paused sees real 802.1Qbb PAUSE/resume frames for priority 3. Captured on
    the rail-0 ports of h4-h6, the incast's senders beside h7: which of them the ToR pauses depends on whose
    frames fill its buffer at the time (the PFC model's default, ingress), so every one it paused is checked."""
    from scapy.contrib.mac_control import MACControlClassBasedFlowControl
    from scapy.utils import rdpcap

    with Network(build("hpn"), qos=QosSpec(pfc={"frames": True})) as net:
        keys = [f"h{h}:{port}" for h in (4, 5, 6) for port in (0, 1)]  # rail 0's two ports, one per plane
        caps = {k: tmp_path / f"{k.replace(':', '-')}.pcap" for k in keys}
        dumps = [net.popen(k.split(":")[0], ["tcpdump", "-i", net.qos.ports[k].ifname, "-U", "-w", str(c), "ether",
                                             "proto", "0x8808"], stderr=subprocess.PIPE, text=True)
                 for k, c in caps.items()]
        for d in dumps:  # capturing once it says so
            assert "listening on" in d.stderr.readline()
        iperf(net, [(f"h{i}", "h7") for i in range(7)], duration=3, tos=DSCP26)
        for d in dumps:
            d.terminate()
            d.wait(timeout=10)
        report = net.stop_qos()
    pfc = MACControlClassBasedFlowControl
    frames = {k: [p[pfc] for p in rdpcap(str(c)) if p.haslayer(pfc)] for k, c in caps.items()}
    paused = [k for k in keys if report["ports"].get(f"{k}/p3", {}).get("pause_events")]
    assert report["pfc_frames_sent"] > 0 and paused, report["ports"]
    assert all(frames[k] for k in paused), {k: len(f) for k, f in frames.items()}
    seen = [f for fs in frames.values() for f in fs]
    assert all(f.c3_enabled == 1 for f in seen)
    assert {f.c3_pause_time for f in seen} <= {0, 0xFFFF} and 0xFFFF in {f.c3_pause_time for f in seen}


def test_threads_entering_host_namespaces_do_not_mix_them_up(no_leftovers):
    """The PFC agent's thread and the main thread both enter host namespaces; each must get its own."""
    import os
    import threading

    from testbed.qos.netlink import QdiscDumper
    from testbed.system.netns import in_netns

    with Network(build("hpn", hosts_per_segment=2)) as net:
        paths = [f"/proc/{net.node(h.name).pid}/ns/net" for h in net.topo.hosts]
        root = os.stat("/proc/self/ns/net").st_ino
        errors = []

        def worker():
            for i in range(100):
                for path, want_many in ((None, True), (paths[i % len(paths)], False)):
                    d = in_netns(path, QdiscDumper)
                    n = len({q.ifindex for q in d.dump()})
                    d.close()
                    if (n > 10) != want_many:  # root: 2 x 40 switch ports; a host: lo + 4 NIC ports
                        errors.append((path, n))
                if os.stat("/proc/thread-self/ns/net").st_ino != root:
                    errors.append("thread left in a host namespace")

        threads = [threading.Thread(target=worker) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


ACKER = """
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, %d); srv.bind(("0.0.0.0", %d)); srv.listen(1)
print("ready", flush=True)
c, _ = srv.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(300):
    got = 0
    while got < 3000:
        got += len(c.recv(3000 - got))
    c.sendall(b"\\1")
"""
ASKER = """
import socket, sys
s = socket.create_connection((sys.argv[1], %d)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, %d)
for _ in range(300):
    s.sendall(b"x" * 3000); s.recv(1)
"""


@SHARED
def test_the_agents_one_byte_acknowledgements_ride_the_high_class(net):
    """A receiver's one-byte "got it all" from an agent's port (traffic/agent.py) rides the high class beside
    TCP's own ACKs, not the data's class behind the host's own bulk data; the sender's data stays in its
    class."""
    high, lossless = HIGH_MINOR << 16, lossless_leaf(3)
    before = {h: net.qos.stats(h) for h in (high, lossless)}
    server = net.popen("h4", [sys.executable, "-c", ACKER % (DSCP26, AGENT_PORT)], stdout=subprocess.PIPE, text=True)
    assert server.stdout.readline().strip() == "ready"
    client = net.popen("h0", [sys.executable, "-c", ASKER % (AGENT_PORT, DSCP26),
                              nic_address(net.topo.nodes["h4"], 0).ip])
    assert client.wait(timeout=60) == 0 and server.wait(timeout=10) == 0
    after = {h: net.qos.stats(h) for h in (high, lossless)}
    ports = [p.key for p in net.qos.ports.values() if p.is_host and p.node == "h4"]

    def packets(handle: int) -> int:
        return sum(after[handle][k][0].packets - before[handle][k][0].packets for k in ports)

    assert packets(high) >= 300 and packets(lossless) <= 10, (packets(high), packets(lossless))


@SHARED
def test_pure_acks_ride_the_high_class_and_small_data_segments_stay_in_theirs(net):
    """16-byte writes without Nagle from h0 to h4 in the lossless class: every data segment, however small, stays
    in its class (in the high one a chunk's short tail overtook the data queued before it, and TCP took the
    reordering for loss: spurious fast retransmits under time dilation), while h4's pure ACKs ride the high
    class."""
    high, lossless = HIGH_MINOR << 16, lossless_leaf(3)
    before = {h: net.qos.stats(h) for h in (high, lossless)}
    server = net.popen("h4", ["iperf3", "-s", "-1", "-p", "5301"])
    assert wait_listening(lambda cmd: net.node("h4").cmd(shlex.join(cmd)), 5301, server, timeout=30)
    client = net.popen("h0", ["iperf3", "-c", nic_address(net.topo.nodes["h4"], 0).ip, "-p", "5301", "-t", "2",
                              "-l", "16", "-N", "-b", "200k", "-S", str(DSCP26)])
    assert client.wait(timeout=30) == 0 and server.wait(timeout=10) == 0
    after = {h: net.qos.stats(h) for h in (high, lossless)}
    ports = {h: [p.key for p in net.qos.ports.values() if p.is_host and p.node == h] for h in ("h0", "h4")}

    def packets(handle: int, host: str) -> int:
        return sum(after[handle][k][0].packets - before[handle][k][0].packets for k in ports[host])

    data = packets(lossless, "h0")
    assert data >= 1000, data  # 200 kbit/s of 16-byte writes for 2 s: ~3,000 segments
    assert packets(high, "h0") <= 30, (packets(high, "h0"), data)  # handshakes, closes, the control connection's ACKs
    assert packets(high, "h4") >= data / 4, (packets(high, "h4"), data)  # the ACKs, delayed or not
