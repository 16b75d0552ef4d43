"""OpenFlow 1.3 messages for what ControllerState decides (pure: any datapath-like object with
`ofproto` and `ofproto_parser` works, e.g. os-ken's ProtocolDesc, so tests serialize them without a switch).

Per switch: LLDP and ARP go to the controller, everything else not routed is
dropped (fail-mode secure, no table-miss rule); one rule per destination
address points at a port or a select group whose buckets watch their ports
(OVS skips a dead bucket at once: local repair); precise flows get exact
5-tuple rules above that.
"""

from __future__ import annotations

from .hashing import ECMP_TABLE, HASH_REG, NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP, SET_REG
from .ruleset import Change
from .ryu_api import ether_types, nicira_ext
from .state import PRECISE_PRIORITY, PreciseRule, Update

ROUTE_PRIORITY = 100
PUNT_PRIORITY = 1000  # LLDP and ARP to the controller


def flow_add(dp, priority: int, match, actions, cookie: int = 0, table_id: int = 0):
    ofp, parser = dp.ofproto, dp.ofproto_parser
    inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
    return parser.OFPFlowMod(dp, cookie=cookie, priority=priority, match=match, instructions=inst,
                             command=ofp.OFPFC_ADD, table_id=table_id)


def flow_delete_strict(dp, priority: int, match):
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE_STRICT, priority=priority, match=match,
                             out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)


def reset(dp) -> list:
    """Start from nothing: a reconnecting switch may hold stale rules and groups. Then punt LLDP and ARP."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    to_ctrl = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
    return [parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                              out_group=ofp.OFPG_ANY, match=parser.OFPMatch()),
            parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL),
            *(flow_add(dp, PUNT_PRIORITY, parser.OFPMatch(eth_type=t), to_ctrl)
              for t in (ether_types.ETH_TYPE_LLDP, ether_types.ETH_TYPE_ARP))]


def dst_match(parser, ip: str):
    return parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ipv4_dst=ip)


def ecmp_set(dp, gid: int, ports: tuple[int, ...], basis: int | None) -> list:
    """A select group (`ovs` hashing), or table-1 rules from (set, hash mod n) to the port (`asic`)."""
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if basis is None:
        buckets = [parser.OFPBucket(weight=1, watch_port=p, watch_group=ofp.OFPG_ANY,
                                    actions=[parser.OFPActionOutput(p)]) for p in ports]
        return [parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_SELECT, group_id=gid,
                                   buckets=buckets)]
    return [flow_add(dp, ROUTE_PRIORITY, parser.OFPMatch(**{SET_REG: gid, HASH_REG: k}),
                     [parser.OFPActionOutput(p)], table_id=ECMP_TABLE) for k, p in enumerate(ports)]


def ecmp_actions(dp, gid: int, change: Change) -> list:
    parser = dp.ofproto_parser
    if change.basis is None:
        return [parser.OFPActionGroup(gid)]
    return [parser.OFPActionSetField(**{SET_REG: gid}),
            parser.NXActionMultipath(fields=NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP, basis=change.basis,
                                     algorithm=nicira_ext.NX_MP_ALG_MODULO_N, max_link=change.sizes[gid] - 1,
                                     arg=0, ofs_nbits=nicira_ext.ofs_nbits(0, 15), dst=HASH_REG),
            parser.NXActionResubmitTable(table_id=ECMP_TABLE)]


def ecmp_set_delete(dp, gid: int, basis: int | None):
    ofp, parser = dp.ofproto, dp.ofproto_parser
    if basis is None:
        return parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=gid)
    return parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ECMP_TABLE, match=parser.OFPMatch(
        **{SET_REG: gid}), out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY)


def route_change(dp, change: Change) -> list:
    """ECMP sets first, then the rules that use them, then deletions, then sets no rule uses any more."""
    parser = dp.ofproto_parser
    out = [m for gid, ports in sorted(change.new_groups.items()) for m in ecmp_set(dp, gid, ports, change.basis)]
    for ip, (kind, arg) in sorted(change.rules.items()):
        actions = [parser.OFPActionOutput(arg)] if kind == "output" else ecmp_actions(dp, arg, change)
        out.append(flow_add(dp, ROUTE_PRIORITY, dst_match(parser, ip), actions))
    out += [flow_delete_strict(dp, ROUTE_PRIORITY, dst_match(parser, ip)) for ip in change.removed]
    out += [ecmp_set_delete(dp, gid, change.basis) for gid in change.stale_groups]
    return out


def precise_match(parser, r: PreciseRule):
    proto = 6 if r.flow.proto == "tcp" else 17
    ports = {"tcp_src": r.flow.sport, "tcp_dst": r.flow.dport} if proto == 6 else \
        {"udp_src": r.flow.sport, "udp_dst": r.flow.dport}
    return parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ipv4_src=r.src_ip, ipv4_dst=r.flow.dst, ip_proto=proto,
                           **ports)


def update_messages(update: Update, dps: dict) -> list[tuple[object, object]]:
    """(datapath, message) for every connected switch an update touches, in the order they must go."""
    out = []
    for sw, change in update.routes.items():
        dp = dps.get(sw)
        if dp is not None:
            out += [(dp, m) for m in route_change(dp, change)]
    for r in update.precise_del:
        dp = dps.get(r.switch)
        if dp is not None:
            out.append((dp, flow_delete_strict(dp, PRECISE_PRIORITY, precise_match(dp.ofproto_parser, r))))
    for r in update.precise_add:
        dp = dps.get(r.switch)
        if dp is not None:
            out.append((dp, flow_add(dp, PRECISE_PRIORITY, precise_match(dp.ofproto_parser, r),
                                     [dp.ofproto_parser.OFPActionOutput(r.out_port)], cookie=r.cookie)))
    return out


def packet_out(dp, port: int, data: bytes):
    ofp, parser = dp.ofproto, dp.ofproto_parser
    return parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                               actions=[parser.OFPActionOutput(port)], data=data)


def barrier(dp):
    return dp.ofproto_parser.OFPBarrierRequest(dp)


def stats_request(dp, kind: str):
    parser, ofp = dp.ofproto_parser, dp.ofproto
    if kind == "port":
        return parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY)
    return parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, parser.OFPMatch())


def port_is_down(msg) -> bool:
    """A port-status message says the port is gone, admin-down or without carrier."""
    ofp = msg.datapath.ofproto
    return bool(msg.desc.state & ofp.OFPPS_LINK_DOWN) or bool(msg.desc.config & ofp.OFPPC_PORT_DOWN) \
        or msg.reason == ofp.OFPPR_DELETE
