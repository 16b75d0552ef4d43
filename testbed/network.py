"""Start a Topology in Mininet with Open vSwitch, and always take it down again.

    with Network(topo) as net:       # preflight, build, address, route
        net.pingall()
        net.set_link("h3:nic0:p0", up=False)

- Switches are OVS bridges with the Topology's DPIDs and port numbers, the
  userspace datapath where the kernel has no openvswitch module, offloads off
  on every interface (userspace OVS stalls TCP otherwise).
- Hosts follow the address plan in topos/addressing.py; both ports of a NIC
  carry the NIC's IP and MAC and a multipath route spreads over them.
- Routing is `static` (rules computed here from the Topology and installed
  with ovs-ofctl) or `controller` (an OpenFlow controller on loopback does it).
- Every bridge, interface and process is recorded in an Ownership record
  before or as it is created; stop() and `hpnlab clean` undo exactly that.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from controllers.client import ControllerClient
from controllers.routing import Fabric, Tables, compute_tables
from topos.addressing import all_addresses, dpid_hex, nic_address
from topos.errors import InputError
from topos.model import Link, Topology

from .capabilities import Capabilities, probe
from .owner import BRIDGE_TAG, Ownership, live_runs, tagged_bridges
from controllers.ruleset import RuleSet

from .qos_spec import QosSpec
from .static_routes import host_route_script, ofctl_batches

log = logging.getLogger(__name__)

OFFLOADS = ["tso", "gso", "gro", "tx", "rx"]
# What shaped runs need from userspace OVS's one packet socket (what bootstrap.sh gives it): every
# frame queued in any switch egress qdisc counts against it, at about twice its size (skb truesize).
OVS_SEND_BUFFER_NEEDED = 32 << 20


@dataclass
class PingResult:
    sent: int
    received: int
    failures: list[tuple[str, str]]

    @property
    def loss(self) -> float:
        return 1 - self.received / self.sent if self.sent else 0.0


def preflight(topo: Topology, caps: Capabilities, delay_ms: float | None = None, qos: QosSpec | None = None) -> None:
    """Every check that can refuse a run, before anything on the system changes."""
    caps.require_root("starting a network")
    caps.require_ovs()
    if delay_ms:
        caps.require_qdisc("netem", "link delay (--delay-ms)")
    if qos is not None:
        caps.require_qdisc("htb", "link shaping")
        caps.require_ovs_send_buffer(OVS_SEND_BUFFER_NEEDED)
        if qos.delay_ms:
            caps.require_qdisc("netem", "link delay (qos.delay_ms)")
        if qos.loss_pct:
            caps.require_qdisc("netem", "link loss (qos.loss_pct)")
    others = live_runs()
    if others:
        r = others[0]
        raise InputError("another hpnlab network is running", "stop it first (or 'hpnlab clean --force')",
                         field="run", value=f"{r.run_id} pid {r.data['owner_pid']}")
    ours = tagged_bridges()
    out = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
    for sw in topo.switches:
        if sw.short in out:
            fix = "run 'hpnlab clean' (left over from a crashed run)" if sw.short in ours else \
                "rename or remove that bridge; hpnlab will not touch what it did not create"
            raise InputError("an OVS bridge with a name this topology needs already exists", fix,
                             field="bridge", value=sw.short)
        if Path(f"/sys/class/net/{sw.short}-eth1").exists():
            raise InputError("an interface with a name this topology needs already exists",
                             "run 'hpnlab clean' or remove it", field="interface", value=f"{sw.short}-eth1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Network:
    def __init__(self, topo: Topology, *, routing: str = "static", mode: str = "ecmp",
                 caps: Capabilities | None = None, delay_ms: float | None = None, log_dir: str | None = None,
                 qos: QosSpec | None = None):
        if routing not in ("static", "controller"):
            raise InputError("unknown routing", "use static or controller", field="routing", value=routing)
        modes = ("ecmp", "shortest") if routing == "static" else ("ecmp", "precise", "shortest")
        if mode not in modes:
            raise InputError(f"routing mode not available with {routing} routing", f"use one of: {', '.join(modes)}",
                             field="mode", value=mode)
        self.topo = topo
        self.routing = routing
        self.mode = mode
        self.caps = caps or probe()
        self.delay_ms = delay_ms
        self.fabric = Fabric(topo)
        self.down: set[str] = set()
        self.tables: Tables | None = None
        self.net = None
        self.owner: Ownership | None = None
        self._rules: dict[str, RuleSet] = {}
        self._host_exceptions: dict[str, set[str]] = {}
        self._workdir: tempfile.TemporaryDirectory | None = None
        self.log_dir = log_dir
        self.controller: ControllerClient | None = None
        self._controller_proc: subprocess.Popen | None = None
        self.timings: dict[str, float] = {}
        self.qos_spec = qos
        self.qos = None
        self.pfc = None
        self.steered: dict[str, dict] = {}  # precise flows pinned on their hosts: flow key -> controller view

    # -- lifecycle ----------------------------------------------------------
    def __enter__(self) -> "Network":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        preflight(self.topo, self.caps, self.delay_ms, self.qos_spec)
        from mininet.link import Link as MnLink
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import OVSSwitch, RemoteController

        setLogLevel(os.environ.get("HPNLAB_MININET_LOG", "warning"))
        t0 = time.monotonic()
        self.owner = Ownership()
        self._workdir = tempfile.TemporaryDirectory(prefix="hpnlab-")
        switches = [s.short for s in self.topo.switches]
        self.owner.intend("bridges", switches)
        self.owner.intend("interfaces", self._root_intfs())
        net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, autoStaticArp=False,
                      link=MnLink, waitConnected=False)
        self.net = net
        if self.routing == "controller":
            of_port = self._start_controller()
            class ReadyController(RemoteController):
                # _start_controller has waited for it already. Mininet's own check telnets into the
                # OpenFlow port and decodes what comes back as UTF-8: the controller's binary HELLO
                # made that raise UnicodeDecodeError now and then.
                def checkListening(self) -> None:
                    pass

            c0 = net.addController(ReadyController("c0", ip="127.0.0.1", port=of_port))
            self.owner.process(c0.pid, "mininet controller shell c0")
        for h in self.topo.hosts:
            a = nic_address(h, 0)
            node = net.addHost(h.short, ip=f"{a.ip}/32", mac=a.mac)
            self.owner.process(node.pid, f"mininet host {h.short}")
        for s in self.topo.switches:
            node = net.addSwitch(s.short, cls=OVSSwitch, dpid=dpid_hex(s), datapath=self.caps.datapath,
                                 failMode="secure", protocols="OpenFlow13", batch=True)
            self.owner.process(node.pid, f"mininet switch shell {s.short}")
        for l in self.topo.links:
            a, b = self.topo.nodes[l.a], self.topo.nodes[l.b]
            net.addLink(a.short, b.short, port1=l.a_port, port2=l.b_port)
        net.build()
        self.timings["build_s"] = time.monotonic() - t0
        net.start()
        # The run id on every bridge: an orphan stays recognisable as ours even if its record is lost.
        tag = []
        for s in switches:
            tag += ["--", "set", "bridge", s, f"external_ids:{BRIDGE_TAG}={self.owner.run_id}"]
        self._run(["ovs-vsctl", *tag])
        self._offloads_off()
        if self.delay_ms:
            self._delay_links(self.delay_ms)
        self._configure_hosts()
        if self.routing == "controller":
            t1 = time.monotonic()
            health = self.controller.wait_ready(60, alive=lambda: self._controller_proc.poll() is None)
            self.timings["controller_ready_s"] = time.monotonic() - t1
            log.info("controller: %d switches connected and routed", health["installed"])
        self.reconcile()
        if self.qos_spec is not None:
            self._start_qos()
        self.timings["start_s"] = time.monotonic() - t0
        log.info("network up in %.1f s (%d switches, %d hosts)", self.timings["start_s"], len(switches),
                 len(self.topo.hosts))

    def _start_qos(self) -> None:
        from .pfc import PfcAgent
        from .qos import Qos

        t = time.monotonic()
        self.qos = Qos(self, self.qos_spec)
        self.qos.apply()
        from .qos_show import write_ports

        write_ports(self.owner.run_id, self.qos.ports.values())
        if self.qos_spec.pfc.enabled:
            from .owner import RUN_DIR

            self.pfc = PfcAgent(self.qos, state_file=RUN_DIR / f"{self.owner.run_id}.pfc.json")
            self.pfc.start()
        self.timings["qos_s"] = time.monotonic() - t

    def stop_qos(self) -> dict | None:
        """Stop the PFC agent and remove every qdisc the QoS layer added; returns the agent's report."""
        report = None
        if self.pfc is not None:
            self.pfc.stop()
            report = self.pfc.report()
            self.pfc = None
        if self.qos is not None:
            self.qos.remove()
            self.qos = None
        return report

    def _start_controller(self) -> int:
        """The controller as its own process, OpenFlow and REST on loopback ports picked free."""
        topo_file = self._write("topology.json", [self.topo.to_json()])
        of_port, rest_port = _free_port(), _free_port()
        log_path = Path(self.log_dir or self._workdir.name) / "controller.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._controller_log = open(log_path, "w")
        self._controller_proc = subprocess.Popen(
            [sys.executable, "-m", "controllers.launcher", "--topology", topo_file, "--mode", self.mode,
             "--of-port", str(of_port), "--rest-port", str(rest_port)],
            stdout=self._controller_log, stderr=subprocess.STDOUT, start_new_session=True)
        self.owner.process(self._controller_proc.pid, "hpnlab controller")
        self.controller = ControllerClient(rest_port)
        self.controller_log = log_path
        deadline = time.monotonic() + 30
        while True:  # switches get a controller that already listens
            try:
                socket.create_connection(("127.0.0.1", of_port), timeout=0.2).close()
                break
            except OSError:
                if self._controller_proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"controller did not start; see {log_path}") from None
                time.sleep(0.05)
        return of_port

    def _stop_controller(self) -> None:
        p = self._controller_proc
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._controller_log.close()
        self._controller_proc = None

    def stop(self) -> None:
        try:
            self.stop_qos()
        except Exception as exc:  # the interfaces go with Mininet below anyway
            log.warning("qos teardown: %s", exc)
        self._stop_controller()  # before Mininet, so it does not chase the teardown's port events
        if self.net is not None:
            try:
                self.net.stop()
            except Exception as exc:  # the owner record still removes what is left
                log.warning("mininet stop failed: %s", exc)
            self.net = None
        if self.owner is not None:
            left = self.owner.undo()
            if left:
                log.info("removed after mininet stop: %s", ", ".join(left))
            self.owner = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    # -- helpers ------------------------------------------------------------
    @staticmethod
    def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
        r = subprocess.run(cmd, capture_output=True, text=True, **kw)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:4])}... failed: {r.stderr.strip()}")
        return r

    def node(self, name: str):
        """Mininet node for a Topology node name (or a short name)."""
        n = self.topo.nodes.get(name)
        return self.net.get(n.short if n else name)

    def intf_name(self, node: str, port: int) -> str:
        return f"{self.topo.nodes[node].short}-eth{port}"

    def _root_intfs(self) -> list[str]:
        """Switch-side interfaces: they live in the root namespace."""
        return [self.intf_name(s.name, l.port_of(s.name)) for s in self.topo.switches
                for l in self.topo.links_of(s.name)]

    def _offloads_off(self) -> None:
        # Userspace OVS does not segment or checksum for the kernel: with offloads
        # on, TSO super-frames and missing checksums stall TCP.
        script = "\n".join(f"ethtool -K {i} {' off '.join(OFFLOADS)} off >/dev/null 2>&1"
                           for i in self._root_intfs())
        subprocess.run(["sh", "-c", script], check=False)

    def _delay_links(self, delay_ms: float) -> None:
        """netem on every switch-side egress: a host-to-host path of h hops gets h x delay one way."""
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            for ifname in self._root_intfs():
                idx = ipr.link_lookup(ifname=ifname)[0]
                ipr.tc("replace", "netem", idx, delay=int(delay_ms * 1000))

    def _host_intfs(self, host: str) -> dict[tuple[int, int], str]:
        return {(l.nic, l.nic_port): self.intf_name(host, l.a_port)
                for l in self.topo.links_of(host) if l.kind == "host-tor"}

    def _write(self, name: str, lines: list[str]) -> str:
        path = Path(self._workdir.name) / name
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    def _configure_hosts(self) -> None:
        addrs = all_addresses(self.topo)
        for h in self.topo.hosts:
            intfs = self._host_intfs(h.name)
            sh = ["sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
                  # one IP on two ports: reverse-path filtering would drop the asymmetric half
                  "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
                  "sysctl -qw net.ipv4.conf.all.ignore_routes_with_linkdown=1",
                  # hash flows (5-tuple), not host pairs, over a NIC's two ports, as RoCE NICs do
                  "sysctl -qw net.ipv4.fib_multipath_hash_policy=1",
                  # collectives reuse idle connections between steps: keep their window, as RDMA QPs do
                  "sysctl -qw net.ipv4.tcp_slow_start_after_idle=0"]
            batch = []
            for (nic, _port), ifname in sorted(intfs.items()):
                a = nic_address(h, nic)
                sh += [f"sysctl -qw net.ipv4.conf.{ifname}.rp_filter=0 "
                       f"net.ipv4.conf.{ifname}.ignore_routes_with_linkdown=1",
                       f"ethtool -K {ifname} {' off '.join(OFFLOADS)} off >/dev/null 2>&1"]
                batch += [f"addr flush dev {ifname}", f"link set dev {ifname} address {a.mac}",
                          f"addr add {a.ip}/32 dev {ifname}", f"link set dev {ifname} up"]
                if self.routing == "static":
                    # Static neighbours: the fabric carries no ARP at all (the controller answers it otherwise).
                    batch += self._neighbour_lines(h.name, nic, ifname, addrs)
                self.node(h.name).intf(ifname).ip = a.ip
                self.node(h.name).intf(ifname).prefixLen = 32
            out = self.node(h.name).cmd(f"sh {self._write(h.short + '.sh', sh)}; "
                                        f"ip -batch {self._write(h.short + '.ip', batch)} 2>&1")
            if out.strip():
                raise RuntimeError(f"configuring {h.name}: {out.strip()}")

    @staticmethod
    def _neighbour_lines(host: str, nic: int, ifname: str, addrs) -> list[str]:
        return [f"neigh replace {d.ip} lladdr {d.mac} dev {ifname} nud permanent"
                for d in addrs if d.nic == nic and d.host != host]

    def static_neighbours(self) -> None:
        """Every host port knows its rail's peers' MACs (as static routing sets up anyway).

        soft-RoCE resolves the peer's MAC when a queue pair connects, with a short
        timeout; an ARP answer from the controller can come later than that on a
        slow machine, and the connect fails ("Failed to modify QP to RTR").
        """
        addrs = all_addresses(self.topo)
        for h in self.topo.hosts:
            batch = [line for (nic, _port), ifname in sorted(self._host_intfs(h.name).items())
                     for line in self._neighbour_lines(h.name, nic, ifname, addrs)]
            out = self.node(h.name).cmd(f"ip -batch {self._write(h.short + '.neigh', batch)} 2>&1")
            if out.strip():
                raise RuntimeError(f"neighbours on {h.name}: {out.strip()}")

    # -- routing ------------------------------------------------------------
    def reconcile(self) -> Tables:
        """Bring host routes (and, without a controller, switch rules) to what the link state needs."""
        t0 = time.monotonic()
        tables = compute_tables(self.fabric, self.down, mode="shortest" if self.mode == "shortest" else "ecmp")
        of = ["ovs-ofctl", "-O", "OpenFlow13"]
        for sw in self.topo.switches if self.routing == "static" else ():
            change = self._rules.setdefault(sw.name, RuleSet()).update(tables.switch[sw.name])
            if change.empty:
                continue
            groups, flows, dels, stale = ofctl_batches(change)
            if groups:
                self._run([*of, "add-groups", sw.short, self._write(f"{sw.short}.groups", groups)])
            if flows:
                self._run([*of, "add-flows", sw.short, self._write(f"{sw.short}.flows", flows)])
            for match in dels:
                self._run([*of, "--strict", "del-flows", sw.short, match])
            for gid in stale:
                self._run([*of, "del-groups", sw.short, f"group_id={gid}"])
        for h in self.topo.hosts:
            nic_ports: dict[int, list[int]] = {}
            for l in self.topo.links_of(h.name):
                nic_ports.setdefault(l.nic, []).append(l.a_port)
            lines, exc = host_route_script(h.name, h.short, nic_ports, tables,
                                           self._host_exceptions.get(h.name, set()))
            self._host_exceptions[h.name] = exc
            out = self.node(h.name).cmd(f"ip -force -batch {self._write(h.short + '.routes', lines)} 2>&1")
            if "rror" in out:
                raise RuntimeError(f"routes on {h.name}: {out.strip()}")
        self.tables = tables
        self.timings["last_reconcile_s"] = time.monotonic() - t0
        return tables

    def find_link(self, name: str) -> Link:
        link = self.fabric.by_link_name.get(name)
        return link if link is not None else self.topo.find_link(name)

    def set_link(self, name: str, up: bool) -> None:
        """Fail or restore a link as a cable cut would: both ends lose carrier.

        Only the switch-side (b) end is set admin-down; its veth peer then loses
        carrier, which is what a host NIC sees when the cable or ToR port dies
        (its routes stay, marked linkdown, and come back by themselves).
        """
        link = self.find_link(name)
        seen = len(self.controller.get("/events")) if self.steered else 0
        self.node(link.b).cmd(f"ip link set dev {self.intf_name(link.b, link.b_port)} {'up' if up else 'down'}")
        (self.down.discard if up else self.down.add)(link.name)
        self.reconcile()
        if self.steered:
            self._resteer(seen)

    def _resteer(self, events_before: int, wait_s: float = 2.0) -> None:
        """After the controller re-placed precise flows, move their host pinning to the new ports."""
        deadline = time.monotonic() + wait_s
        while len(self.controller.get("/events")) <= events_before and time.monotonic() < deadline:
            time.sleep(0.02)  # the controller hears the port status a few ms after the link changed
        for view in self.controller.get("/flows"):
            old = self.steered.get(view["flow"])
            if old is not None and view["egress"] is not None and view["egress"] != old["egress"]:
                self.unsteer(old)
                self.steer(view)

    # -- processes and steering ------------------------------------------------
    def popen(self, host: str, args: list[str], **kw) -> subprocess.Popen:
        """A process inside a host's namespace, owned by this run (killed at teardown if still running)."""
        p = self.node(host).popen(args, **kw)
        self.owner.process(p.pid, f"{' '.join(args[:4])} on {host}")
        return p

    def python(self, host: str, module: str, *args: str, **kw) -> subprocess.Popen:
        return self.popen(host, [sys.executable, "-m", module, *args], cwd=str(Path(__file__).parents[1]), **kw)

    def steer(self, flow: dict) -> None:
        """Pin a declared flow to the host port the controller chose, by its 5-tuple (policy routing).

        This is how an HPN host picks a path: the port (plane) here, the rest by
        the exact-match rules the controller put on the switches.
        """
        e = flow["egress"]
        table = 100 + e["port"]
        self.node(flow["src"]).cmd(
            f"ip route replace {flow['dst']}/32 dev {e['ifname']} table {table}; "
            f"ip rule add {self._steer_match(flow)} lookup {table} priority {1000 + flow['cookie'] % 30000}")
        self.steered[flow["flow"]] = flow

    @staticmethod
    def _steer_match(flow: dict) -> str:
        return f"to {flow['dst']} ipproto {flow['proto']} sport {flow['sport']} dport {flow['dport']}"

    def unsteer(self, flow: dict) -> None:
        self.node(flow["src"]).cmd(f"ip rule del {self._steer_match(flow)} priority {1000 + flow['cookie'] % 30000}")
        self.steered.pop(flow["flow"], None)

    def port_rate_bps(self, link: Link) -> float:
        """A link's emulated rate; only shaped networks have one."""
        if self.qos_spec is None:
            raise InputError("bandwidth figures need shaped links", "start the network with qos (e.g. --qos)",
                             field="qos", value=None)
        return link.rate_gbps * 1e9 / self.qos_spec.scale

    def port_counters(self) -> dict[str, dict[int, dict[str, int]]]:
        """tx/rx bytes and drops of every switch port, read from OVS itself (independent of the controller)."""
        import re

        out: dict[str, dict[int, dict[str, int]]] = {}
        pat = re.compile(r"port\s+(\d+): rx pkts=(\d+), bytes=(\d+), drop=(\d+).*?tx pkts=(\d+), bytes=(\d+), "
                         r"drop=(\d+)", re.S)
        for sw in self.topo.switches:
            text = self._run(["ovs-ofctl", "-O", "OpenFlow13", "dump-ports", sw.short]).stdout
            out[sw.name] = {int(m[0]): {"rx_packets": int(m[1]), "rx_bytes": int(m[2]), "rx_dropped": int(m[3]),
                                        "tx_packets": int(m[4]), "tx_bytes": int(m[5]), "tx_dropped": int(m[6])}
                            for m in pat.findall(text)}
        return out

    # -- checks -------------------------------------------------------------
    def pingall(self, timeout_s: float = 2.0) -> PingResult:
        """Ping every other host's every NIC address from every host, in parallel per host."""
        addrs = all_addresses(self.topo)
        sent = received = 0
        failures: list[tuple[str, str]] = []
        for h in self.topo.hosts:
            targets = [a.ip for a in addrs if a.host != h.name]
            script = " ".join(f"(ping -c1 -W{timeout_s:g} -q {ip} >/dev/null 2>&1 && echo ok {ip} || echo fail {ip}) &"
                              for ip in targets) + " wait"
            out = self.node(h.name).cmd(script)
            results = dict(reversed(line.split()) for line in out.splitlines() if line.startswith(("ok ", "fail ")))
            for ip in targets:
                sent += 1
                if results.get(ip) == "ok":
                    received += 1
                else:
                    failures.append((h.name, ip))
        return PingResult(sent, received, failures)
