"""Install routing Tables without a controller: ovs-ofctl rules and host routes.

Switch rules come from controllers.ruleset (one rule per destination, select
groups for ECMP sets), each switch's change sent as one OpenFlow bundle (one
ovs-ofctl process and one flow-table transaction per switch, however many rules).
Hosts get one multipath route per rail over both ports of that rail's NIC; a
destination that only some ports still reach gets a /32 route over those ports
(the kernel itself skips a port whose link is down).
"""

from __future__ import annotations

from controllers.hashing import ECMP_TABLE, FIELDS, HASH_REG, SET_REG
from controllers.routing import Tables
from controllers.ruleset import Change
from topos.addressing import rail_subnet

RULE_PRIORITY = 100


def group_lines(gid: int, ports: tuple[int, ...], basis: int | None) -> list[str]:
    if basis is None:
        return [f"group add group_id={gid},type=select,"
                + ",".join(f"bucket=watch_port:{p},output:{p}" for p in ports)]
    return [f"flow add table={ECMP_TABLE},priority={RULE_PRIORITY},{SET_REG}={gid},{HASH_REG}={k},actions=output:{p}"
            for k, p in enumerate(ports)]


def flow_line(ip: str, action: tuple[str, int], change: Change) -> str:
    kind, arg = action
    if kind == "output":
        acts = f"output:{arg}"
    elif change.basis is None:
        acts = f"group:{arg}"
    else:
        acts = (f"load:{arg}->NXM_NX_{SET_REG.upper()}[],multipath({FIELDS},{change.basis},modulo_n,"
                f"{change.sizes[arg]},0,NXM_NX_{HASH_REG.upper()}[0..15]),resubmit(,{ECMP_TABLE})")
    return f"priority={RULE_PRIORITY},ip,nw_dst={ip},actions={acts}"


def bundle_lines(change: Change) -> list[str]:
    """One `ovs-ofctl bundle` file for a switch's change, applied as one atomic transaction.

    Order matters: ECMP sets before the rules that use them, set deletions after
    the rules that used them are gone.
    """
    stale = ([f"group delete group_id={gid}" for gid in change.stale_groups] if change.basis is None else
             [f"flow delete table={ECMP_TABLE},{SET_REG}={gid}" for gid in change.stale_groups])
    return ([line for g, p in sorted(change.new_groups.items()) for line in group_lines(g, p, change.basis)]
            + [f"flow add {flow_line(ip, a, change)}" for ip, a in sorted(change.rules.items())]
            + [f"flow delete_strict priority={RULE_PRIORITY},ip,nw_dst={ip}" for ip in change.removed]
            + stale)


def host_route_script(host: str, short: str, nic_ports: dict[int, list[int]], tables: Tables,
                      installed: set[str]) -> tuple[list[str], set[str]]:
    """`ip -batch` lines that bring a host's routes to the tables' state.

    nic_ports maps each NIC to its host ports (interface `{short}-eth{port}`).
    `installed` is the set of /32 exception routes from the last call; the new
    set is returned.
    """
    def hops(ports) -> str:
        return " ".join(f"nexthop dev {short}-eth{p}" for p in sorted(ports))

    lines: list[str] = []
    wanted: set[str] = set()
    for nic, ports in sorted(nic_ports.items()):
        lines.append(f"route replace {rail_subnet(nic)} {hops(ports)}")
        live = set(tables.host_live[host, nic])
        for ip, reach in tables.host[host, nic].items():
            if set(reach) == live:
                continue
            wanted.add(ip)
            lines.append(f"route replace {ip}/32 {hops(reach)}" if reach else f"route replace unreachable {ip}/32")
    lines += [f"route del {ip}/32" for ip in sorted(installed - wanted)]
    return lines, wanted
