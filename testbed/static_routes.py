"""Translate routing Tables into OpenFlow rules and host routes (no controller needed).

Switches get one rule per destination address: output to a port, or to an
OpenFlow 1.3 select group (OVS hashes each flow's 5-tuple over its buckets) for
an ECMP set. Hosts get one multipath route per rail over both ports of that
rail's NIC; a destination that only some ports still reach gets a /32 route
over those ports (the kernel itself skips a port whose link is down).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controllers.routing import Tables
from topos.addressing import rail_subnet

RULE_PRIORITY = 100


@dataclass
class SwitchRules:
    groups: dict[tuple[int, ...], int] = field(default_factory=dict)  # ECMP port set -> group id

    def render(self, table: dict[str, tuple[int, ...]]) -> tuple[list[str], list[str], list[int]]:
        """Group lines to add, flow lines (the whole table), group ids no longer used."""
        new_groups: list[str] = []
        used: set[int] = set()
        flows = []
        for ip, ports in sorted(table.items()):
            if len(ports) == 1:
                action = f"output:{ports[0]}"
            else:
                gid = self.groups.get(ports)
                if gid is None:
                    gid = max(self.groups.values(), default=0) + 1
                    self.groups[ports] = gid
                    new_groups.append(f"group_id={gid},type=select," + ",".join(f"bucket=output:{p}" for p in ports))
                used.add(gid)
                action = f"group:{gid}"
            flows.append(f"priority={RULE_PRIORITY},ip,nw_dst={ip},actions={action}")
        stale = [gid for ports, gid in self.groups.items() if gid not in used]
        for ports in [p for p, g in self.groups.items() if g in stale]:
            del self.groups[ports]
        return new_groups, flows, stale


def host_route_script(host: str, nics: int, intf_of: dict[tuple[int, int], str], tables: Tables,
                      installed: set[str]) -> tuple[list[str], set[str]]:
    """`ip -batch` lines that bring a host's routes to the tables' state.

    intf_of maps (nic, host port) -> interface name. `installed` is the set of
    /32 exception routes from the last call; the new set is returned.
    """
    lines: list[str] = []
    wanted: set[str] = set()
    for nic in range(nics):
        ports = sorted(p for (n, p) in intf_of if n == nic)
        hops = " ".join(f"nexthop dev {intf_of[nic, p]}" for p in ports)
        lines.append(f"route replace {rail_subnet(nic)} {hops}")
        live = set(tables.host_live[host, nic])
        for ip, reach in tables.host[host, nic].items():
            if set(reach) == live:
                continue
            wanted.add(ip)
            if reach:
                lines.append(f"route replace {ip}/32 " + " ".join(f"nexthop dev {intf_of[nic, p]}" for p in reach))
            else:
                lines.append(f"route replace unreachable {ip}/32")
    lines += [f"route del {ip}/32" for ip in sorted(installed - wanted)]
    return lines, wanted
