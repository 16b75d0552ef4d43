"""The Mininet objects for a Topology: one OVS bridge per switch with the Topology's DPIDs and ports,
one host per host, one veth per link; each recorded in the run's Ownership as it is made."""

from __future__ import annotations

import os
import threading

from testbed.system.capabilities import Capabilities
from testbed.system.ownership import BRIDGE_TAG, Ownership
from topos.addressing import dpid_hex, nic_address
from topos.model import Topology

from .naming import root_intfs


def build(topo: Topology, caps: Capabilities, owner: Ownership, of_port: int | None):
    """A built and started Mininet network; `of_port`: the controller's OpenFlow port (None: no controller)."""
    from mininet.link import Link as MnLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import Host, OVSSwitch, RemoteController

    setLogLevel(os.environ.get("HPNLAB_MININET_LOG", "warning"))
    switches = [s.short for s in topo.switches]
    owner.intend("bridges", switches)
    owner.intend("interfaces", root_intfs(topo))
    net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, autoStaticArp=False,
                  link=MnLink, waitConnected=False)
    try:
        if of_port is not None:
            class ReadyController(RemoteController):
                # The controller process already listens. Mininet's own check telnets into the
                # OpenFlow port and decodes what comes back as UTF-8: the controller's binary HELLO
                # made that raise UnicodeDecodeError now and then.
                def checkListening(self) -> None:
                    pass

            c0 = net.addController(ReadyController("c0", ip="127.0.0.1", port=of_port))
            owner.process(c0.pid, "mininet controller shell c0")
        class OneCommandHost(OneCommandAtATime, Host):
            pass

        for h in topo.hosts:
            a = nic_address(h, 0)
            node = net.addHost(h.short, cls=OneCommandHost, ip=f"{a.ip}/32", mac=a.mac)
            owner.process(node.pid, f"mininet host {h.short}")
        class TaggedSwitch(OneCommandAtATime, OVSSwitch):
            # The run id on every bridge from the moment it exists: cleanup deletes a bridge only if it
            # carries the id of the record that names it, and an orphan stays recognisable as ours.
            def bridgeOpts(self) -> str:
                return super().bridgeOpts() + f" external_ids:{BRIDGE_TAG}={owner.run_id}"

        for s in topo.switches:
            node = net.addSwitch(s.short, cls=TaggedSwitch, dpid=dpid_hex(s), datapath=caps.datapath,
                                 failMode="secure", protocols="OpenFlow13", batch=True)
            owner.process(node.pid, f"mininet switch shell {s.short}")
        for l in topo.links:
            net.addLink(topo.nodes[l.a].short, topo.nodes[l.b].short, port1=l.a_port, port2=l.b_port)
        net.build()
        group_links(root_intfs(topo), owner.link_group)  # the proof, for cleanup, that these veths are ours
        net.start()
    except BaseException:
        net.stop()
        raise
    return net


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


def group_links(ifnames: list[str], group: int) -> None:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for name in ifnames:
            for idx in ipr.link_lookup(ifname=name):
                ipr.link("set", index=idx, group=group)


def delete_links(ifnames: list[str], group: int) -> int:
    """Delete these root-namespace interfaces (and their veth peers) in one batch; returns how many.

    One RTM_DELLINK per veth costs an RCU grace period each (7.3 s for 512 at 64 hosts); the kernel
    unregisters a whole link group at once (0.15 s). The interfaces are put in `group` first, and the
    group is deleted only if nothing but them is in it.
    """
    from pyroute2 import IPRoute

    group_links(ifnames, group)
    with IPRoute() as ipr:
        ours = {i for name in ifnames for i in ipr.link_lookup(ifname=name)}
        members = {m["index"] for m in ipr.get_links() if m.get_attr("IFLA_GROUP") == group}
        if not ours or members != ours:
            raise RuntimeError(f"link group {group} holds interfaces this run did not create; not deleting it")
        ipr.link("del", group=group)
    return len(ours)


def stop(net, topo: Topology, group: int) -> None:
    """Mininet's stop without its per-interface `ip link del` (a shell round trip and an RCU grace period
    each, most of the teardown at scale): every root-namespace veth in one batch (their peers in the hosts go
    with them), the bridges in one ovs-vsctl call (Mininet's batch shutdown), then the node shells."""
    for c in net.controllers:
        c.stop()
    delete_links(root_intfs(topo), group)
    switches = list(net.switches)
    if switches:
        type(switches[0]).batchShutdown(switches)
    for h in net.hosts:
        h.terminate()
