"""The one engine behind every builder: a tiered Clos with optional rails, dual-ToR,
dual-plane and a core tier.

HPN, DCN+, rail-optimized, spine-leaf and fat-tree are all points in this space
(their modules map their own parameters onto FabricParams), so the wiring rules,
the closed-form counts and the invariants live in one place.

Wiring:
- A host has `rails` NICs. With `rail_optimized`, NIC r of every host in a
  segment goes to the rail-r ToR (pair); otherwise all NICs go to the segment's
  one ToR (pair).
- With `dual_tor`, each NIC has two ports: port 0 to ToR-A, port 1 to ToR-B.
  With `dual_plane`, ToR-A is in plane 0 and ToR-B in plane 1; otherwise both
  are in plane 0.
- Each plane of a pod has `aggs_per_plane` aggregation switches; a ToR spreads
  its `tor_uplinks` evenly over the aggs of its own plane only.
- With more than one pod (or `core=True`), aggregation switch j of every pod
  connects to core group j of its plane (the fat-tree rule); a group holds
  agg_down / core_oversubscription cores, one link each.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, model_validator

from .errors import InputError
from .model import SHORT_PREFIX, Link, Node, Topology
from .server import ServerParams

MAX_HOSTS = 51_200  # 10.r.(i // 200).(i % 200 + 1): 256 third octets x 200
MAX_ELEMENTS = 1_000_000  # hosts + switches + links


class FabricParams(ServerParams):
    # Bounds: the address plan (topos/addressing.py: a /16 per rail, 51,200 hosts) and a pure model that
    # still fits in memory; the paper's pod (15 segments x 136 hosts x 8 rails) is well inside.
    pods: int = Field(1, ge=1, le=64, description="pods; more than one adds a core tier")
    segments_per_pod: int = Field(2, ge=1, le=1024, description="segments (one set of ToRs each) per pod")
    hosts_per_segment: int = Field(4, ge=1, le=2048, description="active hosts under a segment's ToRs")
    backup_hosts_per_segment: int = Field(0, ge=0, le=256, description="spare hosts wired to the same ToRs")
    rails: int = Field(2, ge=1, le=16, description="NICs per host")
    gpus_per_host: int | None = Field(None, ge=1, le=64, description="default: one GPU per NIC")
    rail_optimized: bool = Field(True, description="NIC r of every host on rail r's ToRs (else all on one ToR)")
    dual_tor: bool = Field(True, description="each NIC's two ports on two ToRs")
    dual_plane: bool = Field(True, description="the two ToRs of a pair in separate planes, each plane its own "
                                               "aggregation switches")
    aggs_per_plane: int = Field(4, ge=1, le=1024, description="aggregation switches per plane (and pod)")
    tor_uplinks: int = Field(4, ge=1, le=1024, description="uplinks per ToR, a multiple of aggs_per_plane")
    core: bool | None = Field(None, description="core tier; default: only when pods > 1")
    core_oversubscription: float = Field(1.0, ge=1.0, le=1024, description="aggregation down over up capacity "
                                         "toward the core")
    port_gbps: float = Field(200.0, gt=0, le=1e5, description="host NIC port rate")
    uplink_gbps: float = Field(400.0, gt=0, le=1e5, description="ToR-agg and agg-core rate")
    tor_capacity_gbps: float = Field(51200.0, gt=0, le=1e7, description="ToR switching capacity")
    agg_capacity_gbps: float = Field(51200.0, gt=0, le=1e7, description="aggregation switch capacity")

    @model_validator(mode="after")
    def _coherent(self) -> FabricParams:
        if self.dual_plane and not self.dual_tor:
            raise InputError("dual_plane needs dual_tor (a plane is one ToR of each pair)",
                             "set dual_tor=true or dual_plane=false", field="dual_plane", value=True)
        if self.tor_uplinks % self.aggs_per_plane:
            raise InputError(
                f"a ToR spreads its uplinks evenly over the {self.aggs_per_plane} aggregation switches of its plane",
                f"use a multiple of aggs_per_plane, e.g. tor_uplinks={self.aggs_per_plane}",
                field="tor_uplinks", value=self.tor_uplinks)
        s = shape(self)
        hosts = s.hosts
        if hosts > MAX_HOSTS:
            raise InputError(f"more than the address plan's {MAX_HOSTS}", "use fewer pods, segments or hosts",
                             field="hosts", value=hosts)
        if s.links + s.switches + hosts > MAX_ELEMENTS:
            raise InputError(f"with {s.switches} switches and {hosts} hosts, more than the {MAX_ELEMENTS} elements "
                             "a topology model may have", "use fewer pods or segments", field="links", value=s.links)
        return self


@dataclass(frozen=True)
class Shape:
    """Closed-form counts of a fabric, derived from its parameters alone."""

    planes: int
    tors_per_group: int  # 2 with dual-ToR, else 1
    rail_groups: int  # ToR groups per segment: rails when rail-optimized, else 1
    has_core: bool
    hosts: int
    tors: int
    aggs: int
    agg_down: int  # links per agg toward ToRs
    agg_up: int  # links per agg toward cores (0 without core)
    cores: int
    host_tor_links: int
    tor_agg_links: int
    agg_core_links: int
    tor_down: int  # ports per ToR toward hosts
    host_ports: int  # interfaces per host

    @property
    def switches(self) -> int:
        return self.tors + self.aggs + self.cores

    @property
    def links(self) -> int:
        return self.host_tor_links + self.tor_agg_links + self.agg_core_links


def shape(p: FabricParams, kind: str = "fabric") -> Shape:
    planes = 2 if p.dual_plane else 1
    t = 2 if p.dual_tor else 1
    g = p.rails if p.rail_optimized else 1
    has_core = p.core if p.core is not None else p.pods > 1
    hps = p.hosts_per_segment + p.backup_hosts_per_segment
    hosts = p.pods * p.segments_per_pod * hps
    tors = p.pods * p.segments_per_pod * g * t
    aggs = p.pods * planes * p.aggs_per_plane
    tors_per_plane_pod = p.segments_per_pod * g * t // planes
    agg_down = tors_per_plane_pod * (p.tor_uplinks // p.aggs_per_plane)
    agg_up = 0
    if has_core:
        agg_up = agg_down / p.core_oversubscription
        if agg_up != int(agg_up) or agg_up < 1:
            raise InputError(
                f"{kind}: an aggregation switch has {agg_down} downlinks, which a "
                f"{p.core_oversubscription:g}:1 core oversubscription does not divide into whole uplinks",
                f"choose a ratio that divides {agg_down}, e.g. core_oversubscription=1",
                field="core_oversubscription", value=p.core_oversubscription)
        agg_up = int(agg_up)
    cores = planes * p.aggs_per_plane * agg_up
    tor_down = hps * (p.rails // g)
    return Shape(
        planes=planes, tors_per_group=t, rail_groups=g, has_core=has_core, hosts=hosts, tors=tors, aggs=aggs,
        agg_down=agg_down, agg_up=agg_up, cores=cores,
        host_tor_links=hosts * p.rails * t, tor_agg_links=tors * p.tor_uplinks,
        agg_core_links=aggs * agg_up, tor_down=tor_down, host_ports=p.rails * t,
    )


def _check_capacity(p: FabricParams, s: Shape, kind: str) -> None:
    checks = (
        ("a ToR", f"{s.tor_down}x{p.port_gbps:g}G down + {p.tor_uplinks}x{p.uplink_gbps:g}G up",
         s.tor_down * p.port_gbps + p.tor_uplinks * p.uplink_gbps, "tor_capacity_gbps", p.tor_capacity_gbps,
         "fewer hosts_per_segment or tor_uplinks"),
        ("an aggregation switch", f"{s.agg_down} down + {s.agg_up} up x {p.uplink_gbps:g}G",
         (s.agg_down + s.agg_up) * p.uplink_gbps, "agg_capacity_gbps", p.agg_capacity_gbps,
         "fewer segments_per_pod or tor_uplinks, more aggs_per_plane"),
    )
    for who, ports, need, fld, capacity, fewer in checks:
        if need > capacity:
            raise InputError(f"{kind}: {who} needs {ports} = {need:g} Gbit/s, above its capacity",
                             f"{fewer}, or a larger {fld}", field=fld, value=capacity)


def build_fabric(p: FabricParams, kind: str, public_params: dict) -> Topology:
    s = shape(p, kind)
    _check_capacity(p, s, kind)
    topo = Topology(kind=kind, params=public_params)
    counters = {"host": 0, "tor": 0, "agg": 0, "core": 0}

    def node(name: str, role: str, **kw) -> Node:
        i = counters[role]
        counters[role] += 1
        short = SHORT_PREFIX[role] + str(i)
        return topo.add_node(Node(name=name, role=role, short=short, index=i, **kw))

    next_port: dict[str, int] = {}

    def port(n: str, base: int) -> int:
        v = next_port.get(n, base)
        next_port[n] = v + 1
        return v

    sides = "ab"
    gpus = p.gpus_per_host or p.rails
    hps = p.hosts_per_segment + p.backup_hosts_per_segment
    aggs: dict[tuple[int, int, int], Node] = {}
    for pod in range(p.pods):
        for plane in range(s.planes):
            for j in range(p.aggs_per_plane):
                aggs[pod, plane, j] = node(f"agg-p{pod}-pl{plane}-{j}", "agg", pod=pod, plane=plane)
    cores: dict[tuple[int, int, int], Node] = {}
    for plane in range(s.planes):
        for j in range(p.aggs_per_plane):
            for c in range(s.agg_up):
                cores[plane, j, c] = node(f"core-pl{plane}-g{j}-{c}", "core", plane=plane)

    for pod in range(p.pods):
        for seg in range(p.segments_per_pod):
            tors: dict[tuple[int, int], Node] = {}
            for g in range(s.rail_groups):
                for side in range(s.tors_per_group):
                    plane = side if p.dual_plane else 0
                    rail = g if p.rail_optimized else None
                    rname = f"-r{g}" if p.rail_optimized else ""
                    sname = f"-{sides[side]}" if p.dual_tor else ""
                    tors[g, side] = node(f"tor-p{pod}-s{seg}{rname}{sname}", "tor", pod=pod, segment=seg,
                                         rail=rail, plane=plane, side=side if p.dual_tor else None)
            for h in range(hps):
                host = node(f"h{counters['host']}", "host", pod=pod, segment=seg, nics=p.rails,
                            gpus=0 if h >= p.hosts_per_segment else gpus, backup=h >= p.hosts_per_segment)
                for nic in range(p.rails):
                    g = nic if p.rail_optimized else 0
                    for side in range(s.tors_per_group):
                        tor = tors[g, side]
                        topo.add_link(Link(host.name, nic * s.tors_per_group + side, tor.name, port(tor.name, 1),
                                           p.port_gbps, "host-tor", nic=nic, nic_port=side))
            # Uplinks after all downlinks, so a ToR's ports are 1..down then down+1..down+up.
            per_agg = p.tor_uplinks // p.aggs_per_plane
            for tor in tors.values():
                for j in range(p.aggs_per_plane):
                    agg = aggs[pod, tor.plane, j]
                    for _ in range(per_agg):
                        topo.add_link(Link(tor.name, port(tor.name, 1), agg.name, port(agg.name, 1),
                                           p.uplink_gbps, "tor-agg"))
    for (_pod, plane, j), agg in aggs.items():
        for c in range(s.agg_up):
            core = cores[plane, j, c]
            topo.add_link(Link(agg.name, port(agg.name, 1), core.name, port(core.name, 1), p.uplink_gbps, "agg-core"))

    topo.figures = _figures(p, s)
    check_invariants(topo, p, s)
    return topo


def _figures(p: FabricParams, s: Shape) -> dict:
    gpus = p.gpus_per_host or p.rails
    tor_down_bw = p.hosts_per_segment * (p.rails // s.rail_groups) * p.port_gbps
    tor_up_bw = p.tor_uplinks * p.uplink_gbps
    f = {
        "gpus_per_host": gpus,
        "gpus_per_segment": p.hosts_per_segment * gpus,
        "gpus_per_pod": p.hosts_per_segment * gpus * p.segments_per_pod,
        "gpus_total": p.hosts_per_segment * gpus * p.segments_per_pod * p.pods,
        "planes": s.planes,
        "tors": s.tors,
        "aggs": s.aggs,
        "aggs_per_plane_per_pod": p.aggs_per_plane,
        "cores": s.cores,
        "tor_ports": s.tor_down + p.tor_uplinks,
        "agg_ports": s.agg_down + s.agg_up,
        "tor_oversubscription": round(tor_down_bw / tor_up_bw, 4),
        "agg_oversubscription": round(s.agg_down / s.agg_up, 4) if s.agg_up else None,
    }
    return f


def check_invariants(topo: Topology, p: FabricParams, s: Shape) -> None:
    """Structural promises of the wiring; a failure here is a builder bug, not bad input."""
    nodes = topo.nodes
    problems: list[str] = []
    # Counts match the closed forms.
    c = topo.counts()
    for key, want in (("hosts", s.hosts), ("tors", s.tors), ("aggs", s.aggs), ("cores", s.cores),
                      ("links", s.links)):
        if c[key] != want:
            problems.append(f"{key}: built {c[key]}, formula {want}")
    ports = topo.port_counts()
    for n in topo.switches:
        want = {"tor": s.tor_down + p.tor_uplinks, "agg": s.agg_down + s.agg_up, "core": p.pods}[n.role]
        if ports[n.name] != want:
            problems.append(f"{n.name}: {ports[n.name]} ports, formula {want}")
    # Each NIC's two ports on two different ToRs (of two different planes when dual-plane).
    nic_tors: dict[tuple[str, int], list[Node]] = {}
    for l in topo.links:
        if l.kind == "host-tor":
            nic_tors.setdefault((l.a, l.nic), []).append(nodes[l.b])
        elif l.kind == "tor-agg" and nodes[l.a].plane != nodes[l.b].plane:
            problems.append(f"{l.a} (plane {nodes[l.a].plane}) links to {l.b} (plane {nodes[l.b].plane})")
        elif l.kind == "agg-core" and nodes[l.a].plane != nodes[l.b].plane:
            problems.append(f"{l.a} links to core {l.b} of another plane")
    for (h, nic), tors in nic_tors.items():
        if p.dual_tor and (len(tors) != 2 or tors[0].name == tors[1].name):
            problems.append(f"{h} nic{nic}: ports on {[t.name for t in tors]}, want two different ToRs")
        if p.dual_plane and len({t.plane for t in tors}) != 2:
            problems.append(f"{h} nic{nic}: both ports in plane {tors[0].plane}")
        if p.rail_optimized and any(t.rail != nic for t in tors):
            problems.append(f"{h} nic{nic}: lands on a ToR of another rail")
    if problems:
        raise AssertionError(f"{topo.kind}: invariant broken: " + "; ".join(problems[:5]))
