"""The OpenFlow 1.3 controller app, written against the Ryu application API.

Runs under os-ken (default) or Ryu. Configuration comes from the environment,
which the launcher (`hpnlab controller`) sets, so the same module also loads
under `ryu-manager controllers.app`:

    HPNLAB_TOPOLOGY   path of the topology JSON (from `hpnlab topo export`)
    HPNLAB_MODE       ecmp | precise | shortest
    HPNLAB_HASHING    ovs | asic | asic-seeded (how switches pick among ECMP next hops)
    HPNLAB_REST_PORT  loopback port of the REST API (0: none)
    HPNLAB_REST_TOKEN_FILE  the 0600 file holding the token every REST request must carry
    HPNLAB_REMOTE_SWITCHES  JSON {switch: address} of switches on other servers (a cluster run), admitted
                            only from that address

The event handlers are thin: ControllerState (state.py) decides, ofmsgs.py
turns its decisions into OpenFlow messages, packets.py answers ARP and builds
LLDP, wiring.py checks the cabling, stats.py waits for counter replies.
Port-status events trigger global repair: the state recomputes and only
changed rules are sent.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque

from topos.model import Topology

from . import ofmsgs
from .client import read_token
from .packets import arp_reply, lldp_frame, lldp_source
from .peers import refusal, socket_uid
from .precise import FlowSpec
from .ryu_api import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    FRAMEWORK,
    MAIN_DISPATCHER,
    BaseApp,
    arp,
    ether_types,
    ethernet,
    ofp_event,
    ofproto_v1_3,
    packet,
    set_ev_cls,
)
from .state import ControllerState, Update
from .stats import StatsWaiter
from .wiring import WiringCheck

log = logging.getLogger("hpnlab.controller")


class HpnController(BaseApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.environ["HPNLAB_TOPOLOGY"]) as f:
            self.topo = Topology.from_json(f.read())
        self.state = ControllerState(self.topo, os.environ.get("HPNLAB_MODE", "ecmp"),
                                     os.environ.get("HPNLAB_HASHING", "ovs"))
        self.remote_switches: dict[str, str] = json.loads(os.environ.get("HPNLAB_REMOTE_SWITCHES") or "{}")
        self.dps: dict[str, object] = {}  # switch name -> datapath
        self.refused: deque[dict] = deque(maxlen=64)  # OpenFlow connections turned away, newest last
        self.refused_count = 0
        self.installed: set[str] = set()  # switches whose initial rules a barrier confirmed
        self.started = time.time()
        self.all_installed_at: float | None = None
        self.wiring = WiringCheck(self.topo)
        self.stats = StatsWaiter()
        port = int(os.environ.get("HPNLAB_REST_PORT", "0"))
        self.rest = None
        if port:
            from .rest import RestServer

            token_file = os.environ.get("HPNLAB_REST_TOKEN_FILE")
            if not token_file:
                raise RuntimeError("HPNLAB_REST_PORT is set but HPNLAB_REST_TOKEN_FILE is not: the REST API needs a "
                                   "token file (mode 0600) and never runs open")
            self.rest = RestServer(self, port, read_token(token_file))
            self.rest.start()
        log.info("hpnlab controller (%s) mode=%s, %d switches expected", FRAMEWORK, self.state.mode,
                 len(self.topo.switches))

    # -- event handlers: each hands over to the state and the message builders -------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def _features(self, ev):
        name = self.admit(ev.msg.datapath)
        if name is not None:
            self.connected(ev.msg.datapath, name)

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def _barrier(self, ev):
        sw = self._switch(ev.msg.datapath)
        if sw is not None:
            self.stats.reply(ev.msg)
            self.confirmed(sw.name)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def _state_change(self, ev):
        sw = self._switch(ev.datapath) if ev.state == DEAD_DISPATCHER and ev.datapath is not None else None
        if sw is not None:
            self.disconnected(sw.name)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def _port_status(self, ev):
        sw = self._switch(ev.msg.datapath)
        if sw is not None and ev.msg.desc.port_no <= ev.msg.datapath.ofproto.OFPP_MAX:
            self.link_event(sw.name, ev.msg.desc.port_no, up=not ofmsgs.port_is_down(ev.msg))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def _packet_in(self, ev):
        sw = self._switch(ev.msg.datapath)
        if sw is not None:
            self.packet_in(ev.msg.datapath, sw.name, ev.msg.match["in_port"], packet.Packet(ev.msg.data))

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def _port_stats(self, ev):
        if self._switch(ev.msg.datapath) is not None:
            self.stats.reply(ev.msg)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def _flow_stats(self, ev):
        if self._switch(ev.msg.datapath) is not None:
            self.stats.reply(ev.msg)

    # -- what the handlers hand over to ---------------------------------------------------
    def _switch(self, dp):
        """The switch behind an admitted connection; None for any other connection, whatever DPID it claims."""
        sw = self.state.by_dpid.get(dp.id)
        return sw if sw is not None and self.dps.get(sw.name) is dp else None

    def admit(self, dp) -> str | None:
        sw = self.state.by_dpid.get(dp.id)
        old = self.dps.get(sw.name) if sw is not None else None
        why = refusal(known=sw is not None, uid=socket_uid(dp.address, dp.socket.getsockname()),
                      own_uid=os.geteuid(), live_duplicate=old is not None and old is not dp and old.is_active,
                      peer_ip=dp.address[0], runs_at=self.remote_switches.get(sw.name) if sw is not None else None)
        if why is None:
            return sw.name
        log.warning("refused OpenFlow connection from %s claiming DPID %016x: %s", dp.address, dp.id, why)
        self.refused_count += 1
        self.refused.append({"time": time.time(), "dpid": f"{dp.id:016x}", "peer": f"{dp.address[0]}:{dp.address[1]}",
                             "reason": why})
        dp.close()
        return None

    def connected(self, dp, name: str) -> None:
        for m in ofmsgs.reset(dp):
            dp.send_msg(m)
        self.dps[name] = dp
        self._send(self.state.switch_connected(name))
        dp.send_msg(ofmsgs.barrier(dp))
        log.info("switch %s connected", name)

    def confirmed(self, name: str) -> None:
        if name in self.installed:
            return
        self.installed.add(name)
        if len(self.installed) == len(self.topo.switches):
            self.all_installed_at = time.time()
            log.info("all %d switches connected and routed %.2f s after start", len(self.installed),
                     self.all_installed_at - self.started)
            threading.Thread(target=self.wiring.run, args=(self._lldp_out, self.state.down), daemon=True).start()

    def disconnected(self, name: str) -> None:
        self.dps.pop(name, None)
        self.installed.discard(name)
        log.warning("switch %s disconnected", name)

    def link_event(self, name: str, port: int, up: bool) -> None:
        update = self.state.link_event(name, port, up=up)
        if update is not None:
            self._send(update)
            e = self.state.events[-1]
            log.info("%s %s: %d route rules, %d precise flows moved, %.1f ms", e["event"], e["link"],
                     e["rules_changed"], e["flows_moved"], e["recompute_ms"])

    def packet_in(self, dp, name: str, in_port: int, pkt) -> None:
        eth = pkt.get_protocol(ethernet.ethernet)
        if eth is None:
            return
        if eth.ethertype == ether_types.ETH_TYPE_LLDP:
            src = lldp_source(pkt)
            sender = self.state.by_dpid.get(src[0]) if src else None
            if sender is not None:
                self.wiring.heard((sender.name, src[1]), (name, in_port))
        elif eth.ethertype == ether_types.ETH_TYPE_ARP:
            req = pkt.get_protocol(arp.arp)
            reply = arp_reply(req, self.state.ip_owner.get(req.dst_ip) if req is not None else None)
            if reply is not None:
                dp.send_msg(ofmsgs.packet_out(dp, in_port, reply))

    def _lldp_out(self, name: str, port: int) -> None:
        dp = self.dps.get(name)
        if dp is not None:
            dp.send_msg(ofmsgs.packet_out(dp, port, lldp_frame(self.topo.nodes[name].dpid, port)))

    def _send(self, update: Update) -> list[tuple[object, object]]:
        sent = ofmsgs.update_messages(update, self.dps)
        for dp, msg in sent:
            dp.send_msg(msg)
        return sent

    # -- used by the REST server ------------------------------------------------------------
    def port_counters(self) -> dict:
        out = {}
        for sw in sorted(self.dps):
            dp = self.dps.get(sw)
            if dp is None:
                continue
            out[sw] = {str(s.port_no): {"tx_bytes": s.tx_bytes, "rx_bytes": s.rx_bytes, "tx_packets": s.tx_packets,
                                        "rx_packets": s.rx_packets, "tx_dropped": s.tx_dropped,
                                        "rx_dropped": s.rx_dropped}
                       for s in self.stats.request(dp, ofmsgs.stats_request(dp, "port")) if s.port_no <= 0xFFFFFF00}
        return out

    def flow_counters(self) -> dict:
        by_cookie = {c: k for k, c in self.state.cookies.items() if k in self.state.flows}
        out: dict[str, dict] = {}
        for sw in sorted(self.dps):
            dp = self.dps.get(sw)
            if dp is None:
                continue
            for s in self.stats.request(dp, ofmsgs.stats_request(dp, "flow")):
                if s.cookie in by_cookie:
                    out.setdefault(by_cookie[s.cookie], {})[sw] = {"bytes": s.byte_count, "packets": s.packet_count}
        return out

    def health(self) -> dict:
        return {"framework": FRAMEWORK, "mode": self.state.mode, "hashing": self.state.hashing,
                "switches": len(self.topo.switches),
                "connected": len(self.dps), "installed": len(self.installed),
                "ready": len(self.installed) == len(self.topo.switches),
                "ready_after_s": None if self.all_installed_at is None else
                round(self.all_installed_at - self.started, 3), "lldp": self.wiring.report,
                "refused_connections": self.refused_count, "last_refused": self.refused[-1] if self.refused else None}

    def declare(self, flows: list[FlowSpec]) -> list[dict]:
        """Install the flows' rules and answer once every switch they touch has applied them (a barrier each):
        a declared connection's first byte must find its path in place, and a sender that starts while
        userspace OVS is still taking in hundreds of rules competes with it for the CPU."""
        touched = {id(dp): dp for dp, _m in self._send(self.state.declare(flows))}
        late = self.stats.request_all([(dp, ofmsgs.barrier(dp)) for dp in touched.values()])
        if late:
            log.warning("%d of %d switches did not confirm the declared rules in time", late, len(touched))
        return [self.state.flow_view(f.key) for f in flows]

    def withdraw(self, keys: list[str] | None) -> int:
        update = self.state.withdraw(keys)
        self._send(update)
        return len({r.flow.key for r in update.precise_del})

    def close(self) -> None:
        if self.rest is not None:
            self.rest.stop()
