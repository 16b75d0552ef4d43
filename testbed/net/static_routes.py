"""Install routing Tables without a controller: ovs-ofctl rules and host routes.

Switch rules come from controllers.ruleset (one rule per destination, select
groups for ECMP sets), each switch's change sent as one OpenFlow bundle (one
ovs-ofctl process and one flow-table transaction per switch, however many rules).
Hosts get one multipath route per rail over both ports of that rail's NIC; a
destination that only some ports still reach gets a /32 route over those ports
(the kernel itself skips a port whose link is down). Each NIC port also has a
table of its own for the source ports pinned to it (host-side path choice).
"""

from __future__ import annotations

from controllers.hashing import ECMP_TABLE, FIELDS, HASH_REG, SET_REG
from controllers.routing import Tables
from controllers.ruleset import Change
from topos.addressing import PINNED_SPORTS, rail_subnet

RULE_PRIORITY = 100
PIN_TABLE = 200  # + NIC port index
PIN_RULE_PRIORITY = 500  # before the main table; per-flow steering (1000+) never uses pinned ports


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
                      installed: set[tuple[str, int | None]]) -> tuple[list[str], set[tuple[str, int | None]]]:
    """`ip -batch` lines that bring a host's routes to the tables' state.

    nic_ports maps each NIC to its host ports in NIC-port order (interface
    `{short}-eth{port}`). Besides the main table's multipath routes, NIC port i
    has table PIN_TABLE + i, which the pinned source ports look up (see
    hostpath.PINNED_SPORTS): its rail over that port alone, and a `throw` for
    every destination that port no longer reaches, so such a connection falls
    back to the main table instead of into a dead plane. `installed` is the set
    of (/32 exception, table or None for main) from the last call; the new set
    is returned.
    """
    def hops(ports) -> str:
        return " ".join(f"nexthop dev {short}-eth{p}" for p in sorted(ports))

    lines: list[str] = []
    wanted: set[tuple[str, int | None]] = set()
    for nic, ports in sorted(nic_ports.items()):
        lines.append(f"route replace {rail_subnet(nic)} {hops(ports)}")
        lines += [f"route replace {rail_subnet(nic)} dev {short}-eth{p} table {PIN_TABLE + i}"
                  for i, p in enumerate(ports)]
        live = set(tables.host_live[host, nic])
        for ip, reach in tables.host[host, nic].items():
            for i, p in enumerate(ports):
                if p not in reach:
                    wanted.add((ip, PIN_TABLE + i))
                    lines.append(f"route replace throw {ip}/32 table {PIN_TABLE + i}")
            if set(reach) == live:
                continue
            wanted.add((ip, None))
            lines.append(f"route replace {ip}/32 {hops(reach)}" if reach else f"route replace unreachable {ip}/32")
    lines += [f"route del {ip}/32" + (f" table {t}" if t else "") for ip, t in sorted(installed - wanted,
                                                                                    key=lambda e: (e[1] or 0, e[0]))]
    return lines, wanted


def pin_rules(nic_ports: int) -> list[str]:
    """`ip -batch` lines: TCP source ports PINNED_SPORTS[i] look up NIC port i's table first. TCP only:
    RoCEv2's UDP source ports (0xC000 up) overlap the ranges, and soft-RoCE binds each queue pair to its
    port's own device (pinning its responses elsewhere halved an RDMA WRITE's rate)."""
    return [f"rule add ipproto tcp sport {r.start}-{r.stop - 1} lookup {PIN_TABLE + i} priority {PIN_RULE_PRIORITY}"
            for i, r in sorted(PINNED_SPORTS.items()) if i < nic_ports]
