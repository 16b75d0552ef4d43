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

This class is the facade: each concern is a collaborator in this package
(emulation, hosts, routes, steering, controller, checks, links) or in qos/.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from controllers.hashing import MODELS as HASH_MODELS
from controllers.routing import RoutingGraph, Tables
from testbed.cluster.placement import check_fits, place
from testbed.cluster.servers import ClusterRun, refuse_on_servers
from testbed.cluster.spec import ClusterSpec
from testbed.qos.spec import QosSpec
from testbed.system import stages
from testbed.system.capabilities import Capabilities, probe
from testbed.system.ownership import RUN_DIR, Ownership
from testbed.system.signals import signals_deferred
from testbed.system.site import LocalSite
from topos.errors import InputError
from topos.model import Link, Topology

from . import checks, emulation, links
from .controller import ROOT, ControllerProcess, check_runtime  # ROOT: agents run as `python -m traffic.…` from it
from .hosts import Hosts
from .naming import intf_name, root_intfs
from .preflight import preflight, require_features
from .routes import RouteInstaller
from .steering import Steering
from .workdir import Workdir

log = logging.getLogger(__name__)



class Network:
    """A Topology running in Mininet with Open vSwitch: built, addressed and routed when the `with` block starts
    (or at start()), taken down when it ends, also on Ctrl-C or an error.

    routing: "static" (rules installed by hpnlab) or "controller" (the OpenFlow app in its own process);
    mode: "ecmp", "shortest", or with the controller "precise"; hashing: the ECMP hash model ("ovs", "asic",
    "asic-seeded"); qos: a QosSpec to shape every link with priority classes, PFC and ECN; delay_ms: netem
    delay on every link (where the kernel has netem); controller_runtime: "os-ken" or "ryu-manager"; cluster:
    a ClusterSpec to spread the fabric over several servers; progress: called with each start-up stage.
    """

    def __init__(self, topo: Topology, *, routing: str = "static", mode: str = "ecmp", hashing: str = "ovs",
                 caps: Capabilities | None = None, delay_ms: float | None = None, log_dir: str | None = None,
                 qos: QosSpec | None = None, controller_runtime: str = "os-ken",
                 progress: Callable[[str], None] | None = None, cluster: ClusterSpec | None = None):
        if routing not in ("static", "controller"):
            raise InputError("unknown routing", "use static or controller", field="routing", value=routing)
        modes = ("ecmp", "shortest") if routing == "static" else ("ecmp", "precise", "shortest")
        if mode not in modes:
            raise InputError(f"routing mode not available with {routing} routing", f"use one of: {', '.join(modes)}",
                             field="mode", value=mode)
        if hashing not in HASH_MODELS:
            raise InputError("unknown hash model", f"use one of: {', '.join(HASH_MODELS)}", field="hashing",
                             value=hashing)
        if cluster is not None:
            refuse_on_servers(cluster, delay_ms=delay_ms)
        self.topo = topo
        self.cluster_spec = cluster
        self.cluster: ClusterRun | None = None  # while it runs on several servers
        self.local: LocalSite | None = None
        self.routing = routing
        self.mode = mode
        self.hashing = hashing
        self.caps = caps or probe()
        self.delay_ms = delay_ms
        self.log_dir = log_dir
        self.qos_spec = qos
        check_runtime(controller_runtime)
        self.controller_runtime = controller_runtime  # os-ken (the launcher) or ryu-manager
        self.graph = RoutingGraph(topo)
        self.down: set[str] = set()
        self.tables: Tables | None = None
        self.timings: dict[str, float] = {}
        self.net = None  # the Mininet network
        self.owner: Ownership | None = None
        self.workdir: Workdir | None = None
        self.routes: RouteInstaller | None = None
        self.hosts: Hosts | None = None
        self.steering = Steering(self.node)
        self._controller: ControllerProcess | None = None
        self.qos = None  # testbed.qos.shaper.Shaper, while links are shaped
        self.scale_choice = None  # testbed.qos.scale.ScaleChoice, when the spec said scale auto
        self.pfc = None  # testbed.qos.pfc_process.PfcProcess (SplitPfc over several servers), while it runs
        self.kqueues = None  # testbed.qos.kqueues.KernelQueues, when ECN marks (the PFC agent reads them too)
        self._gray = None  # testbed.net.gray.GrayLinks, once a link is made lossy or slower
        self.cc = None  # testbed.qos.cc.Dctcp or Dcqcn, registered while the network runs with qos.cc so
        self.progress = progress or (lambda stage: None)  # told each start-up stage (a 128-host start takes minutes)

    # -- lifecycle ----------------------------------------------------------
    def __enter__(self) -> Network:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        reaction = self._kernel_reaction_ms(self.qos_spec) if self.qos_spec is not None else None
        preflight(self.topo, self.caps, self.delay_ms, self.qos_spec,
                  servers=len(self.cluster_spec.servers) if self.cluster_spec is not None else 1,
                  kernel_reaction_ms=reaction)
        if self.cluster_spec is not None and self.qos_spec is not None and self.qos_spec.ecn.enabled:
            raise InputError("ECN marking (qos.ecn) runs on one server only, not over several",
                             "run without --cluster, or set qos.ecn.enabled: false", field="qos.ecn.enabled",
                             value=True)
        placement = None
        if self.cluster_spec is not None:
            placement = place(self.topo, self.cluster_spec.names)
            if self.qos_spec is not None:  # the crossing links at their shaped rates must fit the servers' link
                check_fits(placement, self._scale(self.qos_spec), self.cluster_spec.link_gbps)
        t0 = time.monotonic()
        self.owner = Ownership()
        self.workdir = Workdir(self.owner)
        self.local = LocalSite(self.owner, self.workdir.path)
        stages.reached("owner")
        if self.cluster_spec is not None:
            self.progress(f"starting the agents on {len(self.cluster_spec.servers) - 1} more servers")
            self.cluster = ClusterRun(self.cluster_spec, placement, self.local, str(ROOT))
            self.cluster.start(self.caps.to_dict())
            for server, caps in self.cluster.capabilities.items():
                if server != self.cluster.master:
                    require_features(Capabilities.from_dict(caps), self.delay_ms, self.qos_spec, server=server)
            self.workdir.site_of = self.cluster.site_of
        of_port = None
        tp = self.topo
        if self.routing == "controller":
            self.progress(f"starting the controller ({self.controller_runtime})")
            where = {} if self.cluster is None else self.cluster.controller_listen([s.name for s in tp.switches])
            self._controller = ControllerProcess(self.topo, self.mode, Path(self.log_dir or self.workdir.path),
                                                 self.hashing, self.controller_runtime, **where)
            of_port = self._controller.start(self.owner, self.workdir.write("topology.json", [self.topo.to_json()]))
            stages.reached("controller")
        self.progress(f"building {len(tp.switches)} OVS switches, {len(tp.hosts)} hosts and {len(tp.links)} links "
                      "in Mininet")
        self.net = emulation.build(self.topo, self.caps, self.local, of_port, self.cluster)
        self.timings["build_s"] = time.monotonic() - t0
        self.progress(f"turning offloads off on {2 * len(tp.links)} interfaces")
        for site, ifnames in emulation.root_intfs_by_site(tp, self.site_of).items():
            site.sh(links.offloads_off_script(ifnames))
        stages.reached("offloads")
        if self.delay_ms:
            links.delay(root_intfs(self.topo), self.delay_ms)
        self.progress(f"addressing {len(tp.hosts)} hosts")
        self.hosts = Hosts(self.topo, self.node, self.workdir, self.cluster_spec and self.cluster_spec.mtu)
        self.hosts.configure(static_neighbours=self.routing == "static")
        stages.reached("hosts")
        if self._controller is not None:
            self.progress(f"waiting for the controller to route {len(tp.switches)} switches")
            t1 = time.monotonic()
            health = self._controller.wait_ready(60)
            self.timings["controller_ready_s"] = time.monotonic() - t1
            log.info("controller: %d switches connected and routed", health["installed"])
        self.routes = RouteInstaller(self.topo, self.graph, self.node, self.workdir,
                                     switches=self.routing == "static", mode=self.mode, hashing=self.hashing,
                                     site_of=self.site_of)
        self.progress("installing routes" + (f" on {len(tp.switches)} switches" if self.routing == "static" else
                                             " on the hosts"))
        self.reconcile()
        stages.reached("routes")
        if self.qos_spec is not None:
            self.progress(f"shaping {2 * len(tp.links)} ports (HTB, priority classes)")
            self.start_qos(self.qos_spec)
        self.timings["start_s"] = time.monotonic() - t0
        stages.reached("up")
        log.info("network up in %.1f s (%d switches, %d hosts)", self.timings["start_s"], len(self.topo.switches),
                 len(self.topo.hosts))

    def start_qos(self, spec: QosSpec) -> None:
        """Shape every link direction and start the PFC agent (when the spec enables PFC)."""
        from testbed.cluster.pauses import SplitPfc
        from testbed.cluster.shaping import split_shaper
        from testbed.qos.fit import planned
        from testbed.qos.kmmu import mmu_line
        from testbed.qos.kqueues import mark_ecn
        from testbed.qos.pfc_process import PfcProcess
        from testbed.qos.ports import egress_ports, headroom_lines, resolve
        from testbed.qos.shaper import Shaper
        from testbed.qos.show import write_ports

        t = time.monotonic()
        scale = self._scale(spec)
        if self.scale_choice is not None:
            log.info("%s", self.scale_choice.why())
        requested = spec.pfc.model
        spec = resolve(spec, self.topo, scale, self._kernel_reaction_ms(spec))
        ports = egress_ports(self.topo, spec, netns_of=lambda h: f"/proc/{self.node(h).pid}/ns/net",
                             ifname_of=self.intf_name, crossing=self.crossing_links())
        # scale auto is known only now; nothing is shaped yet
        ports, spec, mmu, why = planned(ports, spec, requested)
        for line in filter(None, [why, mmu and mmu_line(mmu, spec)]):
            log.info("%s", line)
        self.qos_spec = spec
        summary, short = headroom_lines(ports, spec)
        for line in summary:
            log.info("%s", line)
        for line in short:
            log.warning("%s", line)
        if self.cluster is None:
            self.qos = Shaper(ports, spec)
        else:
            self.qos = split_shaper(ports, spec, self.site_of, self.local)
        self.qos.apply()
        stages.reached("qos.shaped")
        # `hpnlab qos show` and the web view read this server's queues only: the others' namespaces are not here
        write_ports(self.owner.run_id, self.qos.local_ports() if self.cluster else self.qos.ports.values())
        if spec.ecn.enabled:  # marking reads the queues the kernel watches; PFC, when on, acts on the same
            self.kqueues = mark_ecn(self.qos, spec)
            self.kqueues.publish(RUN_DIR / f"{self.owner.run_id}.ecn.json")  # marks for qos show and the web view
        self._host_cc(spec)
        if spec.pfc.enabled:
            state_file = RUN_DIR / f"{self.owner.run_id}.pfc.json"
            self.pfc = (PfcProcess(self.qos, state_file, self.owner, kernel=self.kqueues) if self.cluster is None
                        else SplitPfc(self.cluster, self.qos, state_file))
            self.pfc.start()
            stages.reached("qos.pfc")
        self.timings["qos_s"] = time.monotonic() - t

    def crossing_links(self) -> frozenset[str]:
        """The links between servers (none on one machine): a pause toward their far end is a message, and the
        lossless headroom takes their ingress for that long too."""
        return frozenset(l.name for l in self.cluster.placement.crossing) if self.cluster else frozenset()

    def _kernel_reaction_ms(self, spec: QosSpec) -> float | None:
        """What the headroom covers when the PFC agent will act on kernel events (this machine's measured reaction,
        testbed/qos/scale.py), None when it will poll: several servers' agents poll, and so does a machine that
        cannot build BPF programs (the agent's own fallback, should loading still fail, says so)."""
        from testbed.qos.scale import load_reaction
        from testbed.system.bpf import missing_tools

        if not spec.pfc.enabled or spec.pfc.detect == "poll" or self.cluster is not None or missing_tools():
            return None
        reaction = load_reaction(hosts=len(self.topo.hosts))
        log.info("%s", reaction.why(len(self.topo.hosts)))
        return reaction.window_s * 1000

    def _host_cc(self, spec: QosSpec) -> None:
        """The hosts' side of `qos.cc`: ECN on in every host's namespace (it goes with the namespace), and DCTCP
        or DCQCN registered with the kernel for this network's life (testbed/qos/cc.py)."""
        from testbed.qos.cc import Dcqcn, Dctcp, host_sysctls

        for key, value in host_sysctls(spec.cc).items():
            for h in self.topo.hosts:
                self.node(h.name).cmd(f"sysctl -q -w {key}={value}")
        if spec.cc == "dctcp":
            self.cc = Dctcp()
        elif spec.cc == "dcqcn":  # paced at the NICs' emulated rate; its timers run in the fabric's time
            line = max(p.plan.rate_bps for p in self.qos.ports.values() if p.is_host)
            self.cc = Dcqcn(line, spec.scale, spec.dilated_by)

    def ecn_marks(self) -> dict[str, int] | None:
        """Packets marked CE so far per queue (`port/p<priority>`, those with marks), None without ECN."""
        if self.kqueues is None:
            return None
        from testbed.qos.ports import queue_key

        return {queue_key(*k): f.marks for k, f in self.kqueues.snapshot().items() if f.marks}

    def _scale(self, spec: QosSpec) -> float:
        """The spec's scale, chosen here when it says auto (no workload known: every host NIC may send at once)."""
        if spec.scale != "auto":
            return spec.scale
        from testbed.qos.scale import choose_scale, offered_load

        self.scale_choice = choose_scale(offered_load(self.topo), hosts=len(self.topo.hosts))
        return self.scale_choice.scale

    def stop_qos(self, since: float | None = None) -> dict | None:
        """Stop the PFC agent and remove every qdisc the QoS layer added; returns the agent's report
        (its poll statistics from the monotonic time `since` on, if given)."""
        report = None
        if self.pfc is not None:
            pfc, self.pfc = self.pfc, None
            try:
                pfc.stop()
                report = pfc.report(since)
            finally:
                pfc.close()
        if self._gray is not None:  # its programs and rates on the shaped ports, before the qdiscs go
            self._gray.close()
            self._gray = None
        if self.kqueues is not None:  # after the agent that read them, before the qdiscs they watch go
            self.kqueues.close()
            self.kqueues = None
        if self.cc is not None:
            self.cc.close()
            self.cc = None
        if self.qos is not None:
            self.qos.remove()
            self.qos = None
        return report

    def stop(self) -> None:
        """Undo everything the start made; a signal meanwhile waits until it is done (signals_deferred)."""
        with signals_deferred():
            self._stop()

    def _stop(self) -> None:
        try:
            self.stop_qos()
        except Exception as exc:  # noqa: BLE001 - the interfaces go with Mininet below anyway
            log.warning("qos teardown: %s", exc)
        stages.reached("teardown.qos")
        if self._controller is not None:  # before Mininet, so it does not chase the teardown's port events
            self._controller.stop()
            stages.reached("teardown.controller")
        if self.owner is not None:  # while the hosts' shells still hold their namespaces (ownership.py says why)
            strays = self.owner.end_namespace_processes()
            if strays:
                log.info("ended in the hosts' namespaces: %s", ", ".join(strays))
        if self.net is not None:
            try:
                emulation.stop(self.net, self.topo, self.site_of)
            except Exception as exc:  # noqa: BLE001 - the owner record still removes what is left
                log.warning("mininet stop failed: %s", exc)
            self.net = None
            stages.reached("teardown.mininet")
        if self.owner is not None:
            left = self.owner.undo()
            if left:
                log.info("removed after mininet stop: %s", ", ".join(left))
            self.owner = None
        if self.cluster is not None:
            for server, left in self.cluster.stop().items():
                if left:
                    log.info("removed on %s after mininet stop: %s", server, ", ".join(left))
            self.cluster = None
        self.workdir = None  # its folder went with the record's undo above

    # -- names ----------------------------------------------------------------
    @property
    def controller(self):
        """The controller's REST client (None with static routing)."""
        return self._controller.client if self._controller is not None else None

    @property
    def controller_log(self) -> Path | None:
        return self._controller.log_path if self._controller is not None else None

    @property
    def controller_token_file(self) -> Path | None:
        """The 0600 file with the token the controller's REST API asks for."""
        return self._controller.token_file if self._controller is not None else None

    def site_of(self, node: str):
        """Where a node runs (testbed.system.site): this machine, or a server agent."""
        return self.local if self.cluster is None else self.cluster.site_of(node)

    def node(self, name: str):
        """Mininet node for a Topology node name (or a short name)."""
        n = self.topo.nodes.get(name)
        return self.net.get(n.short if n else name)

    def intf_name(self, node: str, port: int) -> str:
        return intf_name(self.topo, node, port)

    def find_link(self, name: str) -> Link:
        link = self.graph.by_link_name.get(name)
        return link if link is not None else self.topo.find_link(name)

    # -- routing and failures ---------------------------------------------------
    def reconcile(self) -> Tables:
        """Bring host routes (and, without a controller, switch rules) to what the link state needs."""
        t0 = time.monotonic()
        self.tables = self.routes.reconcile(self.down)
        self.timings["last_reconcile_s"] = time.monotonic() - t0
        return self.tables

    @property
    def gray(self):
        """Gray failures on this network's links (testbed/net/gray.py): lossy or slower links, and their counters."""
        if self._gray is None:
            from .gray import GrayLinks

            if self.qos is None or self.cluster is not None:
                raise RuntimeError("gray failures need the links shaped, on one server")
            self._gray = GrayLinks(self.topo, self.qos)
        return self._gray

    def carrier_changes(self) -> dict[str, int]:
        """Every link's carrier changes so far (its downs and ups), as its switch end's port counts them; a link
        whose switch end is on another server is left out."""
        out = {}
        for link in self.topo.links:
            try:
                out[link.name] = int(Path(f"/sys/class/net/{self.intf_name(link.b, link.b_port)}/carrier_changes")
                                     .read_text())
            except OSError:
                continue
        return out

    def gray_counters(self) -> dict[str, dict]:
        """The gray links' counters now (GrayLinks.counters), {} while no link is gray."""
        return self._gray.counters() if self._gray is not None else {}

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
            self.steering.follow(self.controller, seen)

    def pfc_storm(self, name: str, on: bool) -> None:
        """The host NIC port on link `name` starts (`on`) or stops sending PAUSE for good, as a stuck NIC does: its
        ToR's port toward it is held paused in every lossless priority (the PFC agent plays the NIC)."""
        link = self.find_link(name)
        if self.pfc is None or self.cluster is not None or link.kind != "host-tor":
            raise RuntimeError("a pause storm is a host link's, with PFC on, on one server")
        port = f"{link.b}:{link.b_port}"  # the ToR's egress toward the NIC: what the NIC's pauses stop
        if port not in self.qos.ports:
            raise RuntimeError(f"{port} is not a shaped port of this network")
        if not self.pfc.storm(port, on):
            raise RuntimeError("the PFC agent's process is gone")

    def static_neighbours(self) -> None:
        self.hosts.static_neighbours()

    def dilate_tcp_timers(self, dilation: float) -> list[str]:
        """The hosts' TCP timeouts stretched with time (testbed/net/hosts.py); the hosts that could not."""
        return self.hosts.dilate_tcp_timers(dilation)

    def cap_tcp_rto(self, max_s: float, dilation: float) -> list[str]:
        """The hosts' TCP retransmission timeout capped (testbed/net/hosts.py); the hosts that could not."""
        return self.hosts.cap_tcp_rto(max_s, dilation)

    # -- processes and steering ------------------------------------------------
    def popen(self, host: str, args: list[str], **kw) -> subprocess.Popen:
        """A process inside a host's namespace, owned by this run (killed at teardown if still running)."""
        p = self.node(host).popen(args, **kw)
        self.owner.process(p.pid, f"{' '.join(args[:4])} on {host}")
        return p

    def python(self, host: str, module: str, *args: str, **kw) -> subprocess.Popen:
        return self.popen(host, [sys.executable, "-m", module, *args], cwd=str(ROOT), **kw)

    @property
    def steered(self) -> dict[str, dict]:
        return self.steering.steered

    def steer(self, flow: dict) -> None:
        self.steering.steer(flow)

    def unsteer(self, flow: dict) -> None:
        self.steering.unsteer(flow)

    # -- rates, counters, checks ------------------------------------------------
    def port_rate_bps(self, link: Link) -> float:
        """A link's emulated rate; only shaped networks have one."""
        if self.qos_spec is None:
            raise InputError("bandwidth figures need shaped links", "start the network with qos (e.g. --qos)",
                             field="qos", value=None)
        return link.rate_gbps * 1e9 / self.qos_spec.scale

    def place_by_source_port(self, conns: list[tuple[str, str, str, int]], taken: set[int], start: int = 0,
                             load: dict | None = None):
        """Host-side precise routing: disjoint paths for (src host, dst ip, proto, dport) connections and
        the source port that takes each there under this network's hash model (controllers/hostpath.py)."""
        from controllers.hostpath import Connection, place

        return place(self.graph, self.tables, self.hashing, [Connection(*c) for c in conns], taken, start, load)

    def port_counters(self) -> dict[str, dict[int, dict[str, int]]]:
        return checks.port_counters(self.topo, self.site_of)

    def pingall(self, timeout_s: float = 2.0) -> checks.PingResult:
        return checks.pingall(self.topo, self.node, self.workdir, timeout_s)
