"""Links between servers: Mininet's cluster edition's RemoteLink, carried by VXLAN or GRE between the servers'
tunnel addresses from cluster.yaml.

Mininet's own RemoteGRELink tunnels between the SSH addresses, numbers its keys from 1 in every run (two
runs on the same servers collide), and lowers every link's MTU to 1450, also inside one server. Here each
crossing link gets a key of the run's own (from the run id), the tunnel ends use `tunnel_ip`, only the two
ends of a tunnel get its smaller MTU, and the hosts are given an MTU that fits it (Network does that).
Links inside one server are veth pairs, as on one machine. `ssh` is Mininet's own RemoteSSHLink.
"""

from __future__ import annotations

import zlib

from mininet.examples.cluster import RemoteLink, RemoteSSHLink
from mininet.link import Link

from .spec import TUNNEL_MTU

VXLAN_PORT = 4789


def run_key_base(run_id: str) -> int:
    """Where this run's tunnel keys start: 2^16 keys of a run's own in the 24-bit VXLAN id space."""
    return (zlib.crc32(run_id.encode()) & 0xFF) << 16


def tunnel_link(kind: str, tunnel_ip: dict[str, str], run_id: str) -> type:
    """A Link class for this run: `tunnel_ip` maps a Mininet server name to its tunnel address."""
    if kind == "ssh":
        return RemoteSSHLink
    base = run_key_base(run_id)
    counter = iter(range(1, 1 << 16))

    class TunnelLink(RemoteLink):
        def makeIntfPair(self, intfname1, intfname2, addr1=None, addr2=None, node1=None, node2=None,
                         deleteIntfs=True):
            node1 = node1 or self.node1
            node2 = node2 or self.node2
            if node1.server == node2.server:
                return Link.makeIntfPair(intfname1, intfname2, addr1, addr2, node1, node2, deleteIntfs=deleteIntfs)
            key = base + next(counter)
            self.tunnel = key
            for node, intf, addr, here, there in (
                    (node1, intfname1, addr1, node1.server, node2.server),
                    (node2, intfname2, addr2, node2.server, node1.server)):
                local, remote = tunnel_ip[here], tunnel_ip[there]
                if kind == "vxlan":
                    how = f"type vxlan id {key} local {local} remote {remote} dstport {VXLAN_PORT} nolearning"
                else:
                    how = f"type gretap local {local} remote {remote} ttl 64 key {key}"
                out = node.rcmd(f"ip link add name {intf} {how}")
                out += node.rcmd(f"ip link set dev {intf} mtu {TUNNEL_MTU[kind]}"
                                 + (f" address {addr}" if addr else "") + " up")
                if out.strip():
                    raise RuntimeError(f"{kind} tunnel {intf} on {here}: {out.strip()}")
            return None

        def stop(self):
            # the interfaces go with the run's link group (Network), not one by one
            self.tunnel = None

    return TunnelLink
