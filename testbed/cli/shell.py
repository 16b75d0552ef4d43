"""The Mininet CLI with the testbed's own commands: paths, fail, restore, queues, flows."""

from __future__ import annotations

import subprocess

from mininet.cli import CLI

from controllers.routing import trace
from testbed.net import Network
from topos.addressing import nic_address
from topos.errors import InputError


class TestbedCLI(CLI):
    prompt = "hpnlab> "

    def __init__(self, network: Network, **kw):
        from mininet.log import setLogLevel

        self.network = network
        # start-up runs quiet (warning); typed commands like 'h1 ping h2' print at Mininet's 'output' level
        setLogLevel("output")
        super().__init__(network.net, **kw)

    def _host(self, name: str):
        topo = self.network.topo
        node = topo.nodes.get(name) or next((n for n in topo.hosts if n.short == name), None)
        if node is None or node.role != "host":
            raise InputError("no such host", "use a host name like h0", field="host", value=name)
        return node

    def _switch(self, name: str):
        """A switch by its topology name or its Mininet short name; None (and a hint) if there is none."""
        topo = self.network.topo
        node = topo.nodes.get(name) or next((s for s in topo.switches if s.short == name), None)
        if node is None or node.role == "host":
            self.stdout.write(f"no such switch: {name!r}; use a name from 'net', e.g. {topo.switches[0].short}\n")
            return None
        return node

    def do_paths(self, line: str) -> None:
        """paths A B [NIC]: every switch path (all ECMP branches) from host A to host B's NIC (default 0)."""
        args = line.split()
        if len(args) not in (2, 3):
            self.stdout.write("usage: paths A B [NIC]\n")
            return
        try:
            a, b = self._host(args[0]), self._host(args[1])
            dst = nic_address(b, int(args[2]) if len(args) == 3 else 0)
            paths = sorted(trace(self.network.graph, self.network.tables, a.name, dst.ip))
        except (InputError, LookupError) as exc:
            self.stdout.write(f"{exc}\n")
            return
        self.stdout.write(f"{len(paths)} path(s) {a.name} -> {b.name} ({dst.ip}):\n")
        for p in paths:
            self.stdout.write("  " + " -> ".join(p) + "\n")

    def _set(self, line: str, up: bool) -> None:
        try:
            self.network.set_link(line.strip(), up=up)
            self.stdout.write(f"{line.strip()} {'restored' if up else 'failed'}\n")
        except InputError as exc:
            self.stdout.write(f"{exc}\n")

    def do_queues(self, line: str) -> None:
        """queues [NODE]: classes, rates, backlogs, drops and pause state (needs --qos)."""
        from rich.console import Console

        from testbed.qos.show import snapshot

        from .tables import qos_table

        if self.network.qos is None:
            self.stdout.write("no QoS on this network: start it with --qos\n")
            return
        node = None
        if line.strip():
            sw = self._switch(line.strip())
            if sw is None:
                return
            node = sw.name
        rows = [r for r in snapshot(self.network.owner.run_id, node)
                if node or r["sent_bytes"] or r["backlog"] or r["drops"]]
        Console(file=self.stdout).print(qos_table(rows, "queues"))

    def do_fail(self, line: str) -> None:
        """fail LINK: take a link down (e.g. fail h3:nic0:p0) and reroute."""
        self._set(line, up=False)

    def do_restore(self, line: str) -> None:
        """restore LINK: bring a failed link back and reroute."""
        self._set(line, up=True)

    def do_flows(self, line: str) -> None:
        """flows SWITCH: the OpenFlow rules and groups on a switch, with packet counts (ovs-ofctl)."""
        node = self._switch(line.strip())
        if node is None:
            return
        for what in ("dump-flows", "dump-groups"):
            r = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", what, node.short], capture_output=True, text=True)
            self.stdout.write(r.stdout if r.returncode == 0 else r.stderr)
