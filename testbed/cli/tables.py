"""rich tables the commands print: a topology's figures and invariants, queues."""

from __future__ import annotations

from rich.table import Table


def figures_table(tp) -> Table:
    c = tp.counts()
    f = tp.figures
    t = Table(title=f"{tp.kind} — counts and figures")
    t.add_column("item")
    t.add_column("value", justify="right")
    rows = [("hosts", c["hosts"]), ("ToRs", c["tors"]), ("aggregation switches", c["aggs"]),
            ("core switches", c["cores"])]
    rows += [(k, v) for k, v in c.items() if k.startswith("links")]
    rows += [("planes", f["planes"]), ("GPUs per host", f["gpus_per_host"]),
             ("GPUs per segment", f"{f['gpus_per_segment']:,}"), ("GPUs per pod", f"{f['gpus_per_pod']:,}"),
             ("GPUs total", f"{f['gpus_total']:,}"), ("ports per ToR", f["tor_ports"]),
             ("ports per aggregation switch", f["agg_ports"]),
             ("ToR oversubscription (down:up)", f"{f['tor_oversubscription']:.3f}:1")]
    if f["agg_oversubscription"] is not None:
        rows.append(("aggregation-to-core oversubscription", f"{f['agg_oversubscription']:.3f}:1"))
    elif "core_oversubscription" in tp.params:
        rows.append(("aggregation-to-core oversubscription",
                     f"no core tier (1 pod); set {tp.params['core_oversubscription']:g}:1"))
    for k, v in rows:
        t.add_row(k, str(v))
    return t


def invariants_table(tp) -> Table:
    p = tp.params
    t = Table(title="invariants (checked on build)")
    t.add_column("invariant")
    t.add_column("result")
    nics = sum(h.nics for h in tp.hosts)
    t.add_row("switch, link and port counts match the closed forms", "[green]ok[/]")
    if p.get("dual_tor", False):
        t.add_row(f"each NIC's two ports on two different ToRs ({nics} NICs)", "[green]ok[/]")
    if p.get("dual_plane", False):
        t.add_row("…and those ToRs are in different planes", "[green]ok[/]")
        t.add_row("plane-p ToRs link only to plane-p aggregation switches", "[green]ok[/]")
    if p.get("rail_optimized", False):
        t.add_row("NIC r lands on rail-r ToRs only", "[green]ok[/]")
    return t


def qos_table(rows: list[dict], title: str, headroom: bool = True) -> Table:
    """headroom: a column of each lossless queue's XOFF and headroom (the lab shell's `queues` leaves it out: its
    table must fit 80 columns)."""
    t = Table(title=title)
    marking = any(r.get("ecn_marks") is not None for r in rows)  # the column only where the run marks ECN
    for c in ("port", "class", "rate", "sent", "backlog", *(("XOFF + headroom",) if headroom else ()), "drops",
              *(("ECN marks",) if marking else ()), "pause"):
        t.add_column(c, justify="left" if c in ("port", "class", "pause") else "right")
    for r in rows:
        pause = (("[red]PAUSED[/] " + (f"by {', '.join(r['paused_by'])} " if r.get("paused_by") else ""))
                 if r["paused"] else "") + (f"{r['pause_events']} events" if r["pause_events"] else "")
        marks = (("" if r.get("ecn_marks") is None else f"{r['ecn_marks']:,}",) if marking else ())
        room = (("" if r.get("xoff") is None else f"{r['xoff']:,} + {r.get('headroom') or 0:,}",) if headroom
                else ())
        t.add_row(f"{r['port']} ({r['ifname']})", r["class"], f"{r['rate_bps'] / 1e6:g} Mbit/s",
                  f"{r['sent_bytes']:,}", f"{r['backlog']:,}", *room, f"{r['drops']:,}", *marks, pause)
    return t


def placement_table(placement, topo) -> Table:
    """Which server runs what, and what crosses between servers (rates of the real fabric, each way)."""
    t = Table(title="placement over servers")
    roles = ("host", "tor", "agg", "core")
    for col in ("server", "hosts", "ToRs", "aggregation", "core", "crossing links", "crossing Gbit/s"):
        t.add_column(col, justify="left" if col == "server" else "right")
    crossing = placement.crossing_gbps()
    for server in placement.servers:
        on = [topo.nodes[n].role for n in placement.nodes_on(server)]
        ends = sum(server in (placement.server_of[l.a], placement.server_of[l.b]) for l in placement.crossing)
        t.add_row(server, *(str(on.count(r)) for r in roles), str(ends), f"{crossing[server]:,.0f}")
    return t
