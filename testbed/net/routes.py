"""Brings host routes (and, without a controller, switch rules) to what the current link state needs."""

from __future__ import annotations

import subprocess

from controllers.routing import RoutingGraph, Tables, compute_tables
from controllers.ruleset import RuleSet
from topos.model import Topology

from .static_routes import bundle_lines, host_route_script
from .workdir import Workdir

OFCTL = ["ovs-ofctl", "-O", "OpenFlow13"]


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed: {r.stderr.strip()}")
    return r


class RouteInstaller:
    def __init__(self, topo: Topology, graph: RoutingGraph, node_of, workdir: Workdir, *, switches: bool,
                 mode: str, site_of, hashing: str = "ovs"):
        self.topo, self.graph, self.node_of, self.workdir = topo, graph, node_of, workdir
        self.site_of = site_of  # node -> its site (testbed.system.site), which runs ovs-ofctl where the switch is
        self.hashing = hashing
        self.switches = switches  # static routing: this installs the switch rules too
        self.table_mode = "shortest" if mode == "shortest" else "ecmp"
        self.rules: dict[str, RuleSet] = {}
        self.host_exceptions: dict[str, set[tuple[str, int | None]]] = {}

    def reconcile(self, down: set[str]) -> Tables:
        tables = compute_tables(self.graph, down, mode=self.table_mode)
        for sw in self.topo.switches if self.switches else ():
            self._switch(sw, tables)
        for h in self.topo.hosts:
            self._host(h, tables)
        return tables

    def _switch(self, sw, tables: Tables) -> None:
        if sw.name not in self.rules:
            self.rules[sw.name] = RuleSet.for_switch(self.hashing, sw.name)
        change = self.rules[sw.name].update(tables.switch[sw.name])
        if change.empty:
            return
        path = self.workdir.write(f"{sw.short}.bundle", bundle_lines(change), sw.name)
        rc, out = self.site_of(sw.name).sh(f"{' '.join(OFCTL)} bundle {sw.short} {path}")
        if rc != 0:
            raise RuntimeError(f"ovs-ofctl bundle {sw.short} failed: {out.strip()}")

    def _host(self, h, tables: Tables) -> None:
        nic_ports: dict[int, list[int]] = {}
        for l in sorted(self.topo.links_of(h.name), key=lambda l: (l.nic, l.nic_port)):
            nic_ports.setdefault(l.nic, []).append(l.a_port)
        lines, exc = host_route_script(h.name, h.short, nic_ports, tables, self.host_exceptions.get(h.name, set()))
        self.host_exceptions[h.name] = exc
        path = self.workdir.write(h.short + ".routes", lines, h.name)
        out = self.node_of(h.name).cmd(f"ip -force -batch {path} 2>&1")
        if "rror" in out:
            raise RuntimeError(f"routes on {h.name}: {out.strip()}")
