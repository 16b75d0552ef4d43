"""The controller's view of the fabric, with no OpenFlow in it (so it is tested without switches).

It holds the topology, which links are down, the routing tables, each switch's
installed rules and the precise-mode flow assignments, and turns every event
(a switch connects, a port goes down or up, flows are declared or withdrawn)
into the rule changes the OpenFlow app must send. Every link event is logged
with its time and how long the recomputation took.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from topos.addressing import nic_address
from topos.model import Link, Topology

from . import crux
from .crux import JobDemand
from .precise import Assignment, FlowSpec, Path, assign, loads
from .routing import RoutingGraph, compute_tables
from .ruleset import Change, RuleSet


class RequestError(ValueError):
    """What a caller asked for cannot be done as asked (the REST API answers 400 with it); any other error
    inside the controller is its own fault (500)."""


MODES = ("ecmp", "precise", "shortest")
PRECISE_PRIORITY = 200


@dataclass(frozen=True)
class PreciseRule:
    switch: str
    flow: FlowSpec
    src_ip: str
    out_port: int
    cookie: int


@dataclass
class Update:
    """What the OpenFlow side must send: default-route changes and precise rule adds/deletes."""

    routes: dict[str, Change] = field(default_factory=dict)
    precise_add: list[PreciseRule] = field(default_factory=list)
    precise_del: list[PreciseRule] = field(default_factory=list)


class ControllerState:
    def __init__(self, topo: Topology, mode: str = "ecmp", hashing: str = "ovs"):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: use one of {', '.join(MODES)}")
        self.topo = topo
        self.mode = mode
        self.hashing = hashing
        self.graph = RoutingGraph(topo)
        self.lock = threading.RLock()
        self.down: set[str] = set()
        self.ports_down: set[tuple[str, int]] = set()
        self.tables = compute_tables(self.graph, (), self._table_mode)
        self.rules: dict[str, RuleSet] = {s.name: RuleSet.for_switch(hashing, s.name) for s in topo.switches}
        self.flows: dict[str, FlowSpec] = {}
        self.assignment = Assignment()
        self.cookies: dict[str, int] = {}
        self.events: list[dict] = []
        self.t0 = time.time()
        self.port_link: dict[tuple[str, int], Link] = {}
        for l in topo.links:
            self.port_link[l.a, l.a_port] = l
            self.port_link[l.b, l.b_port] = l
        self.by_dpid = {s.dpid: s for s in topo.switches}
        self.ip_owner = {a.ip: a for a in self.graph.addresses}

    @property
    def _table_mode(self) -> str:
        return "shortest" if self.mode == "shortest" else "ecmp"

    # -- switches -----------------------------------------------------------
    def switch_connected(self, switch: str) -> Update:
        """A (re)connected switch gets its whole state from scratch."""
        with self.lock:
            self.rules[switch] = RuleSet.for_switch(self.hashing, switch)
            up = Update(routes={switch: self.rules[switch].update(self.tables.switch[switch])})
            up.precise_add = [r for r in self._precise_rules(self.assignment.paths) if r.switch == switch]
            return up

    # -- link state -----------------------------------------------------------
    def link_event(self, switch: str, port: int, up: bool, source: str = "port-status") -> Update | None:
        with self.lock:
            link = self.port_link.get((switch, port))
            if link is None:
                return None
            (self.ports_down.discard if up else self.ports_down.add)((switch, port))
            # A link is up only while every switch end of it is: a late "up" from one end
            # must not revive a link whose other end is still down.
            link_up = not any(end in self.ports_down for end in ((link.a, link.a_port), (link.b, link.b_port)))
            if link_up == (link.name not in self.down):
                return None
            t = time.time()
            (self.down.discard if link_up else self.down.add)(link.name)
            update = self._recompute()
            self.events.append({
                "time": t, "t": round(t - self.t0, 6), "event": "link-up" if link_up else "link-down",
                "link": link.name, "seen_at": f"{switch}:{port}", "source": source,
                "recompute_ms": round((time.time() - t) * 1000, 3),
                "rules_changed": sum(len(c.rules) + len(c.removed) for c in update.routes.values()),
                "flows_moved": len({r.flow.key for r in update.precise_add}),
            })
            return update

    def _recompute(self) -> Update:
        self.tables = compute_tables(self.graph, self.down, self._table_mode)
        update = Update()
        for sw, rs in self.rules.items():
            change = rs.update(self.tables.switch[sw])
            if not change.empty:
                update.routes[sw] = change
        if self.flows:
            paths = self.assignment.paths
            if self.down:
                # Keep every flow whose path is intact; re-place only the broken ones.
                broken = [k for k, p in paths.items() if not self._intact(self.flows[k], p)]
            else:
                broken = list(paths)  # everything restored: rebalance from scratch
            keep = {k: p for k, p in paths.items() if k not in broken}
            update.precise_del = self._precise_rules({k: paths[k] for k in broken})
            update.precise_add = self._place([self.flows[k] for k in broken], keep, old=paths)
        return update

    def _intact(self, f: FlowSpec, p: Path) -> bool:
        host_link = next(l for l in self.graph.attach[f.src, self.ip_owner[f.dst].nic] if l.a_port == p.host_port)
        return host_link.name not in self.down and all(
            self.port_link[h].name not in self.down for h in p.hops if h in self.port_link)

    def _place(self, flows: list[FlowSpec], keep: dict[str, Path], old: dict[str, Path]) -> list[PreciseRule]:
        """Place `flows` around the kept ones; return rules for flows whose path is new."""
        a = assign(self.graph, self.tables, flows, load=loads(self.flows, keep))
        self.assignment = Assignment(paths={**keep, **a.paths}, load=a.load)
        return self._precise_rules({k: p for k, p in a.paths.items() if old.get(k) != p})

    # -- precise mode ---------------------------------------------------------
    def _precise_rules(self, paths: dict[str, Path]) -> list[PreciseRule]:
        out = []
        for key, path in paths.items():
            f = self.flows[key]
            dst = self.ip_owner[f.dst]
            src_ip = nic_address(self.topo.nodes[f.src], dst.nic).ip
            out += [PreciseRule(sw, f, src_ip, port, self.cookies[key]) for sw, port in path.hops]
        return out

    def declare(self, flows: list[FlowSpec]) -> Update:
        """Place new flows around the declared ones (a re-declared flow keeps its path)."""
        with self.lock:
            if self.mode != "precise":
                raise RequestError(f"mode={self.mode!r}: flows are declared in precise mode")
            for f in flows:
                self._check_flow(f)
            # one entry per key: a flow named twice in one request is one flow (its load counts once)
            new = list({f.key: f for f in flows if f.key not in self.flows}.values())
            for f in new:
                self.flows[f.key] = f
                self.cookies.setdefault(f.key, max(self.cookies.values(), default=0) + 1)
            paths = self.assignment.paths
            return Update(precise_add=self._place(new, dict(paths), old=paths))

    def check_ends(self, src: str, dst: str) -> None:
        """A flow's ends: a host of this topology, and another host's address (REST's path queries too)."""
        if src not in self.topo.nodes or self.topo.nodes[src].role != "host":
            raise RequestError(f"src={src[:40]!r}: not a host of this topology")
        if dst not in self.ip_owner:
            raise RequestError(f"dst={dst[:40]!r}: not a host address of this topology")
        if self.ip_owner[dst].host == src:
            raise RequestError(f"dst={dst!r}: an address of src={src!r} itself; a flow goes to another host")

    def _check_flow(self, f: FlowSpec) -> None:
        self.check_ends(f.src, f.dst)
        if f.proto not in ("tcp", "udp"):
            raise RequestError(f"proto={f.proto!r}: use tcp or udp")
        if not (0 <= f.sport < 65536 and 0 <= f.dport < 65536):
            raise RequestError(f"ports={f.sport},{f.dport}: use 0..65535")

    def withdraw(self, keys: list[str] | None = None) -> Update:
        with self.lock:
            # a key named twice is withdrawn once (deleting it twice raised half-way, after the flow was
            # gone but before its path was, and every later declare failed on the stale path)
            keys = list(self.flows) if keys is None else list(dict.fromkeys(keys))
            missing = [k for k in keys if k not in self.flows]
            if missing:
                raise KeyError(f"flow={missing[0]!r}: not declared")
            paths = self.assignment.paths
            update = Update(precise_del=self._precise_rules({k: paths[k] for k in keys if k in paths}))
            keep = {k: p for k, p in paths.items() if k not in keys}
            for k in keys:
                del self.flows[k]
            self.assignment = Assignment(paths=keep, load=loads(self.flows, keep))
            return update

    # -- several jobs (Crux) ----------------------------------------------------
    def schedule_jobs(self, jobs: list[JobDemand], levels: int) -> dict:
        """Crux's order, priorities, lossless levels and paths for `jobs` on the current routes (nothing is
        installed: a job's flows are declared as usual, and its level picks its traffic class)."""
        with self.lock:
            for j in jobs:
                if not j.flows:
                    raise RequestError(f"job {j.name!r}: no flows; a job is scheduled by what it sends")
                for f, _n in j.flows:
                    self._check_flow(f)
            s = crux.schedule(self.graph, self.tables, jobs, self._rate_bps, levels)
        return {"order": s.order, "levels": levels,
                "jobs": {n: {"intensity": s.intensity[n], "priority": s.priority[n], "level": s.level[n]}
                         for n in s.order},
                "contending": sorted(sorted(pair) for pair in s.contends),
                "paths": {k: [{"switch": sw, "port": port} for sw, port in p.hops] for k, p in s.paths.paths.items()}}

    def _rate_bps(self, hop) -> float:
        link = self.port_link.get(hop)
        if link is None:  # a host's NIC port: its host-tor links all run at the NIC rate
            link = next(l for l in self.topo.links_of(hop[0]) if l.kind == "host-tor")
        return link.rate_gbps * 1e9

    def flow_view(self, key: str) -> dict:
        f = self.flows[key]
        p = self.assignment.paths.get(key)
        dst = self.ip_owner[f.dst]
        host = self.topo.nodes[f.src]
        return {
            "flow": key, "src": f.src, "dst": f.dst, "proto": f.proto, "sport": f.sport, "dport": f.dport,
            "cookie": self.cookies[key],
            "egress": None if p is None else {"nic": dst.nic, "port": p.host_port,
                                              "ifname": f"{host.short}-eth{p.host_port}"},
            "path": None if p is None else [{"switch": s, "port": port} for s, port in p.hops],
        }
