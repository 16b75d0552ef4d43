"""The packets the controller answers or sends itself: proxy ARP replies and LLDP probes (pure)."""

from __future__ import annotations

from topos.addressing import NicAddress

from .ryu_api import arp, ether_types, ethernet, lldp, packet

LLDP_SRC_MAC = "02:00:00:ff:ff:ff"


def arp_reply(req, owner: NicAddress | None) -> bytes | None:
    """The reply to an ARP request for a host address of the plan; None for anything else (nothing floods)."""
    if req is None or req.opcode != arp.ARP_REQUEST or owner is None:
        return None
    reply = packet.Packet()
    reply.add_protocol(ethernet.ethernet(ethertype=ether_types.ETH_TYPE_ARP, dst=req.src_mac, src=owner.mac))
    reply.add_protocol(arp.arp(opcode=arp.ARP_REPLY, src_mac=owner.mac, src_ip=owner.ip, dst_mac=req.src_mac,
                               dst_ip=req.src_ip))
    reply.serialize()
    return reply.data


def lldp_frame(dpid: int, port: int) -> bytes:
    """An LLDP frame naming the sending switch (by DPID) and port."""
    pkt = packet.Packet()
    pkt.add_protocol(ethernet.ethernet(dst=lldp.LLDP_MAC_NEAREST_BRIDGE, src=LLDP_SRC_MAC,
                                       ethertype=ether_types.ETH_TYPE_LLDP))
    tlvs = (lldp.ChassisID(subtype=lldp.ChassisID.SUB_LOCALLY_ASSIGNED, chassis_id=f"dpid:{dpid:016x}".encode()),
            lldp.PortID(subtype=lldp.PortID.SUB_LOCALLY_ASSIGNED, port_id=str(port).encode()),
            lldp.TTL(ttl=10), lldp.End())
    pkt.add_protocol(lldp.lldp(tlvs))
    pkt.serialize()
    return pkt.data


def lldp_source(pkt) -> tuple[int, int] | None:
    """(dpid, port) an LLDP frame of ours was sent from; None if it is not one."""
    lp = pkt.get_protocol(lldp.lldp)
    try:
        return int(lp.tlvs[0].chassis_id.decode().split(":", 1)[1], 16), int(lp.tlvs[1].port_id.decode())
    except (AttributeError, IndexError, ValueError):
        return None
