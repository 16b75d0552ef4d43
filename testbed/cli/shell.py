"""The Mininet CLI with the testbed's own commands: paths, fail, restore, lossy, degrade, gray, queues, flows."""

from __future__ import annotations

import logging
import subprocess

from mininet.cli import CLI

from controllers.routing import trace
from testbed.experiment.spec import check_degraded_rate
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
        # Mininet prints through its own handler; passed on to ours as well, every line of a command's output
        # came twice, once prefixed "Level 25 mininet:"
        logging.getLogger("mininet").propagate = False
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
        Console(file=self.stdout).print(qos_table(rows, "queues", headroom=False))

    def do_fail(self, line: str) -> None:
        """fail LINK: take a link down (e.g. fail h3:nic0:p0) and reroute."""
        self._set(line, up=False)

    def do_restore(self, line: str) -> None:
        """restore LINK: bring a failed link back and reroute; a lossy or slower one runs as it should again."""
        if self.network.gray_counters() and line.strip():  # gray links only exist once one was made
            try:
                self.network.gray.restore(line.strip())
            except InputError as exc:
                self.stdout.write(f"{exc}\n")
                return
        self._set(line, up=True)

    def _gray_link(self, line: str, usage: str, field: str):
        """(link, value) from 'LINK VALUE', or None after saying what is wrong: the shaped links own gray
        failures, so a network without --qos has none."""
        args = line.split()
        if len(args) != 2:
            self.stdout.write(f"usage: {usage}\n")
            return None
        if self.network.qos is None:
            self.stdout.write("no shaped links on this network: start it with --qos\n")
            return None
        try:
            link = self.network.topo.find_link(args[0])
            value = float(args[1])
        except InputError as exc:
            self.stdout.write(f"{exc}\n")
            return None
        except ValueError:
            self.stdout.write(f"{InputError('not a number', f'usage: {usage}', field=field, value=args[1])}\n")
            return None
        return link, value

    def _gray_change(self, link, change, fix: str) -> bool:
        """Make one gray change; what the gray layer refuses (a port on another server) is said in one line and
        the CLI goes on."""
        try:
            change()
        except ValueError as exc:
            self.stdout.write(f"{InputError(str(exc), fix, field='LINK', value=link.name)}\n")
            return False
        return True

    def do_lossy(self, line: str) -> None:
        """lossy LINK P: the link keeps running but loses a share P of its frames each way, dropped in the
        kernel (e.g. lossy h5:nic0:p0 0.001); 'gray' shows what it lost, 'restore LINK' ends it."""
        got = self._gray_link(line, "lossy LINK P (0 < P <= 1)", "P")
        if got is None:
            return
        link, p = got
        if not 0 < p <= 1:
            self.stdout.write(f"{InputError('a share of the frames', 'e.g. 0.001', field='P', value=p)}\n")
            return
        if self._gray_change(link, lambda: self.network.gray.set_loss(link.name, p), "use a link of this server"):
            self.stdout.write(f"{link.name} loses {p:g} of its frames each way\n")

    def do_degrade(self, line: str) -> None:
        """degrade LINK GBPS: the link keeps running, slower (e.g. degrade h5:nic0:p0 50 on a 200G link);
        'restore LINK' gives it its rate back."""
        got = self._gray_link(line, "degrade LINK GBPS", "GBPS")
        if got is None:
            return
        link, gbps = got
        try:
            check_degraded_rate(link, gbps, "GBPS")
        except InputError as exc:
            self.stdout.write(f"{exc}\n")
            return
        if self._gray_change(link, lambda: self.network.gray.set_rate(link.name, gbps / link.rate_gbps),
                             "use a link of this server"):
            self.stdout.write(f"{link.name} runs at {gbps:g} of its {link.rate_gbps:g} Gbit/s\n")

    def do_gray(self, line: str) -> None:
        """gray: every lossy or slower link, with what an operator's counters show of it."""
        counters = self.network.gray_counters()
        if not counters:
            self.stdout.write("no gray link: make one with 'lossy LINK P' or 'degrade LINK GBPS'\n")
        for name, c in counters.items():
            parts = [f"{d.replace('_to_', '->')} lost {c['errors'][d]:,} of {c['errors'][d] + c['frames'][d]:,}"
                     for d in c.get("errors", {})]
            if "rate_fraction" in c:
                parts.append(f"runs at {c['rate_fraction']:.0%} of its rate")
            self.stdout.write(f"{name}: {'; '.join(parts)}\n")

    def do_flows(self, line: str) -> None:
        """flows SWITCH: the OpenFlow rules and groups on a switch, with packet counts (ovs-ofctl)."""
        node = self._switch(line.strip())
        if node is None:
            return
        for what in ("dump-flows", "dump-groups"):
            r = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", what, node.short], capture_output=True, text=True)
            self.stdout.write(r.stdout if r.returncode == 0 else r.stderr)
