"""Sections of a run's summary.md that only some experiments have: PFC's pauses, a failure campaign, gray
failures. Each takes the runs' records and gives its lines, or none when no run has what it reports."""

from __future__ import annotations

import statistics

from testbed.schema.results import Run

from .deadlocks import Freeze, Hold

TIERS = ("host", "tor", "agg", "core")


def pfc_lines(runs: list[Run]) -> list[str]:
    """Per run with PFC on: the pause events, the ports paused and the time paused per tier of the paused port,
    and the events of all tiers added (what lab 4 asks for)."""
    rows = [r for r in runs if (r.pfc or {}).get("pauses_by_tier")]
    if not rows:
        return []
    tiers = [t for t in TIERS if any(t in r.pfc["pauses_by_tier"] for r in rows)]
    lines = ["", "PFC pauses per tier of the paused port (the sending side): pause events, ports paused, and the "
             "time they stayed paused (s, fabric time):", "",
             "| variant | pause events, all tiers | " + " | ".join(f"{t}: events / ports / paused s" for t in tiers)
             + " |", "|---|---|" + "---|" * len(tiers)]
    for r in rows:
        by = r.pfc["pauses_by_tier"]
        cells = [f"{by[t]['pause_events']:,} / {by[t]['ports_paused']} / {by[t]['paused_s']:.3f}" if t in by else "-"
                 for t in tiers]
        lines.append(f"| {r.variant} #{r.repetition} | {sum(t['pause_events'] for t in by.values()):,} | "
                     + " | ".join(cells) + " |")
    lines += ["", *(reaction_line(r) for r in rows)]
    lines += [watchdog_line(r) for r in rows if "watchdog" in r.pfc]
    lines += [line for r in rows for line in deadlock_lines(r)]
    return lines


def deadlock_lines(r: Run) -> list[str]:
    """The cyclic buffer dependencies the run's routes could close, those its PFC samples saw closed, and
    lossless queues frozen to the end."""
    label = f"{r.variant} #{r.repetition}"
    froze = r.pfc.get("frozen")
    return _cycle_lines(r, label) + ([Freeze(tuple(froze["queues"]), froze["from_s"], froze["held_s"]).line(label)]
                                     if froze else [])


def _cycle_lines(r: Run, label: str) -> list[str]:
    predicted = sum(c["count"] for c in r.pfc.get("buffer_cycles") or [])
    if not predicted:
        return []
    seen = [Hold(**h) for h in r.pfc.get("deadlocks") or []]
    if not seen:
        return [f"PFC deadlock, {label}: none of the {predicted} predicted cyclic buffer dependencies closed"]
    return [h.line(label) for h in seen[:2]] + ([f"... and {len(seen) - 2} more"] if len(seen) > 2 else [])


def watchdog_line(r: Run) -> str:
    """What the PFC watchdog did in a run: storms detected, how long they were mitigated, on which queues."""
    wd = r.pfc["watchdog"]
    head = f"PFC watchdog ({wd['action']}), {r.variant} #{r.repetition}:"
    if not wd["storms"]:
        return f"{head} no storm"
    queues = ", ".join(f"{k} ({q['storms']}x, {q['storm_s']:g} s)" for k, q in wd["queues"].items())
    dropped = f", {wd['drops']:,} frames dropped" if wd["action"] == "drop" else ""
    return f"{head} {wd['storms']} storm(s), {wd['storm_s']:g} s mitigated (fabric time){dropped}: {queues}"


def reaction_line(r: Run) -> str:
    """How fast the run's pauses acted: a crossing seen in the kernel to the upstream queues stopped (wall time),
    against what the headroom covers; a polling agent's are not timed."""
    react, covers = r.pfc.get("reaction_ms") or {}, r.pfc.get("headroom_covers_ms")
    head = f"PFC reaction, {r.variant} #{r.repetition}:"
    if react.get("median") is None:
        why = "the agent polled the queues" if r.pfc.get("detect") == "poll" else "no crossing was acted on"
        return f"{head} not timed ({why})"
    return (f"{head} p50 {react['median']:g} ms, p99 {react['p99']:g} ms, max {react['max']:g} ms (wall time); the "
            f"headroom covers {covers:g} ms")


def campaign_lines(runs: list[Run]) -> list[str]:
    """A failure campaign's summary per run and job, and its outcomes per kind of component (testbed/campaign)."""
    rows = [(r, job, s) for r in runs if r.campaign for job, s in r.campaign["summary"].items()]
    if not rows:
        return []
    c0 = rows[0][0].campaign
    lines = ["", f"Failure campaign: outages sampled from production failure rates, each held "
             f"{c0['resilience']['watchdog_s']:g} s of the watchdog or longer; a restart costs "
             f"{c0['resilience']['restart_s']:g} s and the work since the last checkpoint (every "
             f"{c0['resilience']['checkpoint_s']:g} s); a slowdown costs its share of the real repair time. Per month "
             "of this fabric slice:", "",
             "| variant | job | outages | restarts | slowdowns | confounded | survived | months | compression | "
             "interruptions / month | lost GPU-h / month | goodput |", "|" + "---|" * 12]
    for r, job, s in rows:
        c = r.campaign
        lines.append(f"| {r.variant} #{r.repetition} | {job} | {s['outages']} | {s['restarts']} | "
                     f"{s['slowdowns']} | {s['confounded']} | {_pct(s['survived'])} | {c['months']:,.1f} | "
                     f"{c['compression']:,.0f}x | "
                     f"{s['interruptions_per_month']:.4f} | {s['lost_gpu_hours_per_month']:.3f} | "
                     f"{s['goodput']:.6f} |")
    lines += ["", "Per kind of component (restart / slowdown / no effect / confounded: still stalled from the outage "
              "before; mean slowdown of those slowed; mean "
              "reroute, the controller hearing of it and recomputing):", "",
              "| variant | kind | outcomes | mean slowdown | mean reroute (ms) |", "|---|---|---|---|---|"]
    for r in [r for r in runs if r.campaign]:
        for kind in sorted({o["kind"] for o in r.campaign["outcomes"]}):
            outs = [o for o in r.campaign["outcomes"] if o["kind"] == kind]
            n = {k: sum(1 for o in outs if o["outcome"] == k) for k in ("restart", "slowdown", "none", "confounded")}
            slow = [o["slowdown"] for o in outs if o["outcome"] == "slowdown"]
            rr = [o["reroute_ms"] for o in outs if o["reroute_ms"] is not None]
            lines.append(f"| {r.variant} #{r.repetition} | {kind} | {n['restart']} / {n['slowdown']} / "
                         f"{n['none']} / {n['confounded']} | {_mean_or_dash(slow, '.2f')} | "
                         f"{_mean_or_dash(rr, '.1f')} |")
    return lines


def gray_lines(runs: list[Run]) -> list[str]:
    """Gray failures: each one, how soon the detector named its link, what the link lost, the hosts' TCP
    retransmissions and the ops' time against the run without one (testbed/experiment/detector.py)."""
    rows = [r for r in runs if r.gray]
    if not rows:
        return []
    base = any(healthy_op_s(runs, r) for r in rows)
    lines = ["", "Gray failures (a link that keeps running: lossy, dropped by a BPF program; or slower; or one that "
             "flaps): when the detector named the link from the operator's counters (input errors; operational "
             "speed; carrier changes), the frames it lost each way, the hosts' retransmissions, and the mean "
             "op time"
             + (" against the runs without a failure at the same transport and scales" if base else "") + ":", "",
             "| variant | failure | named after (s) | frames lost / carried | retransmissions | op time (s) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        ops = [o.seconds for o in r.ops]
        t, healthy = statistics.mean(ops) if ops else None, healthy_op_s(runs, r)
        slow = f" ({t / healthy:.2f}x)" if t and healthy else ""
        for d in r.gray["delays"]:
            c = r.gray["counters"].get(d["links"][0], {})
            lost, carried = sum(c.get("errors", {}).values()), sum(c.get("frames", {}).values())
            frames = f"{lost:,} / {lost + carried:,}" if "errors" in c else "-"
            named = "never" if d["named_after_s"] is None else f"{d['named_after_s']:.3f}"
            what = f"flap every {d['value']:g} s" if d["failure"] == "flap" else f"{d['failure']} {d['value']:g}"
            lines.append(f"| {r.variant} #{r.repetition} | {what} on "
                         f"{d['links'][0]} at {d['at']:.2f} s | {named} | {frames} | "
                         f"{_retransmissions(r)} | "
                         f"{'-' if t is None else f'{t:.3f}'}{slow} |")
    return lines


def healthy_op_s(runs: list[Run], r: Run) -> float | None:
    """The mean op time of the runs without a failure that `r` is set against: those of its transport, bytes
    scale and dilation (an op's fabric time at another scale is another op's); None when there are none."""
    ops = [o.seconds for h in runs if not h.gray and not h.failures
           and (h.transport, h.scale, h.dilation) == (r.transport, r.scale, r.dilation) for o in h.ops]
    return statistics.mean(ops) if ops else None


def roce_lines(runs: list[Run]) -> list[str]:
    """What RoCE's transport did per run: go-back-N's cost is the frames resent per frame the fabric lost."""
    rows = [r for r in runs if r.roce]
    if not rows:
        return []
    lines = ["", "RoCE (transport roce): data frames sent and resent, frames the fabric lost (shaper drops and "
             "lossy links), frames resent per frame lost (go-back-N resends what followed the lost one), NAKs "
             "and retry timeouts, frames the responders dropped out of order; with DCQCN, the frames that came "
             "CE-marked, the CNPs the receivers sent and the senders' rate cuts:", "",
             "| variant | frames sent | resent | lost | resent per lost | NAKs / timeouts | dropped out of order | "
             "CE / CNPs / rate cuts |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r.roce
        lost = frames_lost(r)
        per = f"{c['resent'] / lost:.1f}" if lost else "-"
        # runs recorded before the NICs counted their cuts lack the key
        dcqcn = f"{c['ce']:,} / {c['cnps_sent']:,} / {c.get('rate_cuts', 0):,}" if c["ce"] else "-"
        lines.append(f"| {r.variant} #{r.repetition} | {c['sent']:,} | {c['resent']:,} | {lost:,} | {per} | "
                     f"{c['naks']:,} / {c['timeouts']:,} | {c['out_of_order']:,} | {dcqcn} |")
    return lines


def frames_lost(r: Run) -> int:
    """The frames the fabric lost in a run: the shapers' drops and the lossy links'."""
    gray = sum(sum(c.get("errors", {}).values()) for c in ((r.gray or {}).get("counters") or {}).values())
    return r.drops.high + r.drops.lossless + r.drops.default + gray


def _retransmissions(r: Run) -> str:
    """A gray failure's cost to the transport: TCP's retransmitted segments, or RoCE's resent frames."""
    if r.roce:
        return f"{r.roce['resent']:,} frames resent"
    return str((r.tcp or {}).get("RetransSegs", "-"))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _mean_or_dash(xs: list[float], fmt: str) -> str:
    return format(statistics.mean(xs), fmt) if xs else "-"


def time_lines(runs: list[Run]) -> list[str]:
    """What each run's traffic cost in wall time against the fabric's time it stands for (traffic/timebase.py),
    and in CPU: the traffic agents' seconds, per emulated Gbit the hosts sent."""
    rows = [r for r in runs if r.traffic_s]
    if not rows:
        return []
    d = sorted({r.dilation for r in rows})
    head = (f"Time dilated {', '.join(f'{x:g}' for x in d)}x: every time here is the fabric's; the emulation ran "
            "that many times slower." if d != [1.0] else "Time not dilated: the fabric's time is the wall clock's.")
    cost = "; ".join(f"{r.variant} #{r.repetition} {r.traffic_s['virtual']:.3f} s in "
                     f"{r.traffic_s['wall']:.1f} s of wall time" + _cpu_text(r) for r in rows)
    return ["", f"{head} Traffic: {cost}."]


def cpu_per_gbit(r: Run) -> float | None:
    """The traffic agents' CPU seconds per emulated Gbit the hosts sent (frames and headers, as the switches
    counted them); None without the figure or the traffic."""
    hosts = {k.split(":")[0] for k in r.host_port_rx}
    sent = sum(link["bytes"] for link in r.links if link["from"] in hosts) * 8 / 1e9
    return r.agents_cpu_s / sent if r.agents_cpu_s is not None and sent else None


def _cpu_text(r: Run) -> str:
    per = cpu_per_gbit(r)
    return "" if per is None else f" (agents: {r.agents_cpu_s:,.1f} CPU-s, {per:.2f} per emulated Gbit sent)"
