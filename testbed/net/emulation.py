"""The Mininet objects for a Topology: one OVS bridge per switch with the Topology's DPIDs and ports,
one host per host, one veth per link; each recorded in the run's Ownership as it is made."""

from __future__ import annotations

import os

from testbed.system.capabilities import Capabilities
from testbed.system.ownership import BRIDGE_TAG, Ownership
from topos.addressing import dpid_hex, nic_address
from topos.model import Topology

from .naming import root_intfs
from .routes import run


def build(topo: Topology, caps: Capabilities, owner: Ownership, of_port: int | None):
    """A built and started Mininet network; `of_port`: the controller's OpenFlow port (None: no controller)."""
    from mininet.link import Link as MnLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch, RemoteController

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
        for h in topo.hosts:
            a = nic_address(h, 0)
            node = net.addHost(h.short, ip=f"{a.ip}/32", mac=a.mac)
            owner.process(node.pid, f"mininet host {h.short}")
        for s in topo.switches:
            node = net.addSwitch(s.short, cls=OVSSwitch, dpid=dpid_hex(s), datapath=caps.datapath,
                                 failMode="secure", protocols="OpenFlow13", batch=True)
            owner.process(node.pid, f"mininet switch shell {s.short}")
        for l in topo.links:
            net.addLink(topo.nodes[l.a].short, topo.nodes[l.b].short, port1=l.a_port, port2=l.b_port)
        net.build()
        net.start()
    except BaseException:
        net.stop()
        raise
    # The run id on every bridge: an orphan stays recognisable as ours even if its record is lost.
    tag = []
    for s in switches:
        tag += ["--", "set", "bridge", s, f"external_ids:{BRIDGE_TAG}={owner.run_id}"]
    run(["ovs-vsctl", *tag])
    return net
