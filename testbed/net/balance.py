"""How a run's load spread: over the two ToR ports facing each NIC, and over the fabric's links (pure).

Reads a run record's counters (runner._queue_records): the bytes each ToR sent
down to each host port with that port's deepest lossless queue, and the bytes
every switch-to-switch link carried each way. These are the quantities of HPN's
hash-polarization figures: the imbalance between a NIC's two ports (Fig. 13),
the queue at the busier one (Fig. 14), and how many aggregation-to-ToR links
the traffic used at all (polarization leaves some idle).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ACTIVE = 0.05  # a link "carries traffic" above this share of the busiest link of its kind and direction
IDLE = 0.05  # a NIC port under this share of its NIC's bytes is idle: TCP's acknowledgements alone are 1-3%


@dataclass(frozen=True)
class Counters:
    """The counters of one run these figures read (results.json's keys of the same names)."""

    host_port_rx: dict[str, int] = field(default_factory=dict)  # bytes each host port received, HOST:PORT
    host_port_tor: dict[str, str] = field(default_factory=dict)  # the ToR port each host port is wired to
    fabric_links: list[dict[str, Any]] = field(default_factory=list)  # {from, to, kind, bytes} per direction
    pfc: dict[str, Any] | None = None  # the PFC agent's report: queues' maxima and samples

    @classmethod
    def of(cls, rec: dict) -> Counters:
        """From a run as results.json holds it (what a script or a lab reads)."""
        return cls(rec.get("host_port_rx") or {}, rec.get("host_port_tor") or {}, rec.get("fabric_links") or [],
                   rec.get("pfc"))


@dataclass(frozen=True)
class NicBalance:
    nic: str  # host:nicN
    port_bytes: tuple[int, int]
    deepest_queue: int  # bytes, the larger of its two ToR ports' lossless queue maxima

    @property
    def imbalance(self) -> float:
        """More-loaded over less-loaded port; inf when one port was idle (a ratio to a port that carried only
        acknowledgements, 97,670x once, says nothing about hashing)."""
        lo, hi = sorted(self.port_bytes)
        return hi / lo if lo > IDLE * (lo + hi) else float("inf")


def nic_balance(rec: Counters, min_bytes: int = 1) -> list[NicBalance]:
    """Every dual-homed NIC that received at least `min_bytes`, busiest first."""
    per_nic: dict[str, dict[int, int]] = {}
    by_port: dict[str, int] = {}  # a port's deepest lossless queue, any priority (keys `node:port/p3`)
    for key, q in (rec.pfc or {}).get("queues", {}).items():
        port = key.split("/")[0]
        by_port[port] = max(by_port.get(port, 0), q["max_backlog"])
    deepest: dict[str, int] = {}
    for port, b in rec.host_port_rx.items():
        host, p = port.split(":")
        nic = f"{host}:nic{int(p) // 2}"
        per_nic.setdefault(nic, {})[int(p)] = b
        key = rec.host_port_tor.get(port)
        deepest[nic] = max(deepest.get(nic, 0), by_port.get(key, 0))
    out = [NicBalance(nic, tuple(v for _p, v in sorted(ports.items())), deepest[nic])
           for nic, ports in per_nic.items() if len(ports) == 2 and sum(ports.values()) >= min_bytes]
    return sorted(out, key=lambda n: -sum(n.port_bytes))


@dataclass(frozen=True)
class QueueOverTime:
    """The deepest NIC-facing ToR port's lossless backlog at each of the PFC agent's samples (bytes)."""
    samples: int  # samples with anything queued anywhere: the run's traffic, not the idle start and end
    p50: int
    p90: int
    peak: int


def nic_port_queue(rec: Counters) -> QueueOverTime | None:
    """Over the run: how deep the queue at the ToR ports facing the NICs stood, sample by sample (a peak alone
    is the connections' first window, arriving at once; HPN Fig. 14 is about the queue that stands). None when
    the run has no samples (PFC off: no agent watched the queues)."""
    ports = set(rec.host_port_tor.values())
    samples = [s["backlog"] for s in (rec.pfc or {}).get("samples") or [] if s["backlog"]]
    if not ports or not samples:
        return None
    deepest = sorted(max((b for k, b in s.items() if k.split("/")[0] in ports), default=0) for s in samples)
    at = lambda f: deepest[min(len(deepest) - 1, int(f * len(deepest)))]  # noqa: E731
    return QueueOverTime(len(deepest), at(0.5), at(0.9), deepest[-1])


def links_used(rec: Counters, from_role: str = "agg", to_role: str = "tor") -> tuple[int, int]:
    """(links that carried traffic, links into switches that received any from that tier), one direction:
    from `from_role` switches to `to_role` switches, by name prefix."""
    links = [l for l in rec.fabric_links if l["from"].startswith(from_role) and l["to"].startswith(to_role)]
    busiest = max((l["bytes"] for l in links), default=0)
    if not busiest:
        return 0, 0
    fed = {l["to"] for l in links if l["bytes"] >= ACTIVE * busiest}
    into_fed = [l for l in links if l["to"] in fed]
    return sum(1 for l in into_fed if l["bytes"] >= ACTIVE * busiest), len(into_fed)


def ratio_text(x: float) -> str:
    """An imbalance as the summaries print it."""
    return "one port idle" if x == float("inf") else f"{x:.2f}"


def describe(rec: Counters) -> str:
    """One run's balance in a line: the worst NIC's imbalance, NICs >= 2x, deepest NIC-port queue, agg links."""
    nics = nic_balance(rec, min_bytes=1 << 20)
    if not nics:
        return ""
    worst = max(n.imbalance for n in nics)
    used, total = links_used(rec)
    return (f"worst NIC {ratio_text(worst)}{'' if worst == float('inf') else 'x'}, "
            f"{sum(n.imbalance >= 2 for n in nics)}/{len(nics)} NICs >= 2x, "
            f"queue {max(n.deepest_queue for n in nics) / 1e3:.0f} KB, agg-to-ToR links {used}/{total}")


def cross_segment_bytes(rec: Counters) -> int:
    """Bytes the ToRs sent up to the aggregation tier: what left the segments (OVS's counters in a run's
    record)."""
    return sum(l["bytes"] for l in rec.fabric_links
               if l["kind"] == "tor-agg" and l["from"].startswith("tor"))
