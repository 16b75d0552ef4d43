"""Was a run faithful? The verdict every command that moves traffic prints and records (pure).

An emulated rate is only what the configuration says while the machine keeps
up: OVS forwards in software, HTB shapes in software, the PFC agent polls in
software. A run is marked unfaithful, with the reason, when

- the CPU ran out: idle fell under CPU_IDLE_MIN in a sample (emulated rates then
  lag the configured ones);
- the offered load was above this machine's budget: every sending NIC port at
  its emulated rate adds up to more than `hpnlab calibrate` found this machine
  forwards faithfully (testbed/qos/scale.py). Measured here: a ring all-reduce
  at twice the budget reached 61% of ideal with no drop anywhere, CPU idle
  above 5% and OVS's forwarding thread at 72% of a core, so neither of those
  alone shows it (both are shown as figures);
- the hypervisor took the CPU: steal over the run above STEAL_MAX;
- a PFC pause came too late: a lossless queue grew past XOFF + headroom, the
  depth the headroom is sized never to exceed (two poll periods of reaction at
  the full ingress rate). The agent's poll period is shown beside the verdict:
  a late poll is harmless while the queues stay below that depth, and on these
  2-core machines its p99 is 1.5-2.5x the configured period in quiet runs too;
- the lossless class dropped with PFC on (the emulation promised it would not).

Collectives' busbw below ideal is not in itself unfaithful: hash collisions and
contention are what an experiment measures.
"""

from __future__ import annotations

import statistics

CPU_IDLE_MIN = 0.05
STEAL_MAX = 0.05


def verdict(timeline: list[dict], pfc: dict | None = None, pfc_enabled: bool = False,
            lossless_drops: int = 0, offered_bps: float | None = None, budget_bps: float | None = None,
            calibrated: bool = False) -> dict:
    """timeline: the sampler's rows (cpu_idle, steal, ovs_thread per sample); pfc: the agent's report;
    offered_bps: every sending port at its emulated rate; budget_bps: what this machine forwards faithfully."""
    idle = [r["cpu_idle"] for r in timeline]
    steal = [r.get("steal", 0.0) for r in timeline]
    ovs = [r["ovs_thread"] for r in timeline if "ovs_thread" in r]
    out = {"cpu_idle_min": min(idle, default=None),
           "cpu_idle_mean": round(statistics.mean(idle), 4) if idle else None,
           "steal_mean": round(statistics.mean(steal), 4) if steal else None,
           "ovs_thread_max": max(ovs, default=None), "pfc_poll_p99_ms": None, "lossless_drops": lossless_drops,
           "offered_bps": offered_bps, "budget_bps": budget_bps, "reasons": []}
    reasons = out["reasons"]
    if idle and min(idle) < CPU_IDLE_MIN:
        worst = min(timeline, key=lambda r: r["cpu_idle"]).get("cpu_idle_by_server")  # over several servers
        where = f" on server {min(worst, key=worst.get)}" if worst else ""
        reasons.append(f"CPU-bound: idle fell to {min(idle):.0%}{where} (needs >= {CPU_IDLE_MIN:.0%})")
    if offered_bps is not None and budget_bps is not None and offered_bps > budget_bps:
        src = "calibrated" if calibrated else "default; run 'hpnlab calibrate'"
        reasons.append(f"offered load {offered_bps / 1e6:.0f} Mbit/s above this machine's faithful budget "
                       f"{budget_bps / 1e6:.0f} Mbit/s ({src})")
    if steal and statistics.mean(steal) > STEAL_MAX:
        reasons.append(f"the hypervisor took {statistics.mean(steal):.0%} of the CPU (steal; <= {STEAL_MAX:.0%})")
    if pfc:
        period = pfc["poll_period_ms"]
        out["pfc_poll_p99_ms"] = period["p99"]
        # A host's own egress queue has nothing upstream to pause (its sender is the host's stack, held by
        # the paused port itself, as a NIC's send queue is): past XOFF there is no late pause, only a backlog.
        over = {k: q for k, q in pfc.get("queues", {}).items()
                if not q.get("host") and q["max_backlog"] > q["xoff"] + q["headroom"]}
        if over:
            k, q = max(over.items(), key=lambda kv: kv[1]["max_backlog"] - kv[1]["xoff"] - kv[1]["headroom"])
            reasons.append(f"a PFC pause came late: {len(over)} lossless queue(s) past XOFF + headroom, e.g. {k} "
                           f"at {q['max_backlog']:,} B > {q['xoff'] + q['headroom']:,} B (agent poll p99 "
                           f"{period['p99']:g} ms, configured {period['configured']:g} ms)")
    if pfc_enabled and lossless_drops:
        reasons.append(f"{lossless_drops} drops in the lossless class with PFC on")
    out["cpu_bound"] = bool(idle) and min(idle) < CPU_IDLE_MIN
    out["faithful"] = not reasons
    return out


def line(v: dict) -> str:
    """One line for a terminal or a summary."""
    if v["faithful"]:
        figures = []
        if v["cpu_idle_min"] is not None:
            figures.append(f"CPU idle >= {v['cpu_idle_min']:.0%}")
        if v["ovs_thread_max"] is not None:
            figures.append(f"OVS thread <= {v['ovs_thread_max']:.0%}")
        if v["steal_mean"] is not None:
            figures.append(f"steal {v['steal_mean']:.0%}")
        if v["pfc_poll_p99_ms"] is not None:
            figures.append(f"PFC poll p99 {v['pfc_poll_p99_ms']:g} ms")
        return f"fidelity: faithful ({', '.join(figures)})"
    return "fidelity: NOT faithful: " + "; ".join(v["reasons"])
