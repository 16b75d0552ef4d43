"""The address plan: where every host NIC lives in IP and MAC space.

    NIC r of host i (global host index)  ->  10.r.(i // 200).(i % 200 + 1)  in 10.r.0.0/16
    its MAC                              ->  02:00:00:rr:ii:ii (locally administered)

One /16 per rail: a host reaches rail r of another host from its own NIC r, so
traffic stays on its rail as NCCL's rail-local rings do. Both ports of a
dual-homed NIC carry the same IP and MAC (HPN's non-stacked dual-ToR).
200 hosts per third octet keeps the last octet in 1..200 (never .0 or .255);
65,536/200*200 = 51,200 hosts per rail is far beyond what a laptop emulates.

Source ports are planned too: a TCP connection whose source port is in
PINNED_SPORTS[i] leaves on port i of its NIC (a host policy rule, as an RDMA
application sets a queue pair's LAG port); other source ports follow the
host's own multipath hash.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Node, Topology

HOSTS_PER_OCTET = 200
PREFIX_LEN = 16
PINNED_SPORTS: dict[int, range] = {0: range(40000, 50000), 1: range(50000, 60000)}  # NIC port -> source ports


def nic_port_of(sport: int) -> int | None:
    """The NIC port a source port is pinned to; None: the host's multipath hash decides."""
    for port, sports in PINNED_SPORTS.items():
        if sport in sports:
            return port
    return None


@dataclass(frozen=True)
class NicAddress:
    host: str
    nic: int
    ip: str
    mac: str

    @property
    def subnet(self) -> str:
        return rail_subnet(self.nic)


def rail_subnet(rail: int) -> str:
    return f"10.{rail}.0.0/{PREFIX_LEN}"


def nic_ip(host_index: int, nic: int) -> str:
    return f"10.{nic}.{host_index // HOSTS_PER_OCTET}.{host_index % HOSTS_PER_OCTET + 1}"


def nic_mac(host_index: int, nic: int) -> str:
    return f"02:00:00:{nic:02x}:{(host_index >> 8) & 0xFF:02x}:{host_index & 0xFF:02x}"


def nic_address(host: Node, nic: int) -> NicAddress:
    return NicAddress(host.name, nic, nic_ip(host.index, nic), nic_mac(host.index, nic))


def all_addresses(topo: Topology) -> list[NicAddress]:
    return [nic_address(h, n) for h in topo.hosts for n in range(h.nics)]


def dpid_hex(node: Node) -> str:
    return f"{node.dpid:016x}"
