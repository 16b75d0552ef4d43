"""Measurements on a running Network: paced probe streams, per-link byte counts, iperf3 flows,
shaped rates, and the runner's sampler of CPU idle and offered load.

Shared by the runner, the emulation tests and the benchmarks, so all measure the same way.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testbed.net.network import Network
from testbed.qos.shaper import ROOT, lossless_leaf
from testbed.system.poll import readable
from topos.addressing import nic_address
from traffic.timebase import Clock, stamp

from .ovs_backlog import RxBacklog

log = logging.getLogger(__name__)


@dataclass
class StreamSpec:
    src: str
    dst: str  # host name
    nic: int = 0
    sport: int = 5000
    dport: int = 7000
    pps: float = 1000
    duration: float = 3.0
    size: int = 200
    stream: int = 0
    tos: int = 0

    def dst_ip(self, net: Network) -> str:
        return nic_address(net.topo.nodes[self.dst], self.nic).ip


READY_S = 120.0  # a receiver's shell on another server starts over SSH: seconds on a TCG VM


def start_receiver(net: Network, host: str, port: int, duration: float, gap_ms: float = 5) -> subprocess.Popen:
    """A probe stream receiver on `host`, returned once its socket is bound. Its report is on its stdout, so a
    host on another server works the same. A fixed wait is a guess: a remote receiver's shell over SSH takes
    seconds under TCG, and the packets sent before it binds are lost."""
    p = net.python(host, "traffic.udpstream", "recv", "--port", str(port), "--duration", str(duration),
                   "--gap-ms", str(gap_ms), "--ready", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return _when_ready(p, f"the stream receiver on {host} port {port}")


def _when_ready(p: subprocess.Popen, what: str) -> subprocess.Popen:
    """`p` once it said "ready" on stderr, or an error naming `what` after READY_S."""
    said = p.stderr.readline() if readable([p.stderr], READY_S) else ""
    if said.strip() != "ready":
        p.kill()
        _, err = p.communicate(timeout=10)
        raise RuntimeError(f"{what} did not start within {READY_S:g} s: {(said + err).strip()[-300:] or 'no output'}")
    return p


def receiver_report(p: subprocess.Popen, timeout: float) -> dict:
    out, err = p.communicate(timeout=timeout)
    if p.returncode:
        raise RuntimeError(f"a stream receiver failed (exit {p.returncode}): {err.strip()[-300:]}")
    return json.loads(out)


def run_streams(net: Network, specs: list[StreamSpec], actions: list[tuple[float, Callable[[], None]]] = (),
                tail: float = 1.0, gap_ms: float = 5) -> dict:
    """Run paced UDP streams (one receiver per destination port); fire `actions` at their offsets.

    Returns the receivers' reports keyed by "dst:dport", plus the wall time of each action.
    """
    duration = max(s.duration for s in specs)
    # every sender bound before any sends: an incast whose senders started seconds apart (a loaded VM) was
    # no incast
    senders = [net.python(s.src, "traffic.udpstream", "send", "--dst", s.dst_ip(net), "--dport", str(s.dport),
                          "--sport", str(s.sport), "--pps", str(s.pps), "--duration", str(s.duration),
                          "--size", str(s.size), "--stream", str(s.stream), "--tos", str(s.tos), "--wait-go",
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for s in specs]
    receivers: dict[str, subprocess.Popen] = {}
    try:
        for s, p in zip(specs, senders, strict=True):
            _when_ready(p, f"the stream sender on {s.src} port {s.sport}")
        # then the receivers: one waits `duration` for its first packet, and six senders took longer to start
        for s in specs:
            key = f"{s.dst}:{s.dport}"
            if key not in receivers:
                receivers[key] = start_receiver(net, s.dst, s.dport, duration + tail + 0.5, gap_ms)
    except RuntimeError:
        for p in senders + list(receivers.values()):
            p.kill()
        raise
    for p in senders:
        p.stdin.write("go\n")
        p.stdin.flush()  # communicate() closes it below
    start = time.time()
    fired = []
    for offset, action in sorted(actions, key=lambda a: a[0]):
        delay = start + offset - time.time()
        if delay > 0:
            time.sleep(delay)
        fired.append(time.time())
        action()
    sent = []
    for p in senders:
        out, _ = p.communicate(timeout=duration + 120)
        sent.append(json.loads(out) if out else None)
    result = {"start": start, "actions_at": fired, "senders": sent,
              "receivers": {key: receiver_report(p, duration + tail + 120) for key, p in receivers.items()}}
    return result


@dataclass(frozen=True)
class Incast:
    """What a paced UDP incast delivered: frames sent, frames received, drops in every lossless queue."""

    sent: int
    received: int
    lossless_drops: int


def udp_incast(net: Network, receiver: str, senders: list[str], seconds: float, tos: int, size: int = 1000,
               load: float = 0.96) -> Incast:
    """Every sender streams to `receiver`'s NIC 0 at `load` of its port's rate for `seconds` (UDP: no congestion
    control, as RoCE without DCQCN), one stream each. The receiver stays until the backlog into its two ports
    could have drained, and while frames still come. Drops: every lossless queue's, since QoS started."""
    rate = net.qos.ports[f"{senders[0]}:0"].plan.rate_bps
    specs = [StreamSpec(src=h, dst=receiver, sport=5000 + i, dport=7000, pps=load * rate / 8 / size,
                        duration=seconds, size=size, stream=i, tos=tos) for i, h in enumerate(senders)]
    drain_s = len(senders) * load * seconds / 2
    r = run_streams(net, specs, tail=1.5 * drain_s + 2)
    streams = r["receivers"][f"{receiver}:7000"]["streams"].values()
    drops = sum(q[0].drops for c in net.qos_spec.lossless for q in net.qos.stats(lossless_leaf(c.priority)).values()
                if q)
    return Incast(sent=sum(s["sent"] for s in r["senders"]), received=sum(s["received"] for s in streams),
                  lossless_drops=drops)


def port_delta(before: dict, after: dict, field: str = "tx_bytes") -> dict[tuple[str, int], int]:
    """Per (switch, port) growth of a counter between two Network.port_counters() readings."""
    return {(sw, port): after[sw][port][field] - before[sw].get(port, {}).get(field, 0)
            for sw in after for port in after[sw]}


def uplinks_used(net: Network, delta: dict[tuple[str, int], int], min_bytes: int) -> set[str]:
    """ToR-to-aggregation links (by name) that carried at least `min_bytes` upward."""
    used = set()
    for l in net.topo.links:
        if l.kind == "tor-agg" and delta.get((l.a, l.a_port), 0) >= min_bytes:
            used.add(l.name)
    return used


def host_links_used(net: Network, rx: dict[tuple[str, int], int], host: str, min_bytes: int) -> set[str]:
    """Host-to-ToR links of `host` whose ToR port received at least `min_bytes` (per-port rx deltas)."""
    return {l.name for l in net.topo.links_of(host) if l.kind == "host-tor" and rx.get((l.b, l.b_port), 0) >= min_bytes}


def gap_after(report: dict, t: float, stream: int = 0) -> float:
    """Longest silence of a stream that started at or after time t - 50 ms (the failure), in ms."""
    return max((g["ms"] for g in report["gaps"] if g["stream"] == stream and g["start"] + g["ms"] / 1000 >= t),
               default=0.0)


def iperf(net: Network, pairs: list[tuple[str, str]], duration: float, tos: int | None = None, nic: int = 0,
          base_port: int = 5201, during: Callable[[], None] | None = None, cc: str | None = None,
          sports: list[int] | None = None) -> list[dict]:
    """TCP flows with iperf3, one server per flow; returns per flow bytes received, seconds, retransmits, and
    the receiver's per-second intervals as (start, end, bytes).

    `during` runs while the flows are in steady state (after 1 s), e.g. to sample counters. `cc`: the TCP
    congestion control of both ends (iperf3 -C; its server takes the client's). `sports`: each flow's source
    port (iperf3 --cport; a pinned one chooses the sender's NIC port, topos/addressing.py), else the kernel's.
    """
    servers = [net.popen(dst, ["iperf3", "-s", "-1", "-J", "-p", str(base_port + i)], stdout=subprocess.PIPE)
               for i, (_src, dst) in enumerate(pairs)]
    time.sleep(0.5)
    extra = (["-S", str(tos)] if tos is not None else []) + (["-C", cc] if cc else [])
    clients = [net.popen(src, ["iperf3", "-c", nic_address(net.topo.nodes[dst], nic).ip, "-p", str(base_port + i),
                               "-t", str(duration), "-J", *extra, *(["--cport", str(sports[i])] if sports else [])],
                         stdout=subprocess.PIPE)
               for i, (src, dst) in enumerate(pairs)]
    if during is not None:
        time.sleep(1.0)
        during()
    out = []
    for c, s in zip(clients, servers, strict=True):
        end = json.loads(c.communicate(timeout=duration + 30)[0])["end"]
        received = json.loads(s.communicate(timeout=10)[0])["intervals"]
        out.append({"bytes": end["sum_received"]["bytes"], "seconds": end["sum_received"]["seconds"],
                    "retransmits": end["sum_sent"].get("retransmits", 0),
                    "intervals": [(i["sum"]["start"], i["sum"]["end"], i["sum"]["bytes"]) for i in received]})
    return out


def goodput_between(flow: dict, start: float, end: float) -> float:
    """Bits/s the receiver got in the whole seconds of [start, end] after the flow began (iperf's intervals)."""
    inside = [(a, b, n) for a, b, n in flow["intervals"] if a >= start - 0.01 and b <= end + 0.01]
    return sum(n for _a, _b, n in inside) * 8 / sum(b - a for a, b, _n in inside)


def shaped_rate(net: Network, keys: tuple[str, ...], window: float, result: dict) -> None:
    """Bits/s sent by the busiest of these shaped ports over `window` seconds, into result["bps"]."""
    t0, a = time.monotonic(), net.qos.stats(ROOT)
    time.sleep(window)
    t1, b = time.monotonic(), net.qos.stats(ROOT)
    result["bps"] = max(b[k][0].bytes - a[k][0].bytes for k in keys) * 8 / (t1 - t0)


def receiver_bottleneck(net: Network, receiver: str, before: dict, after: dict, min_bytes: int = 1_000_000) -> float:
    """The rate of a receiver's ports whose ToR egress carried traffic (hashing may pick only one plane).

    `before`/`after` are lossless-leaf stats from Qos.stats().
    """
    return sum(net.qos.ports[f"{l.b}:{l.b_port}"].plan.rate_bps for l in net.topo.links_of(receiver)
               if after[f"{l.b}:{l.b_port}"][0].bytes - before[f"{l.b}:{l.b_port}"][0].bytes > min_bytes)


def cpu_times(line: str | None = None) -> tuple[int, int, int]:
    """(idle + iowait, steal, total) jiffies of the whole machine, from the first line of /proc/stat (this
    machine's, or `line` as read on another server)."""
    if line is None:
        with open("/proc/stat") as f:
            line = f.readline()
    vals = [int(x) for x in line.split()[1:]]
    return vals[3] + vals[4], vals[7], sum(vals[:8])  # guest time is already inside user


MIN_SPAN_S = 0.05  # the last row at a stop needs this much time since the one before to mean anything
STOP_WAIT_S = 15.0  # a sample reads every server's CPU over SSH in a cluster: seconds on a TCG VM
OVS_PIDFILE = Path(os.environ.get("OVS_RUNDIR", "/var/run/openvswitch")) / "ovs-vswitchd.pid"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def ovs_thread_ticks() -> dict[int, int]:
    """CPU ticks (user + system) of each ovs-vswitchd thread; {} when it cannot be read.

    Userspace OVS polls the ports of the netdev datapath from its main thread:
    that one thread, not the machine, is the first thing to saturate.
    """
    try:
        pid = int(OVS_PIDFILE.read_text())
        out = {}
        for task in Path(f"/proc/{pid}/task").iterdir():
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(task.name)] = int(fields[11]) + int(fields[12])
        return out
    except (OSError, ValueError):
        return {}


def _rx_backlog(net: Network) -> RxBacklog | None:
    """A reader of OVS's receive sockets for the switch ports in this machine's root namespace, or None when
    ovs-vswitchd's descriptors cannot be read (the rows then carry no peak: not known)."""
    if net.qos is None:
        return None
    try:
        pid = int(OVS_PIDFILE.read_text())
        here = net.qos.local_ports() if net.cluster is not None else net.qos.ports.values()  # this server's
        ports = {p.ifindex: p.key for p in here if not p.is_host and p.netns is None}
        return RxBacklog(pid, ports)
    except (OSError, ValueError) as exc:
        log.info("OVS's receive backlog not read: %s", exc)
        return None


class Sampler:
    """Every `period` s: CPU idle and steal shares, the busiest OVS thread's share of a core, and the bytes
    all host NICs sent (the offered load). Over several servers, idle is the least and steal the most of any
    server (each row also keeps every server's idle): one server out of CPU is enough to bend the rates."""

    def __init__(self, net: Network, period: float = 0.5, clock: Clock | None = None):
        self.net, self.period = net, period  # period: wall seconds (it samples this machine)
        self.clock = clock or Clock()  # rows are stamped in the run's virtual time, with the wall time beside
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None  # why sampling ended early, if it did
        self.here = net.cluster.master if net.cluster is not None else ""  # this server's name in a cluster
        self.others = dict(net.cluster.agents) if net.cluster is not None else {}  # server -> its agent
        self.backlog = _rx_backlog(net)  # OVS's receive sockets here, read more often than the rows

    def _cpu(self) -> dict[str, tuple[int, int, int]]:
        out = {self.here: cpu_times()}
        for server, agent in self.others.items():
            rc, text = agent.sh("head -n1 /proc/stat", timeout=10)
            if rc == 0:
                out[server] = cpu_times(text)
        return out

    def _host_bytes(self) -> int:
        stats = self.net.qos.stats(ROOT, [p for p in self.net.qos.ports.values() if p.is_host])
        return sum(q[0].bytes for q in stats.values() if q)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hpnlab-sampler", daemon=True)
        self._thread.start()
        if self.backlog is not None:
            self.backlog.start()

    def _run(self) -> None:
        """Until stopped; one last row at the stop so a run shorter than a period still has one. An error ends
        the sampling but is kept: the verdict then says "unknown" instead of judging a part of the run."""
        try:
            cpu0, ovs0 = self._cpu(), ovs_thread_ticks()
            b0, t_prev = self._host_bytes(), time.time()
            while True:
                stopped = self._stop.wait(self.period)
                if stopped and time.time() - t_prev < MIN_SPAN_S:
                    return
                cpu, ovs = self._cpu(), ovs_thread_ticks()
                b, t = self._host_bytes(), time.time()
                self.rows.append(self._row(cpu0, cpu, ovs0, ovs, (b - b0) * 8, t_prev, t))
                cpu0, ovs0, b0, t_prev = cpu, ovs, b, t
                if stopped:
                    return
        except Exception as exc:  # noqa: BLE001 - whatever it was, the verdict must hear of it
            self.error = f"{type(exc).__name__}: {exc}"[:300]
            log.exception("the CPU sampler stopped")

    def _row(self, cpu0: dict, cpu: dict, ovs0: dict, ovs: dict, bits: int, t_prev: float, t: float) -> dict:
        shares = {}  # server -> (idle, steal) shares since the last sample
        for server, (idle, steal, tot) in cpu.items():
            if server in cpu0:
                idle0, steal0, tot0 = cpu0[server]
                span = max(1, tot - tot0)
                shares[server] = (round((idle - idle0) / span, 4), round((steal - steal0) / span, 4))
        busiest = max((ovs[k] - ovs0.get(k, ovs[k]) for k in ovs), default=0) / CLK_TCK / (t - t_prev)
        wall_t = t - self.clock.t0
        row = {"t": stamp(self.clock.at(t + self.clock.skipped)), "wall_t": round(wall_t, 3),
               "cpu_idle": min(i for i, _ in shares.values()), "steal": max(s for _, s in shares.values()),
               "ovs_thread": round(busiest, 4), "host_tx_bps": round(bits / (t - t_prev))}
        if self.others:
            row["cpu_idle_by_server"] = {server: i for server, (i, _) in shares.items()}
        if (peak := self.backlog.take() if self.backlog is not None else None) is not None:
            row["ovs_rx_peak"], row["ovs_rx_port"] = peak.bytes, peak.port
        return row

    def stop(self) -> None:
        self._stop.set()
        if self.backlog is not None:
            self.backlog.stop()
        if self._thread is not None:
            self._thread.join(timeout=STOP_WAIT_S)
            if self._thread.is_alive() and self.error is None:
                self.error = f"still sampling {STOP_WAIT_S:g} s after the stop"
