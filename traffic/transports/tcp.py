"""TCP transport: one traffic.agent per host, flows as TCP connections with the schedule's step semantics."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

AGENT_PORT = 9000


@dataclass
class FlowRecord:
    id: str
    src: str
    dst_ip: str
    bytes: int
    sport: int
    sent: dict | None = None
    recv: dict | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.error is not None or (self.sent is not None and self.recv is not None)


def wait_for_flows(ids: list[str], timeout: float, lock, records: dict[str, FlowRecord],
                   news: Callable[[float], Iterable[str]]) -> list[FlowRecord]:
    """Until every flow of `ids` is done; TimeoutError once none finished for `timeout` s (a stalled job).

    `news(s)` waits up to s and returns the ids of the flows that reported since the last call. Only
    those are looked at, so a plan of tens of thousands of flows costs one check per report, not a
    scan of the plan per report (which kept the coordinating process busy at 64 hosts). One waiter
    at a time per transport: the reports are consumed.
    """
    with lock:
        pending = {i for i in ids if not records[i].done}
    deadline = time.monotonic() + timeout
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"{len(pending)} flow(s) stalled for {timeout:.0f} s: {sorted(pending)[:5]}")
        changed = news(min(left, 0.5))
        with lock:
            finished = {i for i in changed if i in pending and records[i].done}
        if finished:
            pending -= finished
            deadline = time.monotonic() + timeout
    with lock:
        return [records[i] for i in ids]


@dataclass
class TcpTransport:
    net: object  # testbed.net.network.Network (duck-typed: .python(), .topo)
    tos: int = 0
    port: int = AGENT_PORT  # each job its own agents and port, so jobs run side by side
    proto: str = "tcp"
    sport_base: int = 20000
    sport_span: int = 20000  # up to 39999: 40000-59999 are pinned to NIC ports (controllers/hostpath.py)
    agents: dict = field(default_factory=dict)
    records: dict[str, FlowRecord] = field(default_factory=dict)

    def __post_init__(self):
        self._events: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self.tcp: dict[str, dict[str, int]] = {}  # host -> its TCP retransmission counters, read at stop

    def start(self) -> None:
        import subprocess

        for h in self.net.topo.hosts:
            p = self.net.python(h.name, "traffic.agent", "--port", str(self.port), "--tos", str(self.tos),
                                stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, bufsize=1)
            self.agents[h.name] = p
            threading.Thread(target=self._read, args=(h.name, p), daemon=True).start()
        deadline = time.monotonic() + 20
        ready = set()
        while len(ready) < len(self.agents):
            try:
                host, ev = self._events.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError(f"traffic agents not ready: {sorted(set(self.agents) - ready)}") from None
            if ev.get("event") == "ready":
                ready.add(host)

    def _read(self, host: str, p) -> None:
        for line in p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            evs = ev.get("events", []) if ev.get("event") == "batch" else [ev]
            ids = []
            with self._lock:
                for e in evs:
                    r = self.records.get(e.get("id")) if e.get("event") in ("sent", "recv", "error") else None
                    if r is None:
                        continue
                    if e["event"] == "error":
                        r.error = e["error"]
                    else:
                        setattr(r, e["event"], e)
                    ids.append(e["id"])
            if ids:
                self._events.put((host, {"event": "progress", "ids": ids}))
            elif ev.get("event") == "tcp":
                self.tcp[host] = ev["counters"]
            elif ev.get("event") != "batch":
                self._events.put((host, ev))

    def pin(self, view: dict) -> None:
        """Nothing to do: TCP follows the host's policy routing, which Network.steer set for the view."""

    def submit(self, flows: list[dict]) -> list[FlowRecord]:
        """A whole plan at once ({id, src, dst_ip, bytes, sport, after} per flow, optionally `sports` and
        `lane`: see traffic/agent.py): one `plan` per sending host.

        The agents run it by its dependencies (traffic/plan.py), after `compute_until` (wall time) if given.
        """
        recs, by_host = [], {}
        for f in flows:
            recs.append(FlowRecord(f["id"], f["src"], f["dst_ip"], f["bytes"], f["sport"]))
            cmd = {"id": f["id"], "dst": f["dst_ip"], "port": self.port, "bytes": f["bytes"], "sport": f["sport"],
                   "tos": self.tos, "after": list(f["after"])}
            if f.get("sports"):  # the agent picks among these connections (least outstanding bytes)
                cmd.update(sports=list(f["sports"]), lane=f["lane"])
            if f.get("compute_until"):  # the rank's compute before the op, waited in its agent
                cmd["compute_until"] = f["compute_until"]
            by_host.setdefault(f["src"], []).append(cmd)
        with self._lock:
            self.records.update({r.id: r for r in recs})
        for host, cmds in by_host.items():
            p = self.agents[host]
            p.stdin.write(json.dumps({"cmd": "plan", "flows": cmds}) + "\n")
            p.stdin.flush()
        return recs

    def wait(self, ids: list[str], timeout: float) -> list[FlowRecord]:
        def news(s: float) -> list[str]:
            evs = []
            try:
                evs.append(self._events.get(timeout=s))
                while True:
                    evs.append(self._events.get_nowait())
            except queue.Empty:
                pass
            return [i for _host, ev in evs if ev.get("event") == "progress" for i in ev["ids"]]

        return wait_for_flows(ids, timeout, self._lock, self.records, news)

    def stop(self) -> None:
        for p in self.agents.values():
            try:
                p.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                p.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
        for p in self.agents.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
        self.agents.clear()
