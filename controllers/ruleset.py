"""Per-switch rule bookkeeping shared by every installer (static ovs-ofctl, the OpenFlow app).

A switch's routing table (destination IP -> egress ports) becomes one rule per
destination: output to a port, or to an ECMP set of ports. How a set picks its
port is the hash model's (controllers/hashing.py): with no basis (`ovs`), a
select group (OVS hashes each flow over the buckets; a bucket whose watched
port is down is skipped, the data-plane local repair); with a basis (`asic`,
`asic-seeded`), the `multipath` action writes hash mod n into a register and
table 1 maps it to the set's port, as a commodity switch's ECMP table does (a
dead port leaves the set when the routing table is recomputed without it).
Sets are allocated per distinct port set and reused; `update` returns only
what changed, so an installer touches only the rules a failure affected.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .hashing import seed


@dataclass
class Change:
    new_groups: dict[int, tuple[int, ...]]  # group id -> bucket ports, to add before the rules
    rules: dict[str, tuple[str, int]]  # dst ip -> ("output", port) | ("group", gid), to add or modify
    removed: list[str]  # dst ips whose rule goes away
    stale_groups: list[int]  # to delete after the rules
    basis: int | None = None  # the switch's multipath hash basis; None: select groups
    sizes: dict[int, int] = field(default_factory=dict)  # group id -> ports, for every group `rules` use

    @property
    def empty(self) -> bool:
        return not (self.new_groups or self.rules or self.removed or self.stale_groups)


@dataclass
class RuleSet:
    basis: int | None = None  # see Change.basis
    groups: dict[tuple[int, ...], int] = field(default_factory=dict)  # port set -> group id
    installed: dict[str, tuple[int, ...]] = field(default_factory=dict)  # dst ip -> ports

    @classmethod
    def for_switch(cls, hashing: str, switch: str) -> RuleSet:
        """Empty, with the switch's hash basis under the `hashing` model (ValueError if unknown)."""
        return cls(basis=seed(hashing, switch))

    def _gid(self, ports: tuple[int, ...], new: dict[int, tuple[int, ...]]) -> int:
        gid = self.groups.get(ports)
        if gid is None:
            gid = max(self.groups.values(), default=0) + 1
            self.groups[ports] = gid
            new[gid] = ports
        return gid

    def update(self, table: dict[str, tuple[int, ...]]) -> Change:
        new: dict[int, tuple[int, ...]] = {}
        rules: dict[str, tuple[str, int]] = {}
        for ip, ports in sorted(table.items()):
            if self.installed.get(ip) == ports:
                continue
            rules[ip] = ("output", ports[0]) if len(ports) == 1 else ("group", self._gid(ports, new))
        removed = sorted(set(self.installed) - set(table))
        self.installed = dict(table)
        used = {ports for ports in table.values() if len(ports) > 1}
        stale = [gid for ports, gid in self.groups.items() if ports not in used]
        self.groups = {ports: gid for ports, gid in self.groups.items() if ports in used}
        sizes = {arg: len(table[ip]) for ip, (kind, arg) in rules.items() if kind == "group"}
        return Change(new, rules, removed, stale, self.basis, sizes)
