"""The roce transport (traffic/rocenic.py): the agents' queue pairs put RoCEv2 frames on the wire that scapy's
RoCE layers decode with the ICRC it computes, deliver a collective's closed-form bytes, go back N after a lost
frame, and keep jobs side by side apart by their QP numbers."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading

import pytest
from scapy.contrib.roce import AETH, BTH
from scapy.layers.inet import IP, UDP
from scapy.utils import rdpcap

from testbed.net.network import Network
from testbed.qos.cc import CNP_INTERVAL_S, DcqcnParams
from testbed.qos.spec import QosSpec
from topos import build
from topos.addressing import nic_address
from traffic.collectives import build_schedule
from traffic.replay import Replayer
from traffic.roce.frames import OP_ACK, OP_SEND_FIRST, OP_SEND_LAST, OP_SEND_MIDDLE, OP_SEND_ONLY, ROCE_PORT
from traffic.transports import make

DSCP26 = 26 << 2
SENDS = {OP_SEND_FIRST, OP_SEND_MIDDLE, OP_SEND_LAST, OP_SEND_ONLY}


def _capture(net, host: str, ifname: str, path) -> subprocess.Popen:
    dump = net.popen(host, ["tcpdump", "-i", ifname, "-U", "-w", str(path), "udp", "port", str(ROCE_PORT)],
                     stderr=subprocess.PIPE, text=True)
    assert "listening on" in dump.stderr.readline()
    return dump


def _allreduce(net, tr, hosts: list[str], size: int, iters: int = 1) -> list:
    rp = Replayer(net, tr, channels=2, routing="ecmp")
    sched = build_schedule("allreduce", [(h, 0) for h in hosts], size, "ring")
    try:
        return [rp.run(sched) for _ in range(iters)]
    finally:
        rp.close()


def test_an_allreduce_over_roce_is_rocev2_on_the_wire_and_delivers_its_bytes(tmp_path, no_leftovers):
    topo = build("hpn", hosts_per_segment=2)
    hosts = [h.name for h in topo.hosts]
    with Network(topo, qos=QosSpec(scale=10000)) as net:
        tr = make("roce", net, tos=DSCP26)
        tr.start()
        dumps = [_capture(net, "h1", net.qos.ports[f"h1:{p}"].ifname, tmp_path / f"h1-{p}.pcap") for p in (0, 1)]
        try:
            results = _allreduce(net, tr, hosts, 400_000)
        finally:
            for d in dumps:
                d.terminate()
                d.wait(timeout=10)
            tr.stop()
    r = results[0]
    assert r.bytes_delivered == r.bytes_expected > 0
    totals = {k: sum(c[k] for c in tr.roce.values()) for k in ("sent", "resent", "received", "icrc_errors", "acks")}
    # nothing lost, nothing resent; every frame sent arrived and its ICRC held; the responders' ACKs reached the
    # requesters (counted where they land: h1's capture of its port 0 at times holds none of the frames that
    # port's qdisc sent, measured 48 ACKs sent and 0 captured, while the NICs counted all 192 of every run)
    assert totals["resent"] == totals["icrc_errors"] == 0 and totals["sent"] == totals["received"] > 0, tr.roce
    assert totals["acks"] > 0, tr.roce
    frames = [p for d in (tmp_path / "h1-0.pcap", tmp_path / "h1-1.pcap") for p in rdpcap(str(d))]
    assert len(frames) > 100
    opcodes = {p[BTH].opcode for p in frames}
    assert SENDS & opcodes, opcodes
    for p in frames:
        assert p[UDP].dport == ROCE_PORT and p[IP].tos >> 2 == DSCP26 >> 2 and p[IP].flags == "DF"
        rebuilt = IP(bytes(p[IP]))
        rebuilt[BTH].icrc = None  # scapy computes it again: the kernel's IP header is the one we summed
        assert bytes(rebuilt)[-4:] == bytes(p[IP])[-4:], p.summary()
    acks = [p for p in frames if p[BTH].opcode == OP_ACK]
    assert all(p[AETH].syndrome == 0x1F for p in acks)  # ACKs, no NAK: nothing was out of order
    # each QP's PSNs as h1 sent them: consecutive from 0 (no gap, no resend)
    sent = [p for p in frames if p[BTH].opcode in SENDS and p[IP].src == nic_address(topo.nodes["h1"], 0).ip]
    by_qp: dict[int, list[int]] = {}
    for p in sent:
        by_qp.setdefault(p[BTH].dqpn, []).append(p[BTH].psn)
    assert by_qp and all(psns == list(range(len(psns))) for psns in by_qp.values()), by_qp.keys()


def test_a_lost_frame_makes_the_queue_pair_go_back_n(no_leftovers):
    """RoCE's cost of loss: the responder drops everything after a gap until the lost PSN comes again, so each
    lost frame costs what was in flight behind it (TCP's SACK resends the lost one)."""
    topo = build("hpn", hosts_per_segment=2)
    link = topo.find_link("h1:nic0:p0")
    with Network(topo, qos=QosSpec(scale=10000, pfc={"enabled": False})) as net:
        net.set_link(topo.find_link("h1:nic0:p1").name, up=False)  # h1's rail-0 frames all cross the lossy link
        net.gray.set_loss(link.name, 0.01)
        tr = make("roce", net, tos=DSCP26)
        tr.start()
        try:
            results = _allreduce(net, tr, ["h1", "h3"], 2_000_000)
        finally:
            tr.stop()
        lost = net.gray_counters()[link.name]["errors"]["a_to_b"]
    r, h1, h3 = results[0], tr.roce["h1"], tr.roce["h3"]
    assert r.bytes_delivered == r.bytes_expected
    assert lost > 5, lost  # ~1% of ~2,000 frames
    assert h1["rewinds"] >= 1 and h1["naks"] >= 1, (h1, h3)
    # every loss was answered by going back: more frames resent than lost, and the responder threw away what
    # came after each gap
    assert h1["resent"] > lost and h3["out_of_order"] > 0, (lost, h1, h3)


def test_two_jobs_side_by_side_keep_their_queue_pairs_apart(no_leftovers):
    """Both jobs' frames go to UDP port 4791 on the same hosts; each job's agent takes only its own QP numbers
    (the kernel's socket filter on their top byte)."""
    topo = build("hpn", hosts_per_segment=2)
    hosts = [h.name for h in topo.hosts]
    with Network(topo, qos=QosSpec(scale=10000)) as net:
        trs = [make("roce", net, tos=DSCP26, index=i) for i in range(2)]
        for tr in trs:
            tr.start()
        try:
            out: dict[int, list] = {}
            threads = [threading.Thread(target=lambda i=i: out.update({i: _allreduce(net, trs[i], hosts, 200_000)}))
                       for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
        finally:
            for tr in trs:
                tr.stop()
    for i, tr in enumerate(trs):
        r = out[i][0]
        assert r.bytes_delivered == r.bytes_expected, i
        sent, received = (sum(c[k] for c in tr.roce.values()) for k in ("sent", "received"))
        assert sent == received > 0 and not any(c["icrc_errors"] for c in tr.roce.values()), (i, tr.roce)


def _xdp_links() -> int:
    links = json.loads(subprocess.run(["bpftool", "-j", "link", "show"], capture_output=True, text=True,
                                      check=True).stdout or "[]")
    return sum(1 for link in links if link.get("type") == "xdp")


@pytest.mark.parametrize("mark_at", ["enqueue", "dequeue"])
def test_dcqcn_answers_ce_marks_with_cnps_and_paces_the_queue_pairs(mark_at, no_leftovers):
    """qos.cc dcqcn over roce: the switches mark the ECN-capable frames, the receiving NIC answers with CNPs (at
    most one per QP per interval), every CNP reaches its sender (they ride the high class) and the paced QPs
    finish without one retry timeout (a paced QP waits for its pacer, not for an acknowledgement). Marking at
    dequeue: an XDP program at the far end of every switch port's link, gone with the network.

    The claim is the CNP path, so the fabric must lose nothing: 4 MB of headroom per queue (145 ms of a ToR
    port's ingress). At the default (3 ms of it) 1 run in 2 here lost 2-16 lossless frames: this incast keeps
    userspace OVS's one thread behind, and the frames waiting in its receive sockets (measured: 1.3-1.5 MB in
    all at peaks, up to 410 KB of socket memory at one aggregation port, ~35 ms of that port's rate) reach the
    queue after its pause, past the headroom. Such a run says "NOT faithful" for its lossless drops."""
    topo = build("hpn")
    before = _xdp_links()
    qos = QosSpec(scale=10000, cc="dcqcn", ecn={"mark_at": mark_at}, pfc={"headroom_bytes": 4 << 20})
    with Network(topo, qos=qos) as net:
        far_ends = _xdp_links() - before
        switch_ports = sum(1 for p in net.qos.ports.values() if not p.is_host)
        line = max(q.plan.rate_bps for q in net.qos.ports.values() if q.is_host)
        rp = DcqcnParams().reaction_point(line, net.qos_spec.scale, 1.0)
        tr = make("roce", net, tos=DSCP26, dcqcn=dataclasses.asdict(rp) | {"cnp_interval_s": CNP_INTERVAL_S})
        tr.start()
        rp_ = Replayer(net, tr, channels=2, routing="ecmp")
        try:
            r = rp_.run(build_schedule("incast", [(h.name, 0) for h in topo.hosts], 1_000_000))
        finally:
            rp_.close()
            tr.stop()
        marks = sum((net.ecn_marks() or {}).values())
    c = {k: sum(n[k] for n in tr.roce.values())
         for k in ("ce", "cnps_sent", "cnps_received", "timeouts", "resent", "rate_cuts")}
    assert r.bytes_delivered == r.bytes_expected
    assert marks > 0 and c["ce"] == marks, f"{marks} marks, {c}"  # every mark reached the receiver: nothing was lost
    assert 0 < c["cnps_sent"] <= c["ce"] and c["cnps_received"] == c["cnps_sent"], c
    assert 0 < c["rate_cuts"] <= c["cnps_received"], c  # the senders' reaction points cut on them
    assert c["timeouts"] == c["resent"] == 0, c
    assert far_ends == (switch_ports if mark_at == "dequeue" else 0) and _xdp_links() == before, far_ends
