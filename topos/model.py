"""The common Topology model every builder returns.

Nodes carry their role (host, tor, agg, core) and place (plane, rail, segment,
pod); links carry both ends' port numbers and a rate. The model is plain data:
the network layer starts it, the controller reads its JSON, the drawings and
the routing code walk it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Role = Literal["host", "tor", "agg", "core"]
ROLES: tuple[Role, ...] = ("host", "tor", "agg", "core")
# Short prefixes keep Mininet names (and so interface names, IFNAMSIZ=16) short.
SHORT_PREFIX = {"host": "h", "tor": "t", "agg": "a", "core": "c"}
DPID_ROLE_CODE = {"tor": 1, "agg": 2, "core": 3}


@dataclass(frozen=True)
class Node:
    name: str  # human name, e.g. "tor-p0-s1-r0-a"
    role: Role
    short: str  # Mininet name, e.g. "t5"
    index: int  # index within its role, 0-based, dense
    pod: int | None = None
    segment: int | None = None  # within its pod
    rail: int | None = None  # for rail ToRs; None where a ToR serves all rails
    plane: int | None = None
    side: int | None = None  # 0 = ToR-A, 1 = ToR-B of a dual-ToR pair
    nics: int = 0  # hosts: NICs (one per rail)
    gpus: int = 0  # hosts: GPUs counted in the figures
    backup: bool = False  # hosts: a wired spare, not counted as active GPUs

    @property
    def is_switch(self) -> bool:
        return self.role != "host"

    @property
    def dpid(self) -> int | None:
        """Stable OpenFlow datapath id: role code in byte 5, index+1 below it."""
        if not self.is_switch:
            return None
        return (DPID_ROLE_CODE[self.role] << 40) | (self.index + 1)


@dataclass(frozen=True)
class Link:
    a: str
    a_port: int  # switch: OpenFlow port number (1-based); host: interface index (0-based)
    b: str
    b_port: int
    rate_gbps: float
    kind: str  # "host-tor", "tor-agg", "agg-core"
    nic: int | None = None  # host-tor links: which NIC of the host (end a)
    nic_port: int | None = None  # host-tor links: 0 goes to ToR-A, 1 to ToR-B

    @property
    def name(self) -> str:
        if self.kind == "host-tor":
            return f"{self.a}:nic{self.nic}:p{self.nic_port}"
        return f"{self.a}:{self.a_port}-{self.b}:{self.b_port}"

    def other(self, node: str) -> str:
        return self.b if node == self.a else self.a

    def port_of(self, node: str) -> int:
        return self.a_port if node == self.a else self.b_port


@dataclass
class Topology:
    kind: str  # builder name, e.g. "hpn"
    params: dict[str, Any]
    nodes: dict[str, Node] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)  # ratios, GPU counts, ...

    # -- building -----------------------------------------------------------
    def add_node(self, node: Node) -> Node:
        if node.name in self.nodes:
            raise ValueError(f"duplicate node {node.name}")
        self.nodes[node.name] = node
        return node

    def add_link(self, link: Link) -> Link:
        self.links.append(link)
        return link

    # -- queries ------------------------------------------------------------
    def by_role(self, role: Role) -> list[Node]:
        return [n for n in self.nodes.values() if n.role == role]

    @property
    def hosts(self) -> list[Node]:
        return self.by_role("host")

    @property
    def switches(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.is_switch]

    def links_of(self, node: str) -> Iterator[Link]:
        """The links at a node, from an index of the links by node: planning asks per rank and per op, and a
        scan of every link each time made `validate` of a paper-scale fabric quadratic. Built at the first
        call, again once links were added (builders only append)."""
        index = self.__dict__.get("_by_node")
        if index is None or index[0] != len(self.links):
            by_node: dict[str, list[Link]] = {}
            for l in self.links:
                by_node.setdefault(l.a, []).append(l)
                if l.b != l.a:
                    by_node.setdefault(l.b, []).append(l)
            index = self.__dict__["_by_node"] = (len(self.links), by_node)
        return iter(index[1].get(node, ()))

    def find_link(self, name: str) -> Link:
        """A link by its name, or by the pair of nodes it joins written `A--B` (either order)."""
        from .errors import InputError

        for l in self.links:
            if l.name == name:
                return l
        if "--" in name:
            a, b = name.split("--", 1)
            found = [l for l in self.links if {l.a, l.b} == {a, b}]
            if len(found) == 1:
                return found[0]
            if found:
                raise InputError(f"{len(found)} links join these nodes", "name one: "
                                 + ", ".join(l.name for l in found), field="link", value=name)
        raise InputError("no such link", "use a name like h3:nic0:p0, tor-p0-s0-r0-a:5-agg-p0-pl0-0:1 or a pair "
                         "of nodes tor-p0-s0-r0-a--agg-p0-pl0-0 ('hpnlab topo export' lists them)",
                         field="link", value=name)

    def by_short(self, short: str) -> Node:
        for n in self.nodes.values():
            if n.short == short:
                return n
        raise KeyError(short)

    def counts(self) -> dict[str, int]:
        c: dict[str, int] = {f"{r}s": 0 for r in ROLES}
        for n in self.nodes.values():
            c[f"{n.role}s"] += 1
        c["links"] = len(self.links)
        kinds: dict[str, int] = {}
        for l in self.links:
            kinds[l.kind] = kinds.get(l.kind, 0) + 1
        for k, v in kinds.items():
            c[f"links {k}"] = v
        return c

    def port_counts(self) -> dict[str, int]:
        """Ports in use per node."""
        ports: dict[str, int] = {n: 0 for n in self.nodes}
        for l in self.links:
            ports[l.a] += 1
            ports[l.b] += 1
        return ports

    # -- export -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "params": self.params,
            "figures": self.figures,
            "nodes": [asdict(n) | ({"dpid": n.dpid} if n.is_switch else {}) for n in self.nodes.values()],
            "links": [asdict(l) | {"name": l.name} for l in self.links],
        }

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Topology:
        node_fields = set(Node.__dataclass_fields__)
        link_fields = set(Link.__dataclass_fields__)
        topo = cls(kind=d["kind"], params=dict(d.get("params", {})), figures=dict(d.get("figures", {})))
        for nd in d["nodes"]:
            topo.add_node(Node(**{k: v for k, v in nd.items() if k in node_fields}))
        for ld in d["links"]:
            topo.add_link(Link(**{k: v for k, v in ld.items() if k in link_fields}))
        return topo

    @classmethod
    def from_json(cls, text: str) -> Topology:
        return cls.from_dict(json.loads(text))

    def to_networkx(self):
        """A MultiGraph: parallel ToR-agg links stay distinct edges (keyed by link name)."""
        import networkx as nx

        g = nx.MultiGraph(kind=self.kind, **{k: v for k, v in self.figures.items() if v is not None})
        for n in self.nodes.values():
            g.add_node(n.name, **{k: v for k, v in asdict(n).items() if k != "name" and v is not None})
        for l in self.links:
            g.add_edge(l.a, l.b, key=l.name, a_port=l.a_port, b_port=l.b_port, rate_gbps=l.rate_gbps, kind=l.kind)
        return g

