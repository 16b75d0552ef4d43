"""The OpenFlow 1.3 controller app, written against the Ryu application API.

Runs under os-ken (default) or Ryu. Configuration comes from the environment,
which the launcher (`hpnlab controller`) sets, so the same module also loads
under `ryu-manager controllers.app`:

    HPNLAB_TOPOLOGY   path of the topology JSON (from `hpnlab topo export`)
    HPNLAB_MODE       ecmp | precise | shortest
    HPNLAB_REST_PORT  loopback port of the REST API (0: none)

Per switch: LLDP and ARP go to the controller, everything else not routed is
dropped; one rule per destination address points at a port or a select group
whose buckets watch their ports (OVS skips a dead bucket at once: local
repair); precise flows get exact 5-tuple rules above that. Port-status events
trigger global repair: ControllerState recomputes and only changed rules are sent.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from topos.model import Topology

from .precise import FlowSpec
from .ruleset import Change
from .ryu_api import (CONFIG_DISPATCHER, DEAD_DISPATCHER, FRAMEWORK, MAIN_DISPATCHER, BaseApp, arp, ether_types,
                      ethernet, lldp, ofp_event, ofproto_v1_3, packet, set_ev_cls)
from .state import PRECISE_PRIORITY, ControllerState, PreciseRule, Update, expected_neighbours, wiring_mismatches

log = logging.getLogger("hpnlab.controller")

ROUTE_PRIORITY = 100
PUNT_PRIORITY = 1000  # LLDP and ARP to the controller
LLDP_SETTLE_S = 1.0


class HpnController(BaseApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        path = os.environ["HPNLAB_TOPOLOGY"]
        with open(path) as f:
            self.topo = Topology.from_json(f.read())
        self.state = ControllerState(self.topo, os.environ.get("HPNLAB_MODE", "ecmp"))
        self.dps: dict[str, object] = {}  # switch name -> datapath
        self.installed: set[str] = set()  # switches whose initial rules a barrier confirmed
        self.started = time.time()
        self.all_installed_at: float | None = None
        self.lldp_seen: dict[tuple[str, int], tuple[str, int]] = {}
        self.lldp_report: dict | None = None
        self._stats: dict[tuple[str, int], list] = {}
        self._stats_wait: dict[tuple[str, int], threading.Event] = {}
        self._xid_lock = threading.Lock()
        port = int(os.environ.get("HPNLAB_REST_PORT", "0"))
        self.rest = None
        if port:
            from .rest import RestServer

            self.rest = RestServer(self, port)
            self.rest.start()
        log.info("hpnlab controller (%s) mode=%s, %d switches expected", FRAMEWORK, self.state.mode,
                 len(self.topo.switches))

    # -- connection ---------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        dp = ev.msg.datapath
        sw = self.state.by_dpid.get(dp.id)
        if sw is None:
            log.warning("unknown datapath %016x connected; ignored", dp.id)
            return
        ofp, parser = dp.ofproto, dp.ofproto_parser
        # Start from nothing: a reconnecting switch may hold stale rules and groups.
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY, match=parser.OFPMatch()))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=ofp.OFPG_ALL))
        to_ctrl = [parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)]
        for eth_type in (ether_types.ETH_TYPE_LLDP, ether_types.ETH_TYPE_ARP):
            self._flow(dp, PUNT_PRIORITY, parser.OFPMatch(eth_type=eth_type), to_ctrl)
        self.dps[sw.name] = dp
        self._send(self.state.switch_connected(sw.name))
        dp.send_msg(parser.OFPBarrierRequest(dp))
        log.info("switch %s (%s) connected", sw.name, sw.short)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier(self, ev):
        sw = self.state.by_dpid.get(ev.msg.datapath.id)
        if sw is None or sw.name in self.installed:
            return
        self.installed.add(sw.name)
        if len(self.installed) == len(self.topo.switches):
            self.all_installed_at = time.time()
            log.info("all %d switches connected and routed %.2f s after start", len(self.installed),
                     self.all_installed_at - self.started)
            threading.Thread(target=self._verify_wiring, daemon=True).start()

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev):
        if ev.state == DEAD_DISPATCHER and ev.datapath is not None:
            sw = self.state.by_dpid.get(ev.datapath.id)
            if sw is not None:
                self.dps.pop(sw.name, None)
                self.installed.discard(sw.name)
                log.warning("switch %s disconnected", sw.name)

    # -- link events: global repair ------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        msg = ev.msg
        dp = msg.datapath
        ofp = dp.ofproto
        sw = self.state.by_dpid.get(dp.id)
        if sw is None or msg.desc.port_no > ofp.OFPP_MAX:
            return
        down = bool(msg.desc.state & ofp.OFPPS_LINK_DOWN) or bool(msg.desc.config & ofp.OFPPC_PORT_DOWN) \
            or msg.reason == ofp.OFPPR_DELETE
        update = self.state.link_event(sw.name, msg.desc.port_no, up=not down)
        if update is not None:
            self._send(update)
            ev_ = self.state.events[-1]
            log.info("%s %s: %d route rules, %d precise flows moved, %.1f ms", ev_["event"], ev_["link"],
                     ev_["rules_changed"], ev_["flows_moved"], ev_["recompute_ms"])

    # -- sending rules ----------------------------------------------------------
    def _flow(self, dp, priority, match, actions, cookie=0, command=None):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        dp.send_msg(parser.OFPFlowMod(dp, cookie=cookie, priority=priority, match=match, instructions=inst,
                                      command=ofp.OFPFC_ADD if command is None else command))

    def _send(self, update: Update) -> None:
        for sw, change in update.routes.items():
            dp = self.dps.get(sw)
            if dp is not None:
                self._send_change(dp, change)
        for r in update.precise_del:
            dp = self.dps.get(r.switch)
            if dp is not None:
                ofp, parser = dp.ofproto, dp.ofproto_parser
                dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE_STRICT, priority=PRECISE_PRIORITY,
                                              match=self._precise_match(parser, r), out_port=ofp.OFPP_ANY,
                                              out_group=ofp.OFPG_ANY))
        for r in update.precise_add:
            dp = self.dps.get(r.switch)
            if dp is not None:
                self._flow(dp, PRECISE_PRIORITY, self._precise_match(dp.ofproto_parser, r),
                           [dp.ofproto_parser.OFPActionOutput(r.out_port)], cookie=r.cookie)

    @staticmethod
    def _precise_match(parser, r: PreciseRule):
        proto = 6 if r.flow.proto == "tcp" else 17
        ports = {"tcp_src": r.flow.sport, "tcp_dst": r.flow.dport} if proto == 6 else \
            {"udp_src": r.flow.sport, "udp_dst": r.flow.dport}
        return parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ipv4_src=r.src_ip, ipv4_dst=r.flow.dst,
                               ip_proto=proto, **ports)

    def _send_change(self, dp, change: Change) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        for gid, ports in sorted(change.new_groups.items()):
            buckets = [parser.OFPBucket(weight=1, watch_port=p, watch_group=ofp.OFPG_ANY,
                                        actions=[parser.OFPActionOutput(p)]) for p in ports]
            dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_ADD, type_=ofp.OFPGT_SELECT, group_id=gid,
                                           buckets=buckets))
        for ip, (kind, arg) in sorted(change.rules.items()):
            action = parser.OFPActionOutput(arg) if kind == "output" else parser.OFPActionGroup(arg)
            self._flow(dp, ROUTE_PRIORITY, parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ipv4_dst=ip), [action])
        for ip in change.removed:
            dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE_STRICT, priority=ROUTE_PRIORITY,
                                          match=parser.OFPMatch(eth_type=ether_types.ETH_TYPE_IP, ipv4_dst=ip),
                                          out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY))
        for gid in change.stale_groups:
            dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE, group_id=gid))

    # -- packet-in: proxy ARP and LLDP -------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        msg = ev.msg
        dp = msg.datapath
        sw = self.state.by_dpid.get(dp.id)
        if sw is None:
            return
        in_port = msg.match["in_port"]
        pkt = packet.Packet(msg.data)
        eth = pkt.get_protocol(ethernet.ethernet)
        if eth is None:
            return
        if eth.ethertype == ether_types.ETH_TYPE_LLDP:
            self._lldp_in(sw.name, in_port, pkt)
        elif eth.ethertype == ether_types.ETH_TYPE_ARP:
            self._arp_in(dp, in_port, pkt.get_protocol(arp.arp))

    def _arp_in(self, dp, in_port: int, req) -> None:
        """Answer ARP for any host address from the address plan; nothing is flooded."""
        if req is None or req.opcode != arp.ARP_REQUEST:
            return
        owner = self.state.ip_owner.get(req.dst_ip)
        if owner is None:
            return
        reply = packet.Packet()
        reply.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP, dst=req.src_mac, src=owner.mac))
        reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=owner.mac, src_ip=owner.ip, dst_mac=req.src_mac,
                                   dst_ip=req.src_ip))
        reply.serialize()
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(in_port)], data=reply.data))

    # -- wiring check with LLDP ------------------------------------------------
    def _lldp_out(self, sw: str, port: int) -> None:
        dp = self.dps.get(sw)
        if dp is None:
            return
        node = self.topo.nodes[sw]
        pkt = packet.Packet()
        pkt.add_protocol(ethernet.ethernet(dst=lldp.LLDP_MAC_NEAREST_BRIDGE, src="02:00:00:ff:ff:ff",
                                           ethertype=ether_types.ETH_TYPE_LLDP))
        tlvs = (lldp.ChassisID(subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED, chassis_id=f"dpid:{node.dpid:016x}".encode()),
                lldp.PortID(subtype=lldp.PortID.SUB_LOCALLY_ASSIGNED, port_id=str(port).encode()),
                lldp.TTL(ttl=10), lldp.End())
        pkt.add_protocol(lldp.lldp(tlvs))
        pkt.serialize()
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER, in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(port)], data=pkt.data))

    def _lldp_in(self, sw: str, port: int, pkt) -> None:
        lp = pkt.get_protocol(lldp.lldp)
        try:
            dpid = int(lp.tlvs[0].chassis_id.decode().split(":", 1)[1], 16)
            src_port = int(lp.tlvs[1].port_id.decode())
        except (AttributeError, IndexError, ValueError):
            return
        src = self.state.by_dpid.get(dpid)
        if src is not None:
            self.lldp_seen[src.name, src_port] = (sw, port)

    def _verify_wiring(self) -> None:
        """Send LLDP out of every switch-to-switch port and compare what arrives with the topology."""
        expected = expected_neighbours(self.topo)
        self.lldp_seen.clear()
        for (sw, port) in expected:
            self._lldp_out(sw, port)
        deadline = time.time() + LLDP_SETTLE_S * 5
        while time.time() < deadline and len(self.lldp_seen) < len(expected):
            time.sleep(0.05)
        mismatches = wiring_mismatches(self.topo, self.lldp_seen, self.state.down)
        self.lldp_report = {"checked_ports": len(expected), "seen": len(self.lldp_seen), "mismatches": mismatches}
        for m in mismatches:
            log.warning("wiring mismatch at %s: expected %s, LLDP saw %s", m["port"], m["expected"], m["seen"])
        if not mismatches:
            log.info("LLDP: all %d switch ports wired as the topology says", len(expected))

    # -- counters ---------------------------------------------------------------
    def _request(self, sw: str, kind: str, timeout: float = 2.0) -> list:
        dp = self.dps.get(sw)
        if dp is None:
            return []
        parser, ofp = dp.ofproto_parser, dp.ofproto
        req = parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY) if kind == "port" else \
            parser.OFPFlowStatsRequest(dp, 0, ofp.OFPTT_ALL, ofp.OFPP_ANY, ofp.OFPG_ANY, 0, 0, parser.OFPMatch())
        with self._xid_lock:
            dp.set_xid(req)
        key = (sw, req.xid)
        self._stats[key] = []
        done = self._stats_wait[key] = threading.Event()
        dp.send_msg(req)
        done.wait(timeout)
        self._stats_wait.pop(key, None)
        return self._stats.pop(key, [])

    def _stats_reply(self, ev):
        msg = ev.msg
        sw = self.state.by_dpid.get(msg.datapath.id)
        key = (sw.name if sw else None, msg.xid)
        if key in self._stats:
            self._stats[key].extend(msg.body)
            if not msg.flags & msg.datapath.ofproto.OFPMPF_REPLY_MORE:
                self._stats_wait[key].set()

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev):
        self._stats_reply(ev)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats(self, ev):
        self._stats_reply(ev)

    def port_counters(self) -> dict:
        out = {}
        for sw in sorted(self.dps):
            out[sw] = {str(s.port_no): {"tx_bytes": s.tx_bytes, "rx_bytes": s.rx_bytes, "tx_packets": s.tx_packets,
                                        "rx_packets": s.rx_packets, "tx_dropped": s.tx_dropped,
                                        "rx_dropped": s.rx_dropped}
                       for s in self._request(sw, "port") if s.port_no <= 0xFFFFFF00}
        return out

    def flow_counters(self) -> dict:
        by_cookie = {c: k for k, c in self.state.cookies.items() if k in self.state.flows}
        out: dict[str, dict] = {}
        for sw in sorted(self.dps):
            for s in self._request(sw, "flow"):
                if s.cookie in by_cookie:
                    out.setdefault(by_cookie[s.cookie], {})[sw] = {"bytes": s.byte_count, "packets": s.packet_count}
        return out

    # -- used by the REST server --------------------------------------------------
    def health(self) -> dict:
        return {"framework": FRAMEWORK, "mode": self.state.mode, "switches": len(self.topo.switches),
                "connected": len(self.dps), "installed": len(self.installed),
                "ready": len(self.installed) == len(self.topo.switches),
                "ready_after_s": None if self.all_installed_at is None else
                round(self.all_installed_at - self.started, 3), "lldp": self.lldp_report}

    def declare(self, flows: list[FlowSpec]) -> list[dict]:
        update = self.state.declare(flows)
        self._send(update)
        self._barrier_all()
        return [self.state.flow_view(f.key) for f in flows]

    def withdraw(self, keys: list[str] | None) -> int:
        update = self.state.withdraw(keys)
        self._send(update)
        return len({r.flow.key for r in update.precise_del})

    def _barrier_all(self) -> None:
        for dp in list(self.dps.values()):
            dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))

    def close(self) -> None:
        if self.rest is not None:
            self.rest.stop()
