"""A Topology as the page draws it: Cytoscape.js elements placed by tier, plane and rail, as the PNG is
(topos/draw.py), the map from each switch port to its link that the fabric's counters are read through, and
an op as the page's busbw chart takes it (live and from a results folder alike).

Pure: no Mininet, no root.
"""

from __future__ import annotations

from topos.draw import positions
from topos.model import Topology

TIER_GAP_PX = 170  # between hosts, ToRs, aggregation and core
HOST_GAP_PX = 46  # per host along the bottom row, so labels of a few dozen hosts stay apart
MIN_WIDTH_PX = 900
OP_FIELDS = ("variant", "repetition", "job", "label", "op", "size", "start", "seconds", "busbw_bps",
             "ideal_busbw_bps", "fraction_of_ideal", "bytes_delivered", "bytes_expected")


def elements(topo: Topology) -> dict:
    """{"nodes": [...], "edges": [...]} in Cytoscape.js's element format, with the fields the page styles by."""
    pos = positions(topo)
    width = max(MIN_WIDTH_PX, HOST_GAP_PX * len(topo.hosts))
    nodes = [{"data": {"id": n.name, "label": n.short, "role": n.role, "plane": n.plane, "rail": n.rail,
                       "segment": n.segment, "pod": n.pod, "side": n.side},
              "position": {"x": round(pos[n.name][0] * width, 1), "y": round((3 - pos[n.name][1]) * TIER_GAP_PX, 1)}}
             for n in topo.nodes.values()]
    edges = [{"data": {"id": l.name, "source": l.a, "target": l.b, "kind": l.kind, "rate_gbps": l.rate_gbps,
                       "plane": topo.nodes[l.b].plane}}
             for l in topo.links]
    return {"nodes": nodes, "edges": edges}


def port_links(topo: Topology) -> dict[tuple[str, int], tuple[str, str]]:
    """(node, port) -> (link name, "ab" or "ba"): the direction a packet leaving that port takes on the link."""
    out: dict[tuple[str, int], tuple[str, str]] = {}
    for l in topo.links:
        out[(l.a, l.a_port)] = (l.name, "ab")
        out[(l.b, l.b_port)] = (l.name, "ba")
    return out


def flow_links(flow: dict, ports: dict[tuple[str, int], tuple[str, str]]) -> list[str]:
    """The links a declared flow (the controller's GET /flows view) takes: its host port's link, then one per
    switch hop (`ports` from port_links)."""
    if not flow.get("path") or not flow.get("egress"):
        return []
    hops = [(flow["src"], flow["egress"]["port"])] + [(h["switch"], h["port"]) for h in flow["path"]]
    return [ports[h][0] for h in hops if h in ports]


def op_row(op: dict) -> dict:
    """The runner's op record (with its variant and repetition) as the page receives it."""
    return {k: op.get(k) for k in OP_FIELDS}
