"""PFC over several servers: every server's PFC agent runs over its own ports, and a pause toward a port on
another server is a message to that server's agent.

    pfc = SplitPfc(cluster_run, split_shaper, state_file)   # on the first server, when the spec enables PFC
    pfc.start(); ...; pfc.stop(); pfc.report(since)

A congested switch queue pauses its ingress neighbours (testbed.qos.pfc); a neighbour across a crossing link
lives on another server, where neither OVS nor the kernel would carry a PAUSE frame from here (our pause
is a qdisc state, and a tunnel is no Ethernet segment to the sender's queue). So each agent sends the
other server, over UDP on the cluster's own network (the servers' tunnel addresses), the whole set of
pauses it holds there, at once on a change and again every `refresh_s` while any is held; the receiver
applies it the moment it arrives and releases what a server held if it has said nothing for `expire_s`
(its agent gone, or its messages lost), as a real PAUSE times out when it is not renewed.

A message is signed with a key made for the run (HMAC-SHA256) and handed to each agent over its SSH
connection; one with a wrong signature, another run's id, a sender that is not the peer's address, or an
old sequence number is dropped and counted. Every message is acknowledged: half the round trip is the
one-way delay a pause adds across servers, reported in the run's PFC figures.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from testbed.qos.pfc import PfcAgent
from testbed.qos.pfc_report import merge_reports
from testbed.qos.pfc_state import Hold
from testbed.qos.ports import Port, ports_to_json
from testbed.qos.shaper import Shaper

log = logging.getLogger(__name__)

MAC_BYTES = 32
REFRESH_S = 0.1
EXPIRE_S = 1.0
MAX_DELAY_SAMPLES = 100_000


class PauseWire:
    """This server's end of the pause messages (testbed.qos.pfc_state.RemotePauses)."""

    def __init__(self, run_id: str, me: str, key: bytes, bind_ip: str, ports: dict[str, Port],
                 server_of_node: dict[str, str], refresh_s: float = REFRESH_S, expire_s: float = EXPIRE_S):
        self.run_id, self.me, self._key = run_id, me, key
        self.ports = ports  # the other servers' ports, by key
        self._server_of_node = server_of_node
        self.refresh_s, self.expire_s = refresh_s, expire_s
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((bind_ip, 0))
        self.sock.setblocking(False)
        self.peers: dict[str, tuple[str, int]] = {}
        self._seq = 0
        self._last_seq: dict[str, int] = {}
        self._heard: dict[str, float] = {}
        self._sent_at: dict[int, float] = {}
        self._started = time.monotonic()
        self.counts = {"sent": 0, "received": 0, "rejected": 0, "send_errors": 0}
        self.one_way_s: list[float] = []

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def connect(self, peers: dict[str, tuple[str, int]]) -> None:
        self.peers = {name: (ip, int(port)) for name, (ip, port) in peers.items() if name != self.me}

    def server_of(self, key: str) -> str:
        return self._server_of_node[key.rsplit(":", 1)[0]]

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def _send(self, server: str, msg: dict) -> None:
        body = json.dumps({"r": self.run_id, "f": self.me} | msg, separators=(",", ":")).encode()
        try:
            self.sock.sendto(hmac.new(self._key, body, hashlib.sha256).digest() + body, self.peers[server])
        except OSError as exc:  # the next refresh says it again
            self.counts["send_errors"] += 1
            log.debug("pause message to %s: %s", server, exc)

    def send(self, server: str, holds: list[Hold]) -> None:
        self._seq += 1
        self._sent_at[self._seq] = time.monotonic()
        if len(self._sent_at) > 1000:  # never acknowledged (lost): not kept forever
            del self._sent_at[min(self._sent_at)]
        self.counts["sent"] += 1
        self._send(server, {"s": self._seq, "h": holds})

    def receive(self) -> list[tuple[str, list[Hold]]]:
        """Every message waiting: each sender's newest set of holds; acknowledgements timed."""
        out = []
        while True:
            try:
                data, addr = self.sock.recvfrom(65535)
            except BlockingIOError:
                return out
            now = time.monotonic()
            msg = self._verify(data, addr)
            if msg is None:
                self.counts["rejected"] += 1
                continue
            sender = msg["f"]
            if "a" in msg:  # an acknowledgement times our message; it renews nothing (a replayed one would)
                sent = self._sent_at.pop(msg["a"], None)
                if sent is not None and len(self.one_way_s) < MAX_DELAY_SAMPLES:
                    self.one_way_s.append((now - sent) / 2)
                continue
            if msg["s"] <= self._last_seq.get(sender, 0):  # overtaken by a newer one, or replayed
                self.counts["rejected"] += 1
                continue
            self._last_seq[sender] = msg["s"]
            self._heard[sender] = now  # only a fresh set of holds renews the sender's pauses here
            self.counts["received"] += 1
            self._send(sender, {"a": msg["s"]})
            out.append((sender, [tuple(h) for h in msg["h"]]))

    def _verify(self, data: bytes, addr) -> dict | None:
        mac, body = data[:MAC_BYTES], data[MAC_BYTES:]
        if not hmac.compare_digest(mac, hmac.new(self._key, body, hashlib.sha256).digest()):
            return None
        try:
            msg = json.loads(body)
        except ValueError:
            return None
        sender = msg.get("f") if isinstance(msg, dict) else None
        if not isinstance(sender, str) or msg.get("r") != self.run_id or sender not in self.peers \
                or addr[0] != self.peers[sender][0] or not _well_formed(msg):
            return None
        return msg

    def silent_since(self, server: str) -> float:
        return self._heard.get(server, self._started)

    def report(self) -> dict:
        return dict(self.counts) | {"one_way_ms": [round(1000 * s, 3) for s in self.one_way_s]}


def _count(v: object) -> bool:
    return type(v) is int and v > 0  # bool is an int to Python; a sequence number is neither 0 nor True


def _well_formed(msg: dict) -> bool:
    """A signed message is still checked for its shape: a peer's bug must not raise inside the PFC agent's loop.
    Either an acknowledgement {"a": seq} or a set of holds {"s": seq, "h": [[port, priority, by], ...]}."""
    if "a" in msg:
        return _count(msg["a"]) and set(msg) == {"r", "f", "a"}
    holds = msg.get("h")
    return (_count(msg.get("s")) and set(msg) == {"r", "f", "s", "h"} and isinstance(holds, list)
            and all(isinstance(h, list) and len(h) == 3 and isinstance(h[0], str) and type(h[1]) is int
                    and isinstance(h[2], str) for h in holds))


def start_agent(shaper, state_file, *, run_id: str, me: str, key: bytes, bind_ip: str, others: list[Port],
                server_of_node: dict[str, str]) -> tuple[PfcAgent, PauseWire]:
    """This server's PFC agent with its end of the messages (not yet started: its peers come next)."""
    wire = PauseWire(run_id, me, key, bind_ip, {p.key: p for p in others}, server_of_node)
    return PfcAgent(shaper, state_file=state_file, remote=wire), wire


class SplitPfc:
    """The first server's side: its own agent here, every other server's in that server's agent process."""

    def __init__(self, cluster, shaper, state_file=None):
        self.cluster, self.shaper = cluster, shaper
        self.key = secrets.token_bytes(32)
        run = cluster.run_id
        ports = shaper.ports
        local = next((part for part in shaper.parts if isinstance(part, Shaper)), None) or Shaper([], shaper.spec)
        server_of = cluster.placement.server_of
        self.agent, self.wire = start_agent(
            local, state_file, run_id=run, me=cluster.master, key=self.key,
            bind_ip=str(cluster.by_name[cluster.master].tunnel_ip),
            others=[p for k, p in ports.items() if k not in local.ports], server_of_node=server_of)
        self.remote = {name: agent for name, agent in cluster.agents.items()
                       if any(server_of[p.node] == name for p in ports.values())}
        self._others = {name: ports_to_json([p for p in ports.values() if server_of[p.node] != name])
                        for name in self.remote}

    def start(self) -> None:
        c = self.cluster
        bound = dict(zip(self.remote, self._each(lambda item: item[1].pfc_bind(
            run_id=c.run_id, key=self.key.hex(), me=item[0], bind_ip=str(c.by_name[item[0]].tunnel_ip),
            ports=self._others[item[0]], server_of=c.placement.server_of)), strict=True))
        peers = {c.master: (str(c.by_name[c.master].tunnel_ip), self.wire.port)} | {
            name: (str(c.by_name[name].tunnel_ip), port) for name, port in bound.items()}
        self.wire.connect(peers)
        self._each(lambda item: item[1].pfc_start(peers))
        self.agent.start()

    def stop(self) -> None:
        self.agent.stop()
        self._each(lambda item: item[1].pfc_stop())
        self.wire.close()

    def close(self) -> None:
        """Nothing is left once stopped: every agent is a thread of its server's own process."""

    def report(self, since: float | None = None) -> dict:
        ago = None if since is None else time.monotonic() - since
        reports = {self.cluster.master: self.agent.report(since)}
        reports.update(zip(self.remote, self._each(lambda item: item[1].pfc_report(ago)), strict=True))
        return merge_reports(reports)

    def _each(self, fn) -> list:
        with ThreadPoolExecutor(max(1, len(self.remote))) as pool:
            return list(pool.map(fn, self.remote.items()))
