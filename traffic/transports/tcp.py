"""TCP transport: one traffic.agent per host, flows as TCP connections with the schedule's step semantics."""

from __future__ import annotations

import collections
import json
import queue
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..roce.frames import ROCE_PORT
from ..roce.gbn import NCCL_IB_TIMEOUT_S

AGENT_PORT = 9000
# Every job's agents listen on AGENT_PORT + its index, ports that share their high byte (0x2300-0x23ff): the
# shapers put the receivers' one-byte acknowledgements, sent from these ports, beside TCP's own ACKs
# (testbed/qos/shaper.py), and no sender's source port is among them (20000 up).
AGENT_PORTS = range(AGENT_PORT, 0x2400)


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


READY_S = 120  # an agent's start (Python and its imports): under the VM's TCG emulation four took over 20 s


@dataclass
class TcpTransport:
    net: object  # testbed.net.network.Network (duck-typed: .python(), .topo)
    tos: int = 0
    port: int = AGENT_PORT  # each job its own agents and port, so jobs run side by side
    proto: str = "tcp"  # "udp" for roce
    sport_base: int = 20000
    sport_span: int = 20000  # up to 39999: 40000-59999 are pinned to NIC ports (controllers/hostpath.py)
    cc: str | None = None  # TCP_CONGESTION of every connection (testbed/qos/cc.py), None: the kernel's default
    kind: str = "tcp"  # or "roce": the agents' queue pairs (traffic/rocenic.py) instead of TCP connections
    job: int = 0  # roce: the job's index (its QP numbers' top byte)
    rto_s: float = NCCL_IB_TIMEOUT_S  # roce: the QPs' retry timer, wall seconds (the runner's: dilated)
    dcqcn: dict | None = None  # roce: DCQCN's RpParams and cnp_interval_s, this machine's units; None: off
    cnp_tos: int = 48 << 2  # roce: the class CNPs ride (the high one)
    agents: dict = field(default_factory=dict)
    records: dict[str, FlowRecord] = field(default_factory=dict)

    def __post_init__(self):
        self._events: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._control = threading.Condition(self._lock)  # programs loaded and ended (chained iterations)
        self._loaded: dict[str, int] = {}  # host -> ranks whose program it has read
        self.programs: dict[str, dict] = {}  # rank -> its `program` event (released, end), once it ended
        self._running: list[str] = []  # hosts with programs loaded
        self.on_computing: Callable[[str, float], None] | None = None  # a rank computes until (traffic/skip.py)
        self.on_finished: Callable[[str], None] | None = None  # a rank's iteration is over (traffic/skip.py)
        self.tcp: dict[str, dict[str, int]] = {}  # host -> its TCP retransmission counters, read at stop
        self.roce: dict[str, dict[str, int]] = {}  # host -> its RoCE NIC's counters (roce), read at stop
        self.cpu_s: dict[str, float] = {}  # host -> its agent's CPU seconds (user + system), read at stop
        self._said: dict[str, collections.deque] = {}  # host -> its agent's last lines that were not events
        self._readers: dict[str, threading.Thread] = {}

    def start(self) -> None:
        import subprocess

        extra = [*(("--cc", self.cc) if self.cc else ())]
        if self.kind == "roce":
            extra += ["--transport", "roce", "--job", str(self.job), "--rto", str(self.rto_s),
                      "--cnp-tos", str(self.cnp_tos), *(("--dcqcn", json.dumps(self.dcqcn)) if self.dcqcn else ())]
        for h in self.net.topo.hosts:
            p = self.net.python(h.name, "traffic.agent", "--port", str(self.port), "--tos", str(self.tos), *extra,
                                stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, bufsize=1)
            self.agents[h.name] = p
            self._readers[h.name] = threading.Thread(target=self._read, args=(h.name, p), daemon=True)
            self._readers[h.name].start()
        deadline = time.monotonic() + READY_S
        ready: set[str] = set()
        while len(ready) < len(self.agents):
            waiting = sorted(set(self.agents) - ready)
            # gone: its process ended and its output with it (over several servers the process a host's popen
            # returns can end while the agent it started runs on, its output still open)
            if gone := [h for h in waiting if self.agents[h].poll() is not None and not self._readers[h].is_alive()]:
                for h in gone:  # its reader has its last lines once it met the end of its output
                    self._readers[h].join(timeout=5)
                said = "; ".join(f"{h}: {' | '.join(self._said.get(h, ())) or 'nothing'}" for h in gone[:2])
                raise RuntimeError(f"traffic agents exited before they were ready: {gone} ({said})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"traffic agents not ready within {READY_S} s: {waiting}")
            try:
                host, ev = self._events.get(timeout=0.5)
            except queue.Empty:
                continue
            if ev.get("event") == "ready":
                ready.add(host)

    def _read(self, host: str, p) -> None:
        for line in p.stdout:
            try:
                ev = json.loads(line)
            except ValueError:  # the agent's stderr shares the pipe (Mininet's popen): its last words
                self._said.setdefault(host, collections.deque(maxlen=3)).append(line.strip())
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
            elif ev.get("event") == "computing":
                if self.on_computing is not None:
                    self.on_computing(self.rank_key(ev["rank"]), ev["until"])
            elif ev.get("event") in ("loaded", "program"):
                with self._control:
                    if ev["event"] == "loaded":
                        self._loaded[host] = self._loaded.get(host, 0) + ev["ranks"]
                    else:
                        self.programs[ev["rank"]] = ev
                        if self.on_finished is not None:  # before the coordinator hears: it may join it again
                            self.on_finished(self.rank_key(ev["rank"]))
                    self._control.notify_all()
            elif ev.get("event") in ("tcp", "roce"):
                getattr(self, ev["event"])[host] = ev["counters"]
            elif ev.get("event") == "cpu":
                self.cpu_s[host] = ev["seconds"]
            elif ev.get("event") != "batch":
                self._events.put((host, ev))

    @property
    def dport(self) -> int:
        """The destination port of the flows' frames: the agents' (TCP) or RoCEv2's."""
        return ROCE_PORT if self.kind == "roce" else self.port

    def pin(self, view: dict) -> None:
        """Nothing to do: TCP follows the host's policy routing, which Network.steer set for the view."""

    def _records(self, flows: list[dict]) -> dict[str, list[dict]]:
        """The flows registered as records, and each as its sending agent's command, per sending host."""
        by_host: dict[str, list[dict]] = {}
        recs = [FlowRecord(f["id"], f["src"], f["dst_ip"], f["bytes"], f["sport"]) for f in flows]
        for f in flows:
            cmd = {"id": f["id"], "dst": f["dst_ip"], "port": self.port, "bytes": f["bytes"], "sport": f["sport"],
                   "tos": self.tos, "after": list(f["after"])}
            if f.get("sports"):  # the agent picks among these connections (least outstanding bytes)
                cmd.update(sports=list(f["sports"]), lane=f["lane"])
            by_host.setdefault(f["src"], []).append(cmd)
        with self._lock:
            self.records.update({r.id: r for r in recs})
        return by_host

    def _write(self, host: str, cmd: dict) -> None:
        p = self.agents[host]
        with self._write_lock:  # the coordinator and the skipper both write: one whole line at a time
            p.stdin.write(json.dumps(cmd) + "\n")
            p.stdin.flush()

    def submit(self, flows: list[dict]) -> None:
        """A whole plan at once ({id, src, dst_ip, bytes, sport, after} per flow, optionally `sports` and
        `lane`: see traffic/agent.py): one `plan` per sending host. The agents run it by its dependencies
        (traffic/plan.py)."""
        for host, cmds in self._records(flows).items():
            self._write(host, {"cmd": "plan", "flows": cmds})

    def load(self, programs: list[dict], timeout: float) -> None:
        """Hand each rank its iteration (traffic/program.py; per program: `host`, `rank`, `tail` and `stages`,
        each stage with `op`, `compute` (wall s), `overlap`, `flows` as for `submit`, `expect`), and wait until
        every agent has read its part. `go` starts them."""
        by_host: dict[str, list[dict]] = {}
        for prog in programs:
            stages = []
            for st in prog["stages"]:
                cmds = self._records(st["flows"]).get(prog["host"], [])
                stages.append({"op": st["op"], "compute": st["compute"], "overlap": st["overlap"], "flows": cmds,
                               "expect": st["expect"]})
            by_host.setdefault(prog["host"], []).append({"rank": prog["rank"], "tail": prog["tail"],
                                                         "stages": stages})
        with self._control:
            self._loaded.clear()
            self.programs.clear()
        for host, progs in by_host.items():
            self._write(host, {"cmd": "program", "programs": progs})
        want = {h: len(p) for h, p in by_host.items()}
        with self._control:
            if not self._control.wait_for(lambda: self._loaded == want, timeout):
                raise TimeoutError(f"agents did not read their programs in {timeout:.0f} s: "
                                   f"{sorted(set(want) - set(self._loaded))[:5]}")
        self._running = list(by_host)

    def rank_key(self, rank: str) -> str:
        """A rank's name among every job's (each job has its own agents' port)."""
        return f"{self.port}/{rank}"

    def skip(self, total: float) -> None:
        """Tell every agent the run's clock now runs `total` wall seconds ahead of the machine's."""
        for host in list(self.agents):
            self._write(host, {"cmd": "skip", "skipped": total})

    def go(self, at: float) -> None:
        """Start the loaded programs at wall time `at`."""
        for host in self._running:
            self._write(host, {"cmd": "go", "at": at})

    def wait_programs(self, ranks: list[str], timeout: float) -> dict[str, dict]:
        """Each rank's `program` event (when it released each op, when it ended), once all have ended."""
        with self._control:
            if not self._control.wait_for(lambda: all(r in self.programs for r in ranks), timeout):
                raise TimeoutError(f"{sum(r not in self.programs for r in ranks)} rank(s) did not end their "
                                   f"iteration within {timeout:.0f} s of their last flow")
            out = {r: self.programs[r] for r in ranks}
        errors = [e["error"] for e in out.values() if "error" in e]
        if errors:
            raise RuntimeError(f"{len(errors)} rank(s) stopped, e.g. {errors[0]}")
        return out

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
