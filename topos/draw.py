"""A picture of a Topology: tiers bottom-up, planes in two colours, rails as marker shapes.

Pure matplotlib (Agg backend), no display needed; large fabrics are drawn with
line collections and without labels so the paper-scale pod still renders.
"""

from __future__ import annotations

from pathlib import Path

from .inputs import save_figure
from .model import Node, Topology

PLANE_COLOURS = ["#1f77b4", "#ff7f0e"]
RAIL_MARKERS = ["s", "D", "^", "v", "P", "X", "*", "h"]
TIER_Y = {"host": 0.0, "tor": 1.0, "agg": 2.0, "core": 3.0}


def positions(topo: Topology) -> dict[str, tuple[float, float]]:
    pos: dict[str, tuple[float, float]] = {}
    hosts = sorted(topo.hosts, key=lambda n: (n.pod, n.segment, n.index))
    for i, h in enumerate(hosts):
        pos[h.name] = (i / max(len(hosts) - 1, 1), TIER_Y["host"])
    # ToRs and aggs spread over the span of their pod; plane 0 left of plane 1 for aggs and cores.
    for role, key in (("tor", lambda n: (n.pod, n.segment, n.rail or 0, n.side or 0)),
                      ("agg", lambda n: (n.pod, n.plane, n.index)),
                      ("core", lambda n: (n.plane, n.index))):
        nodes = sorted(topo.by_role(role), key=key)
        for i, n in enumerate(nodes):
            pos[n.name] = ((i + 0.5) / len(nodes), TIER_Y[role])
    return pos


def _colour(n: Node) -> str:
    return "#555555" if n.plane is None else PLANE_COLOURS[n.plane % 2]


def draw(topo: Topology, path: str | Path, title: str | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    pos = positions(topo)
    big = len(topo.nodes) > 80
    fig, ax = plt.subplots(figsize=(14, 6), dpi=110)
    segs, cols = [], []
    for l in topo.links:
        segs.append([pos[l.a], pos[l.b]])
        plane = topo.nodes[l.b].plane
        cols.append("#999999" if plane is None else PLANE_COLOURS[plane % 2])
    ax.add_collection(LineCollection(segs, colors=cols, linewidths=0.3 if big else 0.9, alpha=0.25 if big else 0.7))
    for role in ("host", "tor", "agg", "core"):
        for n in topo.by_role(role):
            x, y = pos[n.name]
            marker = RAIL_MARKERS[n.rail % len(RAIL_MARKERS)] if n.rail is not None else "o"
            ax.scatter([x], [y], s=8 if big else 90, marker="o" if role == "host" else marker,
                       c="#2ca02c" if role == "host" else _colour(n), edgecolors="black" if not big else "none",
                       linewidths=0.4, zorder=3)
            if not big:
                ax.annotate(n.short, (x, y), textcoords="offset points", xytext=(0, -13 if role == "host" else 8),
                            ha="center", fontsize=6)
    ax.set_yticks([TIER_Y[r] for r in ("host", "tor", "agg", "core")], ["hosts", "ToR", "aggregation", "core"])
    ax.set_xticks([])
    ax.set_ylim(-0.5, 3.5)
    handles = [Line2D([], [], color=PLANE_COLOURS[p], lw=2, label=f"plane {p}") for p in range(
        topo.figures.get("planes", 1))]
    rails = sorted({n.rail for n in topo.by_role("tor") if n.rail is not None})
    handles += [Line2D([], [], marker=RAIL_MARKERS[r % len(RAIL_MARKERS)], ls="", color="black", label=f"rail {r}")
                for r in rails[:8]]
    ax.legend(handles=handles, loc="upper right", fontsize=7, ncols=2)
    c = topo.counts()
    ax.set_title(title or f"{topo.kind}: {c['hosts']} hosts, {c['tors']} ToRs, {c['aggs']} aggregation, "
                          f"{c['cores']} core, {c['links']} links")
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    path = Path(path)
    fig.tight_layout()
    try:
        save_figure(fig, path, "--png")
    finally:
        plt.close(fig)
    return path
