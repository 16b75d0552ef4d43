"""Interface names of a Topology in Mininet: `<short>-eth<port>` (short names keep them under IFNAMSIZ)."""

from __future__ import annotations

from topos.model import Topology


def intf_name(topo: Topology, node: str, port: int) -> str:
    return f"{topo.nodes[node].short}-eth{port}"


def root_intfs(topo: Topology) -> list[str]:
    """Switch-side interfaces: they live in the root namespace."""
    return [i for s in topo.switches for i in switch_intfs(topo, s.name)]


def switch_intfs(topo: Topology, switch: str) -> list[str]:
    return [intf_name(topo, switch, l.port_of(switch)) for l in topo.links_of(switch)]


def host_intfs(topo: Topology, host: str) -> dict[tuple[int, int], str]:
    """(nic, nic port) -> interface name, for one host."""
    return {(l.nic, l.nic_port): intf_name(topo, host, l.a_port) for l in topo.links_of(host) if l.kind == "host-tor"}
