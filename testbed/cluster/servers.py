"""The master's side of a cluster run: one server agent per server but the first, reached over SSH.

    servers = ClusterRun(spec, placement, local_site, hpnlab_dir)
    servers.start(local_capabilities)   # agents up, each server's capabilities known
    servers.site_of("h12")              # its agent, or local_site if the node is on this (the first) server
    servers.stop()                      # each server undoes its record

A node on the first server is local, as on one machine; the others' changes go through their agent, which
owns them (see agent.py).
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from testbed.system.capabilities import Capabilities
from testbed.system.site import LocalSite
from testbed.system.versions import versions
from topos.errors import InputError
from topos.inputs import open_output

from .placement import Placement
from .spec import ClusterSpec, Server

log = logging.getLogger(__name__)


class AgentError(RuntimeError):
    pass


def refuse_on_servers(spec: ClusterSpec, *, delay_ms: float | None) -> None:
    """What a network spread over servers does not do yet: one line each, before anything starts."""
    if len(spec.servers) < 2:
        return
    if delay_ms:
        raise InputError("link delay over several servers is not built yet", "leave out --delay", field="delay",
                         value=delay_ms)


class ServerAgent:
    """One server agent process and the JSON lines between us (argv: how to start it, usually over ssh)."""

    def __init__(self, name: str, argv: list[str], log_path: Path):
        self.name, self.argv, self.log_path = name, argv, log_path
        self.proc: subprocess.Popen | None = None
        self.hello: dict = {}
        self._lock = threading.Lock()  # one request at a time: the replies are not tagged

    def start(self) -> dict:
        with open_output(self.log_path, "server log", append=True) as err:
            # its own session: a Ctrl-C meant for the master must not cut the agent off before teardown
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                         text=True, start_new_session=True)
        self.hello = self.call("hello")
        return self.hello

    def call(self, op: str, **args) -> dict:
        with self._lock:
            if self.proc is None or self.proc.poll() is not None:
                raise AgentError(f"server {self.name}: its agent is not running ({self._tail()})")
            try:
                self.proc.stdin.write(json.dumps({"op": op} | args) + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except (BrokenPipeError, OSError) as exc:
                raise AgentError(f"server {self.name}: agent connection lost ({exc}; {self._tail()})") from exc
        if not line:
            raise AgentError(f"server {self.name}: agent ended ({self._tail()})")
        reply = json.loads(line)
        if not reply.pop("ok"):
            raise AgentError(f"server {self.name}: {op}: {reply['error']}")
        return reply

    def stop(self, timeout: float = 60) -> list[str]:
        """Ask the agent to undo its record and wait for it; returns what it removed."""
        if self.proc is None:
            return []
        removed: list[str] = []
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                self.proc.stdin.close()
                line = self.proc.stdout.readline()
                removed = json.loads(line).get("removed", []) if line else []
            self.proc.wait(timeout)
        except (BrokenPipeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
            log.warning("server %s: agent did not stop cleanly (%s); `hpnlab clean --cluster` finishes it",
                        self.name, exc)
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        return removed

    # -- the same methods as testbed.system.site.LocalSite --------------------------
    @property
    def run_id(self) -> str:
        return self.hello["run_id"]

    def intend(self, kind: str, names: list[str]) -> None:
        self.call("intend", kind=kind, names=names)

    def process(self, pid: int, what: str, netns: bool = False) -> None:
        self.call("process", pid=pid, what=what, netns=netns)

    def group(self, names: list[str]) -> None:
        self.call("group", names=names)

    def delete_links(self, names: list[str]) -> int:
        return self.call("delete_links", names=names)["deleted"]

    def sh(self, script: str, timeout: float = 120) -> tuple[int, str]:
        r = self.call("sh", script=script, timeout=timeout)
        return r["rc"], r["out"]

    def write(self, name: str, text: str) -> str:
        return self.call("write", name=name, text=text)["path"]

    # -- this server's share of the shaped ports (testbed.cluster.shaping) --------------
    def shape(self, spec_json: dict, ports_json: list[dict]) -> int:
        return self.call("shape", spec=spec_json, ports=ports_json)["ports"]

    def qos_stats(self, handle: int | None, keys: list[str] | None) -> dict[str, list[dict]]:
        return self.call("qos_stats", handle=handle, keys=keys)["stats"]

    def unshape(self) -> int:
        return self.call("unshape")["removed"]

    # -- this server's PFC agent (testbed.cluster.pauses) ------------------------------
    def pfc_bind(self, **args) -> int:
        return self.call("pfc_bind", **args)["port"]

    def pfc_start(self, peers: dict) -> None:
        self.call("pfc_start", peers=peers)

    def pfc_stop(self) -> None:
        self.call("pfc_stop")

    def pfc_report(self, ago: float | None) -> dict:
        return self.call("pfc_report", ago=ago)["report"]

    def _tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1] if lines else "no output"


def agent_argv(server: Server, run_id: str, hpnlab_dir: str, control_path: str) -> list[str]:
    """The agent over ssh, opening the run's shared connection to the server (the node shells ride on it)."""
    return server.ssh_argv(remote_line(hpnlab_dir, ["exec", "sudo", "-E", ".venv/bin/python", "-m",
                                                    "testbed.cluster.agent", run_id]), control_path, master=True)


def remote_line(hpnlab_dir: str, argv: list[str]) -> str:
    """A command line for a server's root shell over ssh: `cd DIR && ARGV`, every word quoted (ssh joins its
    arguments into one line the remote shell parses again: a folder or run id with a space or ';' in it must
    stay one word)."""
    return f"cd {shlex.quote(hpnlab_dir)} && {shlex.join(argv)}"


def run_once(argv: list[str], timeout: float) -> tuple[int, str, str]:
    """Exit status, output and errors of one command (no answer in time: 255, as ssh says it could not connect)."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return 255, "", f"no answer in {timeout:.0f} s"
    return r.returncode, r.stdout, r.stderr


def on_each_server(spec: ClusterSpec, hpnlab_dir: str, command: list[str],
                   timeout: float = 300) -> dict[str, tuple[int, str]]:
    """`hpnlab COMMAND...` run on every server but the first (in parallel): exit status and output of each."""
    def one(server: Server) -> tuple[int, str]:
        line = remote_line(hpnlab_dir, ["sudo", "-E", ".venv/bin/hpnlab", *command])
        rc, out, err = run_once(server.ssh_argv(line), timeout)
        return rc, (out + err).strip()

    others = spec.servers[1:]
    with ThreadPoolExecutor(max(1, len(others))) as pool:
        return dict(zip([s.name for s in others], pool.map(one, others), strict=True))


class ClusterRun:
    def __init__(self, spec: ClusterSpec, placement: Placement, local: LocalSite, hpnlab_dir: str):
        self.spec, self.placement, self.local = spec, placement, local
        self.run_id = local.run_id
        self.master = spec.servers[0].name
        self.by_name = {s.name: s for s in spec.servers}
        self.scratch = scratch = local.scratch
        self.agents: dict[str, ServerAgent] = {
            s.name: ServerAgent(s.name, agent_argv(s, self.server_run_id(s.name), hpnlab_dir,
                                                   self.control_path(s.name)), scratch / f"agent-{s.name}.log")
            for s in spec.servers[1:]}

    def server_run_id(self, server: str) -> str:
        """The id of a server's own record (and of its bridges' tags)."""
        return self.run_id if server == self.master else f"{self.run_id}-{server}"

    def control_path(self, server: str) -> str:
        return str(self.scratch / f"ssh-{server}")

    def start(self, local_capabilities: dict) -> None:
        """Every agent up (in parallel: each is an SSH login and a capability probe)."""
        with ThreadPoolExecutor(max(1, len(self.agents))) as pool:
            hellos = dict(zip(self.agents, pool.map(ServerAgent.start, self.agents.values()), strict=True))
        self.capabilities = {self.master: local_capabilities} | {s: h["capabilities"] for s, h in hellos.items()}
        self.versions = {self.master: versions(Capabilities.from_dict(local_capabilities))} | {
            s: h["versions"] for s, h in hellos.items()}

    def record(self) -> dict:
        """What a results folder keeps of the cluster: each server (address, datapath, versions) and the
        placement (which nodes where, the crossing links and their real rate per server)."""
        return {"servers": {s.name: {"host": s.host, "tunnel_ip": str(s.tunnel_ip), "datapath": self.datapath(s.name),
                                     "versions": self.versions[s.name]} for s in self.spec.servers},
                "tunnel": self.spec.tunnel, "link_gbps": self.spec.link_gbps, "placement": self.placement.to_dict()}

    def stop(self) -> dict[str, list[str]]:
        with ThreadPoolExecutor(max(1, len(self.agents))) as pool:
            return dict(zip(self.agents, pool.map(ServerAgent.stop, self.agents.values()), strict=True))

    def server_of(self, node: str) -> str:
        return self.placement.server_of[node]

    def site_of(self, node: str) -> LocalSite | ServerAgent:
        return self.agents.get(self.server_of(node), self.local)

    def mn_server(self, server: str) -> str:
        """The name Mininet's cluster edition knows a server by: 'localhost' for this one, else its address."""
        return "localhost" if server == self.master else self.by_name[server].host

    def node_ssh_options(self, server: str) -> list[str]:
        """ssh options of the node shells on a server: over the connection its agent opened."""
        return [] if server == self.master else self.by_name[server].ssh_options(self.control_path(server))

    def controller_listen(self, switches: list[str]) -> dict:
        """Where the controller (on the first server) takes OpenFlow: its cluster address, so the other
        servers' switches reach it; and which switches must connect from which other server's address."""
        return {"of_host": str(self.by_name[self.master].tunnel_ip),
                "remote_switches": {n: str(self.by_name[s].tunnel_ip) for n, s in self.placement.server_of.items()
                                    if s != self.master and n in switches}}

    def datapath(self, server: str) -> str:
        return self.capabilities[server]["datapath"]
