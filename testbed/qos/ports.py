"""The egress ports a QoS layer shapes: every link direction of a Topology, with its numbers (pure).

The network layer says where each port lives (`netns_of`: the namespace of a
host, None for the root namespace where every switch port is) and what it is
called (`ifname_of`); nothing here looks at Mininet or the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import TypeAdapter

from topos.errors import InputError
from topos.model import Topology

from .spec import PfcPlan, PortPlan, QosSpec, polled_reaction_ms, port_plan

# The PFC agent reads every switch queue each poll; its cost grows with the switch ports. 5 ms for the
# 8-host HPN's 128 switch ports took 24-27% of a core (docs/benchmarks.md, PFC bench); at 768 ports (64 hosts) a 5 ms
# period could not be kept (p99 231 ms, the machine CPU-bound), so the period grows with the ports (and a
# polling agent's headroom, sized from the period, with it).
BASE_POLL_MS, BASE_SWITCH_PORTS = 5.0, 128


def switch_ports(topo: Topology) -> int:
    return sum(2 if l.kind != "host-tor" else 1 for l in topo.links)  # switch ends of every link


def pfc_poll_ms(topo: Topology) -> float:
    return BASE_POLL_MS * max(1.0, switch_ports(topo) / BASE_SWITCH_PORTS)


def resolve(spec: QosSpec, topo: Topology, scale: float | None = None,
            kernel_reaction_ms: float | None = None) -> QosSpec:
    """The spec with numbers where it said auto: the PFC poll period from the fabric's size, the reaction the
    headroom covers (`kernel_reaction_ms` when the agent will act on kernel events, else its polling one), and
    `scale`. PFC's model auto is ingress where the agent will act on kernel events (`kernel_reaction_ms` given):
    the ingress accounts live in the kernel; on several servers, or polling, egress."""
    upd = {}
    pfc = {}
    if spec.pfc.model == "auto":
        pfc["model"] = "ingress" if kernel_reaction_ms is not None and spec.pfc.detect != "poll" else "egress"
    if spec.pfc.poll_ms == "auto":
        pfc["poll_ms"] = pfc_poll_ms(topo)
    if spec.pfc.reaction_ms == "auto":
        poll_ms = pfc.get("poll_ms", spec.pfc.poll_ms)
        pfc["reaction_ms"] = (kernel_reaction_ms if kernel_reaction_ms is not None and spec.pfc.detect != "poll"
                              else polled_reaction_ms(poll_ms))
    if pfc:
        upd["pfc"] = spec.pfc.model_copy(update=pfc)
    if scale is not None:
        upd["scale"] = scale
    return spec.model_copy(update=upd) if upd else spec


@dataclass
class Port:
    """One shaped egress port."""

    node: str  # topology node that sends on it
    port: int  # its port number there
    role: str  # of `node`: host, tor, agg, core
    peer: str  # node at the other end
    peer_port: int
    ifname: str
    peer_ifname: str  # where a PAUSE frame toward this port's sender leaves
    netns: str | None  # None: root namespace; else /proc/PID/ns/net of a host
    plan: PortPlan
    ifindex: int = 0  # filled in when the shaper finds the interface

    @property
    def key(self) -> str:
        return f"{self.node}:{self.port}"

    @property
    def is_host(self) -> bool:
        return self.role == "host"

    def queue_limit(self, priority: int | None, pfc: bool) -> int:
        """The bytes the queue of a lossless `priority` (None: a lossy class) holds at this port."""
        if priority is None:
            return self.plan.buffer_bytes
        return HOST_LOSSLESS_LIMIT if self.is_host and pfc else self.plan.lossless[priority].limit


def egress_ports(topo: Topology, spec: QosSpec, netns_of: Callable[[str], str | None],
                 ifname_of: Callable[[str, int], str], crossing: frozenset[str] = frozenset()) -> list[Port]:
    """Both directions of every link; a device's other links are the ingress its PFC headroom must absorb,
    the `crossing` ones (link names: between servers) with the pause message's delay on top."""
    total = {n: sum(l.rate_gbps for l in topo.links_of(n)) for n in topo.nodes}
    remote = {n: sum(l.rate_gbps for l in topo.links_of(n) if l.name in crossing) for n in topo.nodes}
    links = {n: sum(1 for _ in topo.links_of(n)) for n in topo.nodes}
    out = []
    for l in topo.links:
        for node, port, peer, peer_port in ((l.a, l.a_port, l.b, l.b_port), (l.b, l.b_port, l.a, l.a_port)):
            role = topo.nodes[node].role
            out.append(Port(node, port, role, peer, peer_port, ifname_of(node, port), ifname_of(peer, peer_port),
                            netns_of(node) if role == "host" else None,
                            port_plan(l.rate_gbps, spec, total[node] - l.rate_gbps,
                                      remote[node] - (l.rate_gbps if l.name in crossing else 0.0),
                                      links[node] - 1)))
    return out


FIFO_LIMIT_MAX = 0xFFFFFFFF  # a bfifo's limit is a 32-bit count of bytes
HOST_LOSSLESS_LIMIT = 16 << 20  # a host does not drop its own lossless traffic: its "queue" is memory


def require_queues_fit(ports: list[Port], spec: QosSpec) -> None:
    """Every queue of these ports within the kernel's 32-bit FIFO limit, or an InputError naming the deepest."""
    deepest, p = max(((p.queue_limit(q, spec.pfc.enabled), p) for p in ports for q in [None, *p.plan.lossless]),
                     key=lambda x: x[0])
    if deepest > FIFO_LIMIT_MAX:
        need = spec.scale * deepest / FIFO_LIMIT_MAX
        raise InputError(f"port {p.key} ({p.plan.rate_bps / 1e9:g} Gbit/s emulated) needs a queue of {deepest:,} "
                         "bytes, past the kernel's 32-bit FIFO limit",
                         f"a larger scale (at least {need:,.0f}), or scale auto", field="qos.scale", value=spec.scale)


def headroom_lines(ports: list[Port], spec: QosSpec) -> tuple[list[str], list[str]]:
    """The lossless headroom as a run states it before it starts: per tier (the sending device's role) the
    least and most bytes and the least time of full ingress they take; and the ports whose headroom is short of
    what their reaction and ingress call for (a given `headroom_bytes`), which may drop lossless frames."""
    if not spec.pfc.enabled:
        return [], []
    react_ms = spec.pfc.reaction_s() * 1000
    tiers: dict[str, list[PfcPlan]] = {}
    short = []
    for p in ports:
        if p.is_host:
            continue  # a host's queue pauses nobody: no headroom is used
        for prio, q in p.plan.lossless.items():
            tiers.setdefault(p.role, []).append(q)
            if q.headroom < q.needed:
                short.append((queue_key(p.key, prio), q))
    summary = [f"PFC headroom at {role} ports: {min(q.headroom for q in qs):,}-{max(q.headroom for q in qs):,} B, "
               f"covering at least {min(q.covers_ms() or 0.0 for q in qs):.2f} ms of full ingress (a pause acts in "
               f"{react_ms:.2f} ms)" for role, qs in sorted(tiers.items())]
    warnings = [f"{key} has {q.headroom:,} B of headroom, covering {q.covers_ms() or 0.0:.2f} ms of its ingress where "
                f"a pause takes {react_ms:.2f} ms to act: lossless frames may drop (fix: headroom_bytes of at least "
                f"{q.needed:,}, or leave it out)" for key, q in short[:3]]
    if len(short) > 3:
        warnings.append(f"... and {len(short) - 3} more lossless queues short of headroom")
    return summary, warnings


def deepest_wait_s(ports: list[Port], spec: QosSpec) -> float:
    """The longest a lossless frame can wait in one switch queue of the emulated fabric, in wall seconds: the
    deepest lossless queue (XOFF and headroom; under `model: ingress` its switch's buffer) through its port's
    rate. The emulator's buffers are floored at what its own reaction needs, so this is seconds where a real
    switch's is a millisecond: a transport's retry timer shorter than it would take a queued frame for lost
    (traffic/transports: roce)."""
    if not spec.pfc.enabled:
        return 0.0
    return max((p.queue_limit(c.priority, True) * 8 / p.plan.rate_bps for p in ports if not p.is_host
                for c in spec.lossless), default=0.0)


def queue_key(port: str, priority: int) -> str:
    """How a (port, priority) is named in reports: `tor-p0-s0-r0-a:5/p3`."""
    return f"{port}/p{priority}"


_PORT_LIST = TypeAdapter(list[Port])


def ports_to_json(ports: list[Port]) -> list[dict]:
    """Ports as JSON-ready dicts (a server agent shapes its share of them from these)."""
    return _PORT_LIST.dump_python(ports, mode="json")


def ports_from_json(data: list[dict]) -> list[Port]:
    return _PORT_LIST.validate_python(data)
