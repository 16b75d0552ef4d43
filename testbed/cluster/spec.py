"""cluster.yaml: the servers one fabric is spread over (issue #18). Pure: no SSH, no root.

    servers:                      # the first runs the controller and the master Mininet
      - {name: s1, ssh: 10.1.0.1, user: root, key: id_hpnlab, tunnel_ip: 192.168.7.1}
      - {name: s2, ssh: 10.1.0.2:22, user: root, key: id_hpnlab, tunnel_ip: 192.168.7.2}
    tunnel: vxlan                 # vxlan (default) | gre | ssh: how a link between servers is carried
    link_gbps: 10                 # what the servers' tunnel network carries, each way, per server

`key` is relative to the file. Every mistake is one line naming the field, before anything connects.
"""

from __future__ import annotations

import stat
from ipaddress import IPv4Address
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from topos.errors import InputError
from topos.inputs import load_yaml, read_text
from topos.params import Params, parse_params

MAX_SERVERS = 16
TUNNELS = ("vxlan", "gre", "ssh")
# what each tunnel kind leaves of a 1500-byte frame between servers (VXLAN: 50 bytes of headers, GRE with a
# key: 42, rounded to VXLAN's); Mininet's SSH tunnel carries whole frames
TUNNEL_MTU = {"vxlan": 1450, "gre": 1450, "ssh": 1500}


class Server(Params):
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,15}$")
    ssh: str = Field(pattern=r"^[A-Za-z0-9.:-]{1,253}(:[0-9]{1,5})?$")  # host or host:port
    user: str = Field(default="root", pattern=r"^[a-z_][a-z0-9_-]{0,31}$")
    key: str | None = None  # private key for SSH; None: the user's own agent or default key
    tunnel_ip: IPv4Address  # the address this server's tunnel endpoints use
    tunnel_dev: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,15}$")

    @property
    def host(self) -> str:
        return self.ssh.rsplit(":", 1)[0] if self.ssh.count(":") == 1 else self.ssh

    @property
    def port(self) -> int:
        return int(self.ssh.rsplit(":", 1)[1]) if self.ssh.count(":") == 1 else 22

    @property
    def dest(self) -> str:
        return f"{self.user}@{self.host}"

    def ssh_options(self, control_path: str | None = None, master: bool = False) -> list[str]:
        """ssh's options for this server. Every connection of a run shares one (the first, `master`): a key
        exchange per node shell would cost seconds each, and with ControlPersist=no the shared connection
        ends with the process that opened it, so nothing of ours lingers after the run."""
        opts = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-o", "ServerAliveInterval=15",
                "-p", str(self.port)]
        if control_path is not None:
            opts += ["-o", f"ControlPath={control_path}", "-o", f"ControlMaster={'yes' if master else 'no'}",
                     "-o", "ControlPersist=no"]
        if self.key:
            opts += ["-i", self.key, "-o", "IdentitiesOnly=yes"]
        return opts

    def ssh_argv(self, command: str, control_path: str | None = None, master: bool = False) -> list[str]:
        """`command` run on this server over ssh (see ssh_options)."""
        return ["ssh", *self.ssh_options(control_path, master), self.dest, command]


class ClusterSpec(Params):
    servers: list[Server] = Field(min_length=1, max_length=MAX_SERVERS)
    tunnel: Literal["vxlan", "gre", "ssh"] = "vxlan"
    link_gbps: float = Field(default=1.0, gt=0, le=800)

    @model_validator(mode="after")
    def _distinct(self) -> ClusterSpec:
        for attr in ("name", "ssh", "tunnel_ip"):
            seen: set = set()
            for i, s in enumerate(self.servers):
                v = getattr(s, attr)
                if v in seen:  # an InputError passes through pydantic as it is: one line naming the server
                    raise InputError("given twice: each server needs its own", f"change servers[{i}].{attr}",
                                     field=f"servers[{i}].{attr}", value=str(v))
                seen.add(v)
        return self

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.servers]

    @property
    def mtu(self) -> int:
        """The hosts' MTU: a frame from a host must fit the tunnel it may cross."""
        return TUNNEL_MTU[self.tunnel]


def load_cluster(path: str | Path) -> ClusterSpec:
    p = Path(path)
    if not p.is_file():
        raise InputError("no such cluster file", "give the path of a cluster.yaml (see docs/how-to/cluster.md)",
                         field="cluster", value=str(path))
    data = load_yaml(read_text(p, "cluster"), "cluster")
    if not isinstance(data, dict):
        raise InputError("a cluster file is a mapping", "start with 'servers:'", field="cluster", value=str(path))
    spec = parse_params(ClusterSpec, "cluster", data)
    servers = []
    for i, s in enumerate(spec.servers):
        if s.key is not None:
            key = p.parent / Path(s.key).expanduser()  # ~/.ssh/x as written; a relative path from the file
            if not key.is_file():
                raise InputError("no such key file", "give the private key's path (absolute, ~/..., or relative to "
                                 "the cluster file)",
                                 field=f"servers[{i}].key", value=s.key)
            if key.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise InputError("ssh refuses a private key others can read", f"chmod 600 {key}",
                                 field=f"servers[{i}].key", value=s.key)
            s = s.model_copy(update={"key": str(key.resolve())})
        servers.append(s)
    return spec.model_copy(update={"servers": servers})
