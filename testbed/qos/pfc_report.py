"""The PFC agent's report: figures of a run's pauses and queues, in the fabric's time, and one report from
several servers' agents (pure: the agent's figures in, dictionaries out)."""

from __future__ import annotations

import time

from traffic.timebase import Timebase

from .pfc_state import Key, PauseState, QueueState
from .ports import queue_key


def tallies(pauses: dict[Key, PauseState], queues: dict[Key, QueueState], roles: dict[str, str],
            priorities: list[int]) -> tuple[dict[str, dict[str, float]], dict[int, dict[str, float]]]:
    """Pause events, paused time and ports paused per tier (`roles`: a port's device role), and per priority
    with its queues' XOFF events and drops."""
    tiers: dict[str, dict[str, float]] = {}
    by_prio: dict[int, dict[str, float]] = {p: {"pause_events": 0, "paused_s": 0.0, "xoff_events": 0, "drops": 0}
                                            for p in priorities}
    for (key, prio), st in pauses.items():
        t = tiers.setdefault(roles[key], {"pause_events": 0, "paused_s": 0.0, "ports_paused": 0})
        for d in (t, by_prio[prio]):
            d["pause_events"] += st.events
            d["paused_s"] += st.paused_s
        t["ports_paused"] += 1 if st.events else 0
    for (_key, prio), q in queues.items():
        by_prio[prio]["xoff_events"] += q.xoff_events
        by_prio[prio]["drops"] += q.drops
    return tiers, by_prio


def agent_report(a, since: float | None, configured_ms: float) -> dict:
    """The report of agent `a` (a pfc.PfcAgent, not imported: it imports this): counters and the poll period's
    statistics, only polls after `since` (a monotonic time) if given: the traffic's window, not the network's
    start-up; `configured_ms`: its configured period (poll_ms polling, its longest sleep with kernel events)."""
    periods = sorted(p for t, p in a.period_samples[1:] if since is None or t >= since)
    now = a.stopped_at or time.monotonic()
    last_poll = a.period_samples[-1][0] if a.period_samples else None  # when the last poll began
    tiers, by_prio = tallies(a.pauses, a.queues, {k: p.role for k, p in a.shaper.ports.items()}, a.priorities)
    return {
        "priorities": a.priorities,
        "by_priority": {str(p): {k: round(v, 4) for k, v in d.items()} for p, d in by_prio.items()},
        "polls": a.polls,
        # polls inside the traffic's window, and how long before this report the last one was: an agent
        # that died or stalled must not read as one that saw empty queues (testbed/experiment/fidelity.py)
        "polls_in_window": len(periods),
        "last_poll_age_ms": None if last_poll is None else round((now - last_poll) * 1000, 3),
        "error": a.error,
        "pfc_frames_sent": a.frames_sent,
        "poll_period_ms": {"configured": configured_ms, **spread(periods, 1000)},
        # how long a poll itself took (netlink dumps wait for the kernel's rtnl lock): a gap with a long
        # poll was the kernel's, one with a short poll was the scheduler's
        "poll_ms": spread(sorted(d for t, d in a.poll_samples if since is None or t >= since), 1000),
        "realtime": a.realtime,
        # kernel: crossings seen per packet by BPF (poll_period_ms is then the gap between the agent's
        # wake-ups: at least every KERNEL_WAKE_S, liveness only); poll: read every poll_ms
        "detect": a.detect,
        "model": a.spec.model,  # ingress: a switch port's queue figures are its ingress account's XOFFs
        "resynced": a.resynced,  # model ingress: pauses the agent set right from the kernel's accounts
        **({"detect_why": a.detect_why} if a.detect_why else {}),
        # a crossing in the kernel to the upstream classes changed (kernel detection only)
        "reaction_ms": spread(sorted(r for t, r in a.reactions if since is None or t >= since), 1000),
        "headroom_covers_ms": a.spec.reaction_s() * 1000,  # of every ingress, beside an OVS batch
        "agent_cpu_share": round(a.cpu_s / a.wall_s, 4) if a.wall_s else None,
        "pauses_by_tier": tiers,
        "ports": {queue_key(*k): {"pause_events": s.events, "paused_s": round(s.paused_s, 4)}
                  for k, s in a.pauses.items() if s.events},
        "queues": {queue_key(*k): {"max_backlog": q.max_backlog, "xoff_events": q.xoff_events, "drops": q.drops,
                                   "xoff": q.plan.xoff, "headroom": q.plan.headroom, "host": q.port.is_host,
                                   "ingress_Bps": q.plan.ingress, "ingress_links": q.plan.ingress_links}
                   for k, q in a.queues.items() if q.max_backlog or q.drops},
        # every 20th poll: lossless backlogs (non-zero ones) and the ports paused at that moment
        "samples": [{"t": round(s["t"] - a.samples[0]["t"], 4), "backlog": s["backlog"],
                     "paused": s["paused"]} for s in a.samples],
    } | _extras(a, since)


def _extras(a, since: float | None) -> dict:
    """The parts only some agents have: pauses between servers, the watchdog, the stuck peers playing a storm."""
    out = {}
    if a.remote is not None:
        out["remote"] = a.remote.report() | {"expired": a.expired}
    if a.guard is not None:
        out["watchdog"] = a.guard.report(since)
    if a.stuck.storming:
        out["stuck_peers"] = sorted(a.stuck.storming)
    return out


def spread(ordered: list[float], scale: float = 1.0) -> dict[str, float | None]:
    """Median, p99 and max of values sorted ascending, times `scale`, to 3 places; None for no values."""
    if not ordered:
        return dict.fromkeys(("median", "p99", "max"))
    return {"median": round(scale * ordered[len(ordered) // 2], 3),
            "p99": round(scale * ordered[int(len(ordered) * 0.99)], 3), "max": round(scale * ordered[-1], 3)}


def _most(values: list[float | None]) -> float | None:
    """The largest figure of any agent; None if any agent has none (it never polled: nothing to judge by)."""
    return None if any(v is None for v in values) else max(values)


def in_fabric_time(report: dict, timebase: Timebase) -> dict:
    """The report with the fabric's times under time dilation (traffic/timebase.py): pause durations and the
    samples' times virtual (the wall's / D); the poll figures stay wall time, the emulator's own, which is what
    the verdict judges them as."""
    if report is None or timebase.dilation == 1:
        return report

    def paused(d: dict) -> dict:
        return {k: round(timebase.virtual(v), 6) if k == "paused_s" else v for k, v in d.items()}

    return {**report,
            "clock": {"dilation": timebase.dilation, "virtual": ["paused_s", "samples.t", "watchdog"],
                      "wall": ["poll_period_ms", "poll_ms", "last_poll_age_ms", "reaction_ms",
                               "headroom_covers_ms"]},
            "by_priority": {p: paused(d) for p, d in report["by_priority"].items()},
            "pauses_by_tier": {t: paused(d) for t, d in report["pauses_by_tier"].items()},
            "ports": {k: paused(d) for k, d in report["ports"].items()},
            "samples": [{**x, "t": round(timebase.virtual(x["t"]), 6)} for x in report["samples"]],
            **({"watchdog": _watchdog_in_fabric(report["watchdog"], timebase)} if "watchdog" in report else {})}


def _watchdog_in_fabric(wd: dict, timebase: Timebase) -> dict:
    """The watchdog's settings, storm seconds and event times in the fabric's time (they ran on the wall's)."""
    v = timebase.virtual
    return {**wd, **{k: round(v(wd[k]), 6) for k in ("poll_ms", "restore_ms", "storm_s")},
            "queues": {k: {**q, "storm_s": round(v(q["storm_s"]), 6)} for k, q in wd["queues"].items()},
            "events": [{**e, "t": round(v(e["t"]), 6)} for e in wd["events"]]}


def merge_reports(reports: dict[str, dict]) -> dict:
    """One report from every server's agent (a network over several servers): counters added up, the poll
    period of the slowest agent (the one the verdict must judge), every port and queue; each server's own
    poll figures under `by_server`, and the pauses between servers (messages, their one-way delay)."""
    first = next(iter(reports.values()))
    tiers: dict[str, dict[str, float]] = {}
    for r in reports.values():
        for tier, d in r["pauses_by_tier"].items():
            t = tiers.setdefault(tier, dict.fromkeys(d, 0))
            for k, v in d.items():
                t[k] = round(t[k] + v, 4)
    periods = [r["poll_period_ms"] for r in reports.values()]
    shares = [r["agent_cpu_share"] for r in reports.values() if r["agent_cpu_share"] is not None]
    # each agent keeps every 20th poll from its own start: the i-th samples of all are about the same moment
    samples = []
    for i in range(max(len(r["samples"]) for r in reports.values())):
        at = [r["samples"][i] for r in reports.values() if i < len(r["samples"])]
        samples.append({"t": at[0]["t"], "backlog": {k: v for s in at for k, v in s["backlog"].items()},
                        "paused": sorted(k for s in at for k in s["paused"])})
    remote = [r["remote"] for r in reports.values() if "remote" in r]
    one_way = sorted(ms for r in remote for ms in r["one_way_ms"])
    return {
        "priorities": first["priorities"],
        "by_priority": {p: {k: round(sum(r["by_priority"][p][k] for r in reports.values()), 4) for k in d}
                        for p, d in first["by_priority"].items()},
        "polls": sum(r["polls"] for r in reports.values()),
        "polls_in_window": min(r.get("polls_in_window", r["polls"]) for r in reports.values()),
        "last_poll_age_ms": _most([r.get("last_poll_age_ms") for r in reports.values()]),
        "error": "; ".join(f"{name}: {r['error']}" for name, r in reports.items() if r.get("error")) or None,
        "pfc_frames_sent": sum(r["pfc_frames_sent"] for r in reports.values()),
        "poll_period_ms": {"configured": periods[0]["configured"],
                           **{k: _most([p[k] for p in periods]) for k in ("median", "p99", "max")}},
        "poll_ms": {k: _most([r.get("poll_ms", {}).get(k) for r in reports.values()]) for k in ("median", "p99",
                                                                                                  "max")},
        "realtime": all(r.get("realtime") for r in reports.values()),
        "detect": "/".join(sorted({r.get("detect", "poll") for r in reports.values()})),
        "reaction_ms": {k: _most([r.get("reaction_ms", {}).get(k) for r in reports.values()])
                        for k in ("median", "p99", "max")},
        "headroom_covers_ms": _most([r.get("headroom_covers_ms") for r in reports.values()]),
        "agent_cpu_share": max(shares) if shares else None,
        "pauses_by_tier": tiers,
        "ports": {k: v for r in reports.values() for k, v in r["ports"].items()},
        "queues": {k: v for r in reports.values() for k, v in r["queues"].items()},
        "samples": samples,
        "by_server": {name: {k: r[k] for k in ("polls", "poll_period_ms", "agent_cpu_share")}
                      for name, r in reports.items()},
        "by_server_remote": {name: {k: v for k, v in r["remote"].items() if k != "one_way_ms"}
                             for name, r in reports.items() if "remote" in r},
        "between_servers": {
            **{k: sum(r[k] for r in remote) for k in ("sent", "received", "rejected", "expired")},
            "one_way_ms": {"n": len(one_way), **spread(one_way)} if one_way else None},
    }
