"""What a run's counters say, read as it ends: drops per class, the bytes every port and link carried (from the
shapers and Open vSwitch), ECN marks, and what the hosts' transports counted (TCP, the RoCE NICs, the agents'
CPU)."""

from __future__ import annotations

from testbed.net.network import Network
from testbed.qos.shaper import ROOT, leaf_handles
from topos.model import Topology
from traffic.tcpstats import TCP_COUNTERS

from .measure import port_delta


def queue_records(net: Network, counters_before: dict) -> dict:
    """Drops per class anywhere (lossless priorities summed; the PFC report has each); the bytes each ToR sent
    down to each host port and that port's queue (a NIC's two-ToR balance); the bytes every switch-to-switch
    link carried each way, from OVS's counters."""
    drops = {"high": 0, "lossless": 0, "default": 0, "unread": 0}  # unread: ports whose counters were gone
    for cls, handle in leaf_handles(net.qos.spec).items():
        stats = net.qos.stats(handle).values()
        drops["lossless" if cls.startswith("lossless") else cls] += sum(q[0].drops for q in stats if q)
        drops["unread"] += sum(1 for q in stats if not q)
    down = [p for p in net.qos.ports.values() if not p.is_host and net.topo.nodes[p.peer].role == "host"]
    stats = net.qos.stats(ROOT, down).values()
    rx = {f"{p.peer}:{p.peer_port}": q[0].bytes for p, q in zip(down, stats, strict=True) if q}
    after = net.port_counters()
    delta = port_delta(counters_before, after)
    # frames Open vSwitch itself failed to send or take in: the emulator's loss, not a shaper's
    drops["switch"] = sum(sum(port_delta(counters_before, after, f).values()) for f in ("tx_dropped", "rx_dropped"))
    fabric = [{"from": a, "to": b, "kind": l.kind, "bytes": delta.get((a, port), 0)}
              for l in net.topo.links if l.kind != "host-tor"
              for a, port, b in ((l.a, l.a_port, l.b), (l.b, l.b_port, l.a))]
    return {"drops": drops, "host_port_rx": rx, "host_port_tor": {f"{p.peer}:{p.peer_port}": p.key for p in down},
            "fabric_links": fabric, "links": link_load(net.topo, counters_before, after)}


def link_load(topo: Topology, before: dict, after: dict) -> list[dict]:
    """Bytes and frames every link carried each way over the run, from OVS's counters at the switch end (a host's
    sending is its ToR port's intake), with the link's real rate: what the verdict weighs a job's time against."""
    fields = [f"{side}_{k}" for side in ("tx", "rx") for k in ("bytes", "packets")]
    delta = {f: port_delta(before, after, f) for f in fields}
    out = []
    for l in topo.links:
        for a, a_port, b, b_port in ((l.a, l.a_port, l.b, l.b_port), (l.b, l.b_port, l.a, l.a_port)):
            sw, port, side = (a, a_port, "tx") if a in after else (b, b_port, "rx")
            count = {k: delta[f"{side}_{k}"].get((sw, port), 0) for k in ("bytes", "packets")}
            out.append({"from": a, "to": b, **count, "gbps": l.rate_gbps})
    return out


def ecn_record(net: Network) -> dict | None:
    """CE marks per queue and, with DCTCP or DCQCN, what the senders' control did (None without ECN)."""
    marks = net.ecn_marks()
    if marks is None:
        return None
    return {"marks": marks, "total": sum(marks.values()), "cc": net.cc.stats() if net.cc else None}


def transport_records(transports: list) -> dict:
    """The stopped transports' counters summed over hosts and jobs: TCP's (per host namespace, counting since it
    was made: the last read), the RoCE NICs' with the QPs' retry timer (every job's is the same; wall ms), and
    the CPU seconds the agents used. Each key only where a transport reported it."""
    by_host: dict[str, dict[str, int]] = {}
    nics: list[dict[str, int]] = []
    cpu: list[float] = []
    for tr in transports:
        by_host.update(getattr(tr, "tcp", {}))
        nics += getattr(tr, "roce", {}).values()  # per job and host: each job's agents have their own NIC
        cpu += getattr(tr, "cpu_s", {}).values()
    d: dict = {"tcp": {k: sum(c.get(k, 0) for c in by_host.values()) for k in TCP_COUNTERS} if by_host else None}
    if nics:
        d["roce"] = {k: sum(c[k] for c in nics) for k in nics[0]} | {
            "retry_timer_ms": round(transports[0].rto_s * 1000)}
    if cpu:
        d["agents_cpu_s"] = round(sum(cpu), 3)
    return d
