from __future__ import annotations

import pytest

from testbed.qos.netlink import RTM_NEWTCLASS, htb_class_message
from testbed.qos.spec import MTU, QosSpec, port_plan
from topos.errors import InputError


def test_port_plan_defaults_from_rate_and_poll():
    spec = QosSpec(pfc={"poll_ms": 5})  # scale 10,000
    p = port_plan(400, spec, ingress_gbps=4 * 400 + 3 * 200)  # a ToR port: 4 uplinks + 3 other hosts
    assert p.rate_bps == 40_000_000
    r = 40e6 / 8
    q = p.lossless[3]
    assert q.xoff == max(64 * MTU, int(4 * r * 0.005)) == 100_000
    assert q.xon == 50_000
    assert port_plan(100, spec).lossless[3].xoff == 64 * MTU  # 10 Mbit/s: the floor of two OVS batches
    # five polls of every ingress, an OVS batch already read from the paused port, two frames, the frame the
    # ingress link's paused gate may finish
    assert q.headroom == int(5 * (2200e9 / 1e4 / 8) * 0.005 + 34 * MTU + MTU) == 740_490
    assert q.limit == q.xoff + q.headroom + 2 * MTU
    assert p.buffer_bytes == max(16 * MTU, int(r * 0.020))
    assert p.prio == {"high": 0, "lossless3": 1, "default": 2}
    assert set(p.class_rates_bps.values()) == {400_000}  # 1% floors under strict priority


def test_weighted_and_pfc_off():
    spec = QosSpec(scheduling="weighted", pfc={"enabled": False, "poll_ms": 5})
    p = port_plan(400, spec)
    assert p.class_rates_bps == {"high": 4_000_000, "lossless3": 24_000_000, "default": 12_000_000}
    assert len(set(p.prio.values())) == 1
    assert p.lossless[3].limit == p.buffer_bytes  # without PFC the lossless class is an ordinary queue


def test_several_lossless_priorities_each_with_its_own_numbers():
    spec = QosSpec(pfc={"poll_ms": 5}, lossless=[{"priority": 3, "dscp": 26},
                                                  {"priority": 4, "dscp": 34, "xoff_bytes": 80_000, "weight": 3}])
    p = port_plan(200, spec)
    assert p.prio == {"high": 0, "lossless3": 1, "lossless4": 2, "default": 3}  # served in list order
    assert (p.lossless[3].xoff, p.lossless[4].xoff, p.lossless[4].xon) == (64 * MTU, 80_000, 40_000)
    assert p.lossless[4].limit == 80_000 + p.lossless[4].headroom + 2 * MTU
    assert spec.lossless_dscp == 26 and spec.lossless_dscp_of(4) == 34
    w = port_plan(400, spec.model_copy(update={"scheduling": "weighted"}))
    # lossless's 60 of 100 split 1:3 between the two priorities
    assert w.class_rates_bps == {"high": 4_000_000, "lossless3": 6_000_000, "lossless4": 18_000_000,
                                 "default": 12_000_000}


@pytest.mark.parametrize("raw,field", [
    ({"weights": {"high": 1, "lossless": 1}}, "qos.weights"),
    ({"weights": {"high": 1, "lossless": 0, "default": 1}}, "qos.weights"),
    ({"lossless": [{"priority": 3, "dscp": 48}]}, "qos.lossless[].dscp"),
    ({"lossless": [{"priority": 3, "dscp": 26}, {"priority": 3, "dscp": 30}]}, "qos.lossless[].priority"),
    ({"lossless": [{"priority": 3, "dscp": 26}, {"priority": 4, "dscp": 26}]}, "qos.lossless[].dscp"),
    ({"lossless": [{"priority": p, "dscp": 10 + p} for p in range(7)]}, "qos.lossless"),
])
def test_bad_qos_names_the_field(raw, field):
    with pytest.raises(InputError) as exc:
        QosSpec(**raw)
    assert exc.value.field == field


def test_xon_must_be_below_xoff():
    with pytest.raises(InputError, match="XON"):
        port_plan(200, QosSpec(pfc={"xoff_bytes": 10_000, "xon_bytes": 20_000, "poll_ms": 5}))
    # seven lossless priorities fit under weighted scheduling (one HTB level for all)
    assert len(port_plan(200, QosSpec(scheduling="weighted", pfc={"poll_ms": 5}, lossless=[
        {"priority": p, "dscp": 10 + p} for p in range(7)])).lossless) == 7


def test_htb_class_message_decodes_as_pyroute2_reads_it():
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    raw = htb_class_message(7, 0x10030, 0x10001, rate_bps=2_500_000, ceil_bps=40_000_000, burst=3028, cburst=3028,
                            quantum=MTU, prio=1)
    msg = tcmsg(raw)
    msg.decode()
    assert msg["header"]["type"] == RTM_NEWTCLASS and msg["header"]["length"] == len(raw)
    assert (msg["index"], msg["handle"], msg["parent"]) == (7, 0x10030, 0x10001)
    assert msg.get_attr("TCA_KIND") == "htb"
    parms = msg.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")
    assert parms["rate"] == 2_500_000 // 8 and parms["ceil"] == 40_000_000 // 8
    assert parms["rate___reserved"] == 1  # the linklayer byte: Ethernet, so no rate table is needed
    assert parms["prio"] == 1 and parms["quantum"] == MTU


def test_tbf_gate_message_carries_its_burst_in_bytes_and_a_fast_rate_in_64_bits():
    """The pause gate's TBF change (shaper.py): the burst as TCA_TBF_BURST (bytes; the 32-bit tick count of the
    ratespec overflows at a paused gate's 1 byte/s), the rate past 32 bits of bytes/s in TCA_TBF_RATE64."""
    import struct

    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    from testbed.qos.netlink import (
        NLA_TYPE_MASK,
        RTM_NEWQDISC,
        TCA_OPTIONS,
        TCA_TBF_BURST,
        TCA_TBF_PARMS,
        TCA_TBF_RATE64,
        _attrs,
        tbf_qdisc_message,
    )

    def options(raw: bytes) -> dict[int, bytes]:
        msg = tcmsg(raw)
        msg.decode()
        assert msg["header"]["type"] == RTM_NEWQDISC and msg["header"]["length"] == len(raw)
        assert (msg["index"], msg["handle"], msg["parent"]) == (7, 0x330000, 0x10033)
        assert msg.get_attr("TCA_KIND") == "tbf"
        (opts,) = [(a, b) for t, a, b in _attrs(raw, 16 + 20, len(raw)) if t == TCA_OPTIONS & NLA_TYPE_MASK]
        return {t: raw[a:b] for t, a, b in _attrs(raw, *opts)}

    paused = options(tbf_qdisc_message(7, 0x330000, 0x10033, 8, MTU, 200_000))
    rate, limit = (struct.unpack_from("=I", paused[TCA_TBF_PARMS], at)[0] for at in (8, 24))  # tc_tbf_qopt
    assert (rate, limit, struct.unpack("=I", paused[TCA_TBF_BURST])[0]) == (1, 200_000, MTU)
    assert TCA_TBF_RATE64 not in paused
    fast = options(tbf_qdisc_message(7, 0x330000, 0x10033, 400_000_000_000, 32 * MTU, 200_000))
    assert struct.unpack_from("=I", fast[TCA_TBF_PARMS], 8)[0] == 0xFFFFFFFF
    assert struct.unpack("=Q", fast[TCA_TBF_RATE64])[0] == 50_000_000_000
    with pytest.raises(ValueError):
        tbf_qdisc_message(7, 0x330000, 0x10033, 4, MTU, 200_000)  # under a byte a second


def test_an_older_files_pause_rate_fraction_is_read_and_ignored(caplog):
    """A pause stops now; an experiment file or a run record that still names the old trickle reads, and says so."""
    spec = QosSpec(pfc={"pause_rate_fraction": 0.0625})
    assert "pause_rate_fraction" not in spec.pfc.model_dump()
    assert "pause_rate_fraction is ignored" in caplog.text
    with pytest.raises(ValueError, match="pause_rate_fractio"):
        QosSpec(pfc={"pause_rate_fractio": 0.0625})  # any other unknown key is still refused


def test_auto_poll_period_grows_with_the_switch_ports_and_must_be_resolved():
    from testbed.qos.ports import pfc_poll_ms, resolve
    from topos import build

    small, big = build("hpn"), build("hpn", segments_per_pod=8, hosts_per_segment=8)
    assert pfc_poll_ms(small) == 5.0  # 64 links: 32 host-ToR (1 switch end) + 32 ToR-agg (2) = 96 < 128 ports
    assert pfc_poll_ms(big) == 5.0 * (256 + 2 * 128) / 128  # 64 hosts x 4 ports, 128 uplinks: 20 ms
    spec = resolve(QosSpec(scale="auto"), big, scale=200_000)
    assert (spec.scale, spec.pfc.poll_ms) == (200_000, 20.0)
    headroom = [port_plan(200, s).lossless[3].headroom for s in (spec, resolve(QosSpec(), small))]
    assert headroom[0] > headroom[1] / 20
    with pytest.raises(ValueError, match="resolved"):
        port_plan(200, QosSpec())
    with pytest.raises(InputError):
        QosSpec(pfc={"poll_ms": 0})


def test_with_kernel_events_the_headroom_covers_the_measured_reaction_not_five_polls():
    from testbed.qos.ports import resolve
    from topos import build

    topo = build("hpn")
    polled = resolve(QosSpec(pfc={"poll_ms": 5}), topo)
    kernel = resolve(QosSpec(pfc={"poll_ms": 5}), topo, kernel_reaction_ms=3.0)
    assert (polled.pfc.reaction_ms, kernel.pfc.reaction_ms) == (25.0, 3.0)
    r_in = 2200e9 / 1e4 / 8  # bytes/s into the port's device
    a, b = (port_plan(400, s, ingress_gbps=2200, ingress_links=11).lossless[3] for s in (polled, kernel))
    bursts = 11 * MTU  # every ingress link's paused gate may finish one frame
    assert a.headroom == int(r_in * 0.025 + 34 * MTU + bursts) and b.headroom == int(r_in * 0.003 + 34 * MTU + bursts)
    assert a.xoff == b.xoff and b.limit == b.xoff + b.headroom + 2 * MTU  # only what a pause takes to act changes
    # asked to poll, or given a reaction, the spec keeps it: the measured one is for `auto` with kernel events
    assert resolve(QosSpec(pfc={"poll_ms": 5, "detect": "poll"}), topo, kernel_reaction_ms=3.0).pfc.reaction_ms == 25
    assert resolve(QosSpec(pfc={"reaction_ms": 7}), topo, kernel_reaction_ms=3.0).pfc.reaction_ms == 7
    with pytest.raises(InputError) as exc:
        QosSpec(pfc={"reaction_ms": 0})
    assert exc.value.field == "qos.pfc.reaction_ms"


def test_batch_messages_are_split_at_their_boundaries_and_must_ask_for_acks():
    from pyroute2 import IPBatch

    from testbed.qos.netlink import CLASS_ADD, BatchSender, htb_class_message

    b = IPBatch()
    b.tc("add", "htb", 3, handle=0x10000, default=0x40)
    buf = bytes(b.batch) + htb_class_message(3, 0x10001, 0x10000, 10_000_000, 10_000_000, 3028, 3028, 1514, 0,
                                             flags=CLASS_ADD, seq=1 << 30)
    msgs = BatchSender.messages(buf)
    assert len(msgs) == 2 and msgs[1][2] == 1 << 30 and msgs[1][0] + msgs[1][1] == len(buf)
    with pytest.raises(ValueError, match="ack"):
        BatchSender.messages(htb_class_message(3, 0x10030, 0x10001, 8000, 8000, 3028, 3028, 1514, 1))


def test_a_congestion_control_turns_ecn_marking_on_unless_told_not_to():
    assert not QosSpec().ecn.enabled and QosSpec().cc == "none"
    assert QosSpec(cc="dctcp").ecn.enabled and QosSpec(cc="ecn", ecn={"pmax": 0.5}).ecn.pmax == 0.5
    with pytest.raises(InputError) as e:
        QosSpec(cc="dctcp", ecn={"enabled": False})
    assert e.value.field == "qos.cc"
    with pytest.raises(InputError) as e:
        QosSpec(ecn={"kmin_bytes": 9000, "kmax_bytes": 3000})
    assert e.value.field == "qos.ecn.kmin_bytes"


def test_marking_thresholds_are_hpccs_per_link_speed_in_the_fabrics_bytes():
    from testbed.qos import ecn

    # the published maps: the row of the fastest speed at or below the port's
    assert ecn.published(200) == (600_000, 2_400_000) and ecn.published(400) == (800_000, 3_200_000)
    assert ecn.published(150) == ecn.published(100) == (400_000, 1_600_000) and ecn.published(10) == (100_000, 400_000)
    # cc_incast's fabric (bytes 1/10, time x2,500): a 200 Gbit/s port marks from 60 KB to 240 KB and pauses one
    # OVS batch above Kmax, so DCQCN's marks act before PFC
    dilated = QosSpec(cc="dcqcn", scale=10, pfc={"poll_ms": 5}).dilated(2500)
    p = port_plan(200, dilated).lossless[3]
    assert (p.kmin, p.kmax, p.xoff) == (60_000, 240_000, 240_000 + 32 * MTU)
    assert port_plan(400, dilated).lossless[3].kmax == 320_000
    # the same port at 1/10,000 undilated: the published values are a fraction of a frame; the floor of two OVS
    # batches gives Kmin a quarter of XOFF and Kmax at XOFF
    p = port_plan(200, QosSpec(cc="dcqcn", scale=10_000, pfc={"poll_ms": 5})).lossless[3]
    assert (p.kmin, p.kmax, p.xoff) == (64 * MTU // 4, 64 * MTU, 64 * MTU)
    # DCTCP's step at K = Kmin; thresholds as given win; marking never starts above a given XOFF
    assert port_plan(200, dilated.model_copy(update={"cc": "dctcp"})).lossless[3].kmax == 60_000
    given = QosSpec(cc="dcqcn", scale=10, ecn={"kmin_bytes": 10_000, "kmax_bytes": 50_000}, pfc={"poll_ms": 5})
    assert (port_plan(200, given.dilated(2500)).lossless[3].kmin, port_plan(200, given).lossless[3].kmax) == (
        10_000, 50_000)
    low = QosSpec(cc="dcqcn", scale=10, pfc={"poll_ms": 5, "xoff_bytes": 100_000}).dilated(2500)
    assert (port_plan(200, low).lossless[3].kmin, port_plan(200, low).lossless[3].kmax) == (60_000, 100_000)


def test_headroom_is_stated_per_tier_and_a_short_one_is_named_before_the_run():
    from testbed.qos.ports import egress_ports, headroom_lines, resolve
    from topos import build

    topo = build("hpn")

    def lines(**pfc):
        spec = resolve(QosSpec(pfc={"poll_ms": 5, "reaction_ms": 3.0, **pfc}), topo)
        return headroom_lines(egress_ports(topo, spec, lambda _h: None, lambda n, i: f"{n}-{i}"), spec)

    summary, short = lines()
    assert [line.split(" ports:")[0] for line in summary] == ["PFC headroom at agg", "PFC headroom at tor"]
    assert short == [] and all("(a pause acts in 3.00 ms)" in line for line in summary)
    covered = float(summary[1].split("covering at least ")[1].split(" ms")[0])
    assert covered == pytest.approx(3.0, abs=0.01)  # the default headroom covers exactly the reaction
    summary, short = lines(headroom_bytes=20_000)
    assert len(short) == 4 and short[-1].startswith("... and ") and "more lossless queues short" in short[-1]
    assert "has 20,000 B of headroom" in short[0] and "fix: headroom_bytes of at least" in short[0]
    assert lines(enabled=False) == ([], [])
