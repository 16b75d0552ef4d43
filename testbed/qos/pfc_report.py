"""The PFC agent's report: figures of a run's pauses and queues, in the fabric's time, and one report from
several servers' agents (pure: dictionaries in, dictionaries out; the agent builds its own in pfc.py)."""

from __future__ import annotations

from traffic.timebase import Timebase

from .pfc_state import Key, PauseState, QueueState


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
            "clock": {"dilation": timebase.dilation, "virtual": ["paused_s", "samples.t"],
                      "wall": ["poll_period_ms", "poll_ms", "last_poll_age_ms", "reaction_ms",
                               "headroom_covers_ms"]},
            "by_priority": {p: paused(d) for p, d in report["by_priority"].items()},
            "pauses_by_tier": {t: paused(d) for t, d in report["pauses_by_tier"].items()},
            "ports": {k: paused(d) for k, d in report["ports"].items()},
            "samples": [{**x, "t": round(timebase.virtual(x["t"]), 6)} for x in report["samples"]]}


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
