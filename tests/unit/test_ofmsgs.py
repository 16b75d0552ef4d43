"""OpenFlow messages and packets the controller sends, built and serialized with os-ken's parser (no switch)."""

from __future__ import annotations

from os_ken.lib.packet import arp, ethernet, packet
from os_ken.ofproto import ofproto_parser, ofproto_protocol, ofproto_v1_3

from controllers import ofmsgs
from controllers.packets import arp_reply, lldp_frame, lldp_source
from controllers.precise import FlowSpec
from controllers.ruleset import Change
from controllers.state import ControllerState, PreciseRule
from topos import build
from topos.addressing import nic_address

DP = ofproto_protocol.ProtocolDesc(ofproto_v1_3.OFP_VERSION)
OFP = ofproto_v1_3


def wire(msg):
    """Serialize, then parse back where os-ken has a parser for the type (FlowMod has one)."""
    msg.serialize()
    version, typ, length, xid = ofproto_parser.header(msg.buf)
    assert length == len(msg.buf)
    return ofproto_parser.msg(DP, version, typ, length, xid, msg.buf) if typ == OFP.OFPT_FLOW_MOD else msg


def test_route_change_orders_groups_rules_deletions_then_stale_groups():
    change = Change({1: (3, 4)}, {"10.0.0.1": ("group", 1), "10.0.0.2": ("output", 5)}, ["10.0.0.9"], [7])
    msgs = [wire(m) for m in ofmsgs.route_change(DP, change)]
    assert [type(m).__name__ for m in msgs] == ["OFPGroupMod", "OFPFlowMod", "OFPFlowMod", "OFPFlowMod",
                                                "OFPGroupMod"]
    add_group, to_group, to_port, delete, stale = msgs
    assert add_group.command == OFP.OFPGC_ADD and add_group.type == OFP.OFPGT_SELECT
    assert [(b.watch_port, b.actions[0].port) for b in add_group.buckets] == [(3, 3), (4, 4)]
    assert dict(to_group.match.items()) == {"eth_type": 0x0800, "ipv4_dst": "10.0.0.1"}
    assert to_group.priority == ofmsgs.ROUTE_PRIORITY
    assert to_group.instructions[0].actions[0].group_id == 1
    assert to_port.instructions[0].actions[0].port == 5
    assert delete.command == OFP.OFPFC_DELETE_STRICT and dict(delete.match.items())["ipv4_dst"] == "10.0.0.9"
    assert stale.command == OFP.OFPGC_DELETE and stale.group_id == 7


def test_reset_clears_everything_then_punts_lldp_and_arp():
    msgs = [wire(m) for m in ofmsgs.reset(DP)]
    assert msgs[0].command == OFP.OFPFC_DELETE and msgs[0].table_id == OFP.OFPTT_ALL
    assert msgs[1].group_id == OFP.OFPG_ALL
    punted = {dict(m.match.items())["eth_type"] for m in msgs[2:]}
    assert punted == {0x88CC, 0x0806}
    assert all(m.instructions[0].actions[0].port == OFP.OFPP_CONTROLLER for m in msgs[2:])


def test_precise_rules_match_the_five_tuple_and_carry_the_cookie():
    topo = build("hpn")
    st = ControllerState(topo, "precise")
    dst = nic_address(topo.nodes["h5"], 0).ip
    update = st.declare([FlowSpec("h0", dst, "udp", 40001, 4791)])
    dps = {sw: DP for sw in {r.switch for r in update.precise_add}}
    msgs = [(sw, wire(m)) for sw, m in ofmsgs.update_messages(update, dps)]
    assert len(msgs) == len(update.precise_add) >= 3  # ToR, aggregation, ToR
    for _dp, m in msgs:
        assert dict(m.match.items()) == {"eth_type": 0x0800, "ipv4_src": nic_address(topo.nodes["h0"], 0).ip,
                                         "ipv4_dst": dst, "ip_proto": 17, "udp_src": 40001, "udp_dst": 4791}
        assert m.cookie == st.cookies[FlowSpec("h0", dst, "udp", 40001, 4791).key]
    # switches that are not connected get nothing
    assert ofmsgs.update_messages(update, {}) == []


def test_tcp_precise_match_uses_tcp_ports():
    r = PreciseRule("t0", FlowSpec("h0", "10.0.0.5", "tcp", 20001, 9000), "10.0.0.1", 3, 1)
    assert dict(ofmsgs.precise_match(DP.ofproto_parser, r).items())["tcp_src"] == 20001


def test_arp_reply_answers_only_plan_addresses():
    topo = build("hpn")
    owner = nic_address(topo.nodes["h3"], 0)
    req = arp.arp(opcode=arp.ARP_REQUEST, src_mac="02:00:00:00:00:01", src_ip="10.0.0.1", dst_ip=owner.ip)
    got = packet.Packet(arp_reply(req, owner))
    eth, a = got.get_protocol(ethernet.ethernet), got.get_protocol(arp.arp)
    assert (eth.src, eth.dst) == (owner.mac, "02:00:00:00:00:01")
    assert (a.opcode, a.src_ip, a.src_mac, a.dst_ip) == (arp.ARP_REPLY, owner.ip, owner.mac, "10.0.0.1")
    assert arp_reply(req, None) is None
    assert arp_reply(arp.arp(opcode=arp.ARP_REPLY), owner) is None


def test_lldp_frame_round_trip():
    assert lldp_source(packet.Packet(lldp_frame(0x1A2B, 17))) == (0x1A2B, 17)


def test_asic_ecmp_is_multipath_then_a_table_of_set_and_bucket():
    change = Change({2: (3, 4, 5)}, {"10.0.0.1": ("group", 2)}, [], [1], basis=4242, sizes={2: 3})
    msgs = [wire(m) for m in ofmsgs.route_change(DP, change)]
    *buckets, rule, stale = msgs
    assert [(b.table_id, dict(b.match.items()), b.instructions[0].actions[0].port) for b in buckets] == [
        (1, {"reg1": 2, "reg0": k}, p) for k, p in enumerate((3, 4, 5))]
    load, mp, resubmit = rule.instructions[0].actions
    assert (load.key, load.value) == ("reg1", 2)
    assert (mp.fields, mp.basis, mp.algorithm, mp.max_link, mp.dst) == (3, 4242, 0, 2, "reg0")
    assert resubmit.table_id == 1 and rule.table_id == 0
    assert stale.command == OFP.OFPFC_DELETE and stale.table_id == 1 and dict(stale.match.items()) == {"reg1": 1}
