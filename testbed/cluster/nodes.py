"""Node classes of Mininet's cluster edition for one cluster run, with what they lack here.

- Our ssh options (key, port, the run's shared connection): RemoteMixin reads `sshbase` while it starts a node's
  shell, so it is set before that, per server.
- RemoteOVSSwitch.batchStartup sends each server's whole `ovs-vsctl` batch through a switch's shell, which is a
  pty: a line longer than the pty's 4095 characters is cut, and with 8 switches a server got only some of its
  bridges ("a0 is not a bridge"). Here a remote server's batch goes as ssh's arguments (RemoteMixin.rcmd; its
  shell there parses the quoting Mininet wrote for a shell), and this server's batch through a local shell, as
  Mininet does on one machine (rcmd here runs without a shell, and OVS refused the quoted controller target).
"""

from __future__ import annotations

from itertools import groupby
from operator import attrgetter

from mininet.examples.cluster import RemoteHost, RemoteOVSSwitch
from mininet.node import OVSSwitch


def node_classes(ssh_options: dict[str, list[str]]) -> tuple[type, type]:
    """(host class, switch class); `ssh_options`: Mininet server name -> ssh options for it."""

    class SshOptions:
        def __init__(self, name, server="localhost", **kwargs):
            self.sshbase = ["ssh", "-q", "-tt", *ssh_options.get(server, [])]
            super().__init__(name, server=server, **kwargs)

    class ClusterHost(SshOptions, RemoteHost):
        pass

    class ClusterSwitch(SshOptions, RemoteOVSSwitch):
        @classmethod
        def batchStartup(cls, switches, **_kwargs):
            by_server = attrgetter("server")
            for _server, group in groupby(sorted(switches, key=by_server), by_server):
                group = tuple(group)
                if group[0].isRemote:  # the remote shell parses the batch, as a local shell does below
                    OVSSwitch.batchStartup(group, run=lambda cmds, shell=True, first=group[0]: first.rcmd(cmds))
                else:
                    OVSSwitch.batchStartup(group)
            return switches

    return ClusterHost, ClusterSwitch
