"""The Mininet objects for a Topology: one OVS bridge per switch with the Topology's DPIDs and ports,
one host per host, one veth per link; each recorded in the run's Ownership as it is made."""

from __future__ import annotations

import logging
import os
import shlex
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from testbed.system import stages
from testbed.system.capabilities import Capabilities
from testbed.system.ownership import BRIDGE_TAG
from testbed.system.site import LocalSite
from topos.addressing import dpid_hex, nic_address
from topos.model import Node, Topology

from .naming import switch_intfs

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from testbed.cluster.servers import ClusterRun, ServerAgent


def build(topo: Topology, caps: Capabilities, local: LocalSite, of_port: int | None,
          cluster: ClusterRun | None = None):
    """A built and started Mininet network; `of_port`: the controller's OpenFlow port (None: no controller).

    Each node's site (testbed.system.site) records and owns what is made for it: this machine (`local`), or
    with `cluster` the agent of the server that Mininet's cluster edition places the node on.
    """
    from mininet.log import setLogLevel

    setLogLevel(os.environ.get("HPNLAB_MININET_LOG", "warning"))
    site_of = (lambda _node: local) if cluster is None else cluster.site_of
    for site, switches in by_site(topo.switches, site_of).items():
        site.intend("bridges", [s.short for s in switches])
    for site, ifnames in root_intfs_by_site(topo, site_of).items():
        site.intend("interfaces", ifnames)
    net, host_cls, switch_cls = _mininet(local, cluster)
    try:
        if of_port is not None:
            _add_controller(net, local, cluster, of_port)
        _add_nodes(net, topo, caps, local, cluster, site_of, host_cls, switch_cls)
        stages.reached("build.nodes")
        for i, l in enumerate(topo.links):
            if i == len(topo.links) // 2:  # half the veths made, the rest not yet
                stages.reached("build.links")
            net.addLink(topo.nodes[l.a].short, topo.nodes[l.b].short, port1=l.a_port, port2=l.b_port)
        net.build()
        for site, ifnames in root_intfs_by_site(topo, site_of).items():  # the proof, for cleanup, that they are ours
            site.group(ifnames)
        net.start()
        stages.reached("build.started")
    except BaseException:
        _stop_half_built(net)
        raise
    return net


def _mininet(local: LocalSite, cluster: ClusterRun | None) -> tuple:
    """An empty Mininet (or with `cluster`, Mininet's cluster edition over its servers) and its node classes."""
    from mininet.link import Link as MnLink
    from mininet.net import Mininet
    from mininet.node import Host, OVSSwitch

    if cluster is None:
        return (Mininet(topo=None, build=False, controller=None, autoSetMacs=False, autoStaticArp=False,
                        link=grouped_link(MnLink, local.link_group), waitConnected=False), Host, OVSSwitch)
    from mininet.examples.cluster import MininetCluster

    from testbed.cluster.nodes import node_classes
    from testbed.cluster.tunnel import tunnel_link

    host_cls, switch_cls = node_classes({cluster.mn_server(s): cluster.node_ssh_options(s)
                                         for s in cluster.spec.names})
    link_cls = tunnel_link(cluster.spec.tunnel, {cluster.mn_server(s.name): str(s.tunnel_ip)
                                                  for s in cluster.spec.servers}, cluster.run_id)
    net = MininetCluster(topo=None, build=False, controller=None, autoSetMacs=False, autoStaticArp=False,
                         link=link_cls, waitConnected=False, precheck=False, user=cluster.spec.servers[0].user,
                         servers=[cluster.mn_server(s) for s in cluster.spec.names])
    return net, host_cls, switch_cls


def _add_controller(net, local: LocalSite, cluster: ClusterRun | None, of_port: int) -> None:
    from mininet.node import RemoteController

    class ReadyController(RemoteController):
        # The controller process already listens. Mininet's own check telnets into the OpenFlow port and
        # decodes what comes back as UTF-8: the controller's binary HELLO made that raise UnicodeDecodeError
        # now and then.
        def checkListening(self) -> None:
            pass

    ip = "127.0.0.1" if cluster is None else str(cluster.spec.servers[0].tunnel_ip)
    c0 = net.addController(ReadyController("c0", ip=ip, port=of_port))
    local.process(c0.pid, "mininet controller shell c0")


def _add_nodes(net, topo: Topology, caps: Capabilities, local: LocalSite, cluster: ClusterRun | None,
               site_of: Callable[[str], LocalSite | ServerAgent], host_cls: type, switch_cls: type) -> None:
    """One Mininet host per host and one tagged OVS bridge per switch, each recorded by its site as made."""
    where = {} if cluster is None else {n: cluster.mn_server(cluster.server_of(n)) for n in topo.nodes}

    class OneCommandHost(OneCommandAtATime, host_cls):
        pass

    class TaggedSwitch(OneCommandAtATime, switch_cls):
        # The run id on every bridge from the moment it exists: cleanup deletes a bridge only if it carries
        # the id of the record that names it, and an orphan stays recognisable as ours.
        def bridgeOpts(self) -> str:
            return super().bridgeOpts() + f" external_ids:{BRIDGE_TAG}={self.params['run_tag']}"

    def placed(node: str) -> dict:
        if cluster is None:
            return {}
        return {"server": where[node], "user": cluster.by_name[cluster.server_of(node)].user}

    def record(node, name: str, what: str, netns: bool = False) -> None:
        site_of(name).process(node.pid, what, netns)
        if getattr(node, "isRemote", False):  # our ssh client that carries the node's shell
            local.process(node.shell.pid, f"ssh for {what} on {where[name]}")

    for h in topo.hosts:
        a = nic_address(h, 0)
        node = net.addHost(h.short, cls=OneCommandHost, ip=f"{a.ip}/32", mac=a.mac, **placed(h.name))
        record(node, h.name, f"mininet host {h.short}", netns=True)
    for s in topo.switches:
        datapath = caps.datapath if cluster is None else cluster.datapath(cluster.server_of(s.name))
        node = net.addSwitch(s.short, cls=TaggedSwitch, dpid=dpid_hex(s), datapath=datapath, failMode="secure",
                             protocols="OpenFlow13", batch=True, run_tag=site_of(s.name).run_id, **placed(s.name))
        record(node, s.name, f"mininet switch shell {s.short}")


def _stop_half_built(net) -> None:
    """Mininet's stop on a half-built network can raise (an AssertionError on a node without its shell): that must
    not replace the Ctrl-C or error that got us here; the run's record undoes the rest. A Ctrl-C inside a node's
    command leaves its shell waiting, and Mininet's stop then asserts on it: expected after an interrupt, so one
    line (the traceback at debug), never a traceback to the user."""
    try:
        net.stop()
    except Exception as e:  # noqa: BLE001
        log.warning("mininet's stop of the half-built network stopped early (%s: %s); the run's record "
                    "removes the rest", type(e).__name__, e)
        log.debug("mininet stop after a failed start", exc_info=True)


def grouped_link(link_cls: type, group: int) -> type:
    """`link_cls` whose veth pairs are born in the run's link group: both ends carry the proof that they are
    the run's from the moment they exist, so an interrupt or a kill -9 between two links leaves nothing that
    cleanup cannot prove and remove (grouping after the build left 12-64 veths nobody could claim).
    Unlike Mininet's, it deletes no interface of the same name first: preflight refuses those."""

    class GroupedLink(link_cls):
        @classmethod
        def makeIntfPair(cls, intfname1, intfname2, addr1=None, addr2=None, node1=None, node2=None,  # noqa: N802
                         deleteIntfs=True):
            from mininet.util import quietRun

            run = node1.cmd if node1 is not None else quietRun
            mac1 = ["address", addr1] if addr1 else []
            mac2 = ["address", addr2] if addr2 else []
            netns = str(node2.pid) if node2 is not None else "1"
            argv = ["ip", "link", "add", "name", intfname1, *mac1, "group", str(group), "type", "veth",
                    "peer", "name", intfname2, *mac2, "group", str(group), "netns", netns]
            out = run(shlex.join(argv))
            if out:
                raise RuntimeError(f"creating the veth pair {intfname1}/{intfname2} failed: {out.strip()}")

    return GroupedLink


def by_site(nodes: list[Node], site_of: Callable[[str], object]) -> dict:
    out: dict = {}
    for n in nodes:
        out.setdefault(site_of(n.name), []).append(n)
    return out


def root_intfs_by_site(topo: Topology, site_of: Callable[[str], object]) -> dict:
    """Each site's switch-side interfaces (root namespace): what it records, groups, tunes and deletes."""
    return {site: [i for s in switches for i in switch_intfs(topo, s.name)]
            for site, switches in by_site(topo.switches, site_of).items()}


class OneCommandAtATime:
    """A Mininet node whose shell takes one `cmd` at a time from any thread.

    A node's shell runs one command line at a time, and Mininet asserts that nothing is
    waiting before it sends the next. The failure injector, the replay's flow pinning and the
    CLI each call from their own thread; two at once on one node raised a bare AssertionError
    (a link failure that moved a precise flow while the replay pinned another on the same host).
    """

    def __init__(self, *args, **kwargs):
        self._cmd_lock = threading.RLock()
        super().__init__(*args, **kwargs)

    def cmd(self, *args, **kwargs):
        with self._cmd_lock:
            return super().cmd(*args, **kwargs)


def stop(net, topo: Topology, site_of: Callable[[str], object]) -> None:
    """Mininet's stop without its per-interface `ip link del` (a shell round trip and an RCU grace period
    each, most of the teardown at scale): every root-namespace veth in one batch per site (their peers in the
    hosts go with them), the bridges in one ovs-vsctl call per server (Mininet's batch shutdown), then the
    node shells."""
    for c in net.controllers:
        c.stop()
    for site, ifnames in root_intfs_by_site(topo, site_of).items():
        site.delete_links(ifnames)
    switches = list(net.switches)
    if switches:
        type(switches[0]).batchShutdown(switches)
    for h in net.hosts:
        h.terminate()
