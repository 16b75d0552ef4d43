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
  depth the headroom is sized never to exceed (five poll periods of reaction at
  the full ingress rate). The agent's reaction is shown beside the verdict: with
  kernel events (testbed/qos/kqueues.py) the time from the crossing packet to
  the upstream class changed, p50 and p99; when polling, the poll period (a late
  poll is harmless while the queues stay below that depth, and on these 2-core
  machines its p99 is 1.5-2.5x the configured period in quiet runs too);
- the lossless class dropped with PFC on (the emulation promised it would not);
- latency-bound: an op took more than LATENCY_SHARE over its ideal time while the emulator's own per-op
  latency (agents, coordinator, userspace OVS, a full frame stored and forwarded at each hop: its floor for
  an op of that many steps, testbed/qos/scale.py, measured by `hpnlab calibrate`) is more than
  LATENCY_SHARE of the time the op took: that much of the figure may be the emulator's, not the fabric's (a
  16-GPU SimAI file replayed 46x its closed form with the CPU idle). The floor is weighed against the time
  measured, not the ideal: it is what the emulator can add to the figure, so an op that ECMP collisions made
  2x its ideal with a floor of 6% of the ideal is off by at most 3% (the collisions are the fabric's). An op
  short against the floor (over LATENCY_SHARE of its ideal) that took over MANY_TIMES its ideal is flagged
  however small the floor is against what it took: the ideal already holds every NIC's own load, so what the
  fabric adds (ECMP collisions, jobs sharing a link) is a few times at most here; beyond that it is something of
  the emulator's the floor does not show (Nagle's delayed ACKs once cost 40 ms an op). Both are compared in
  wall time (the op's time x the time dilation D, traffic/timebase.py): dilating time is what makes the floor
  small against an op. An op that kept to its ideal time shows the floor did not matter to it.
  A training job's figure is its iteration, so its ops are weighed together: latency-bound when its
  iterations took more than LATENCY_SHARE over their ideal time while the floors of all their ops add up to
  more than LATENCY_SHARE of the time they took. Its ops too short to time alone (a 4-byte all-reduce: no
  dilation makes a millisecond floor 5% of nanoseconds) are counted (`ops_too_short`): their own busbw is not
  the fabric's;
- TCP lost or reordered segments with nothing dropped by the shapers and no link failed: retransmissions no
  DSACK showed spurious, and the reorderings TCP saw, were the emulator's (runner._lost_in_emulator);
- faster than the fabric allows: an op above FASTER_MAX of its ideal rate was a few packets the link shapers'
  burst let through at once (small ops at a large scale, as a large D makes them), not an emulated transfer.
- far from its closed form with nothing in the fabric to explain it: a job's ops (or a training job's
  iterations) at under FAR of their closed form's rate, in a run where no link failed, no PFC pause, shaper
  drop or ECN mark happened, and no link carried enough to account for the time: its busiest link's payload
  (headers left out: scaled-down chunks carry more of them than the real ones), at its real rate in the
  fabric's time, is under FAR of what the job took. The fabric slows a job by making some link carry more (ECMP
  collisions, jobs sharing a link, a NIC port carrying both channels), by pausing it, dropping or marking;
  without any of those the time went to the emulator (at 64 hosts a ring all-reduce ran at 68% of ideal with
  the CPU idle and no floor to show it). The rule is checked only where no other reason already says why; a
  run it applies to whose links' counters were not read is "unknown".

A run is "unknown", never faithful, when a measurement the verdict relies on is missing: no CPU samples
or a sampler that failed, no PFC report with PFC on, a PFC agent that died or fell silent (no poll for
PFC_SILENT_S: its queue figures miss that stretch), crossings the kernel's ring buffer dropped or lossless
leaves its programs could not find (kqueues.py's counters), lossless drops that could not be read. Evidence of
unfaithfulness wins over missing evidence: such a run is "NOT faithful", with both kinds of reason.

Collectives' busbw below ideal is not in itself unfaithful: hash collisions and
contention are what an experiment measures.
"""

from __future__ import annotations

import statistics

from testbed.qos.scale import DEFAULT_FLOOR_S, FINE, LATENCY_SHARE, Floor, nice_ceil
from testbed.schema.results import Verdict

CPU_IDLE_MIN = 0.05
STEAL_MAX = 0.05
DRAINED_MAX = 0.01  # of the bytes model ingress counted, those whose leaving it did not see (measured: < 0.1%)
PFC_SILENT_S = 1.0  # a poll gap over this (or 20 configured periods, the larger) leaves the queues unwatched
FASTER_MAX = 1.05  # an op above this fraction of its ideal rate went faster than the fabric can: not emulated
MANY_TIMES = 10.0  # a short op this many times its ideal is the emulator's, whatever the floor says (see above)
FAR = 0.85  # a job under this share of its closed form's rate needs a cause in the fabric (see above); the
# goals ask an all-reduce for >= 85% of ideal
HEADER_BYTES = 66  # a TCP segment's Ethernet, IP and TCP headers with timestamps: not payload


def verdict(timeline: list[dict], pfc: dict | None = None, pfc_enabled: bool = False,
            lossless_drops: int | None = 0, offered_bps: float | None = None, budget_bps: float | None = None,
            calibrated: bool = False, sampler_error: str | None = None, ops: list[dict] = (),
            dilation: float = 1.0, lost_in_emulator: int = 0, floor: Floor | None = None,
            iterations: list[dict] = (), links: list[dict] | None = None, scale: float = 1.0,
            fabric_causes: list[str] = ()) -> dict:
    """timeline: the sampler's rows (cpu_idle, steal, ovs_thread per sample); pfc: the agent's report;
    offered_bps: every sending port at its emulated rate; budget_bps: what this machine forwards faithfully;
    sampler_error: why the sampler stopped early, if it did; ops: the run's op records (seconds and
    fraction_of_ideal, in the fabric's time), read for latency-bound ops; dilation: the run's time dilation
    (an op's wall time is that many times its virtual time: the emulator's own latency is wall time);
    lost_in_emulator: TCP segments lost or reordered inside the emulator (runner._lost_in_emulator);
    floor: the emulator's per-op latency on this machine (default: the development machine's); iterations:
    the training iterations' records (seconds and predicted_s per job), which its jobs' ops are weighed by;
    links: what each link direction carried over the run (`link_load`; None: not read), at the bytes scale
    `scale`; fabric_causes: what in the fabric slowed the jobs (failures, pauses, drops, marks), if anything."""
    idle = [r["cpu_idle"] for r in timeline]
    steal = [r.get("steal", 0.0) for r in timeline]
    ovs = [r["ovs_thread"] for r in timeline if "ovs_thread" in r]
    waiting = max((r for r in timeline if r.get("ovs_rx_peak") is not None), key=lambda r: r["ovs_rx_peak"],
                  default=None)
    out = {"cpu_idle_min": min(idle, default=None),
           "cpu_idle_mean": round(statistics.mean(idle), 4) if idle else None,
           "steal_mean": round(statistics.mean(steal), 4) if steal else None,
           "ovs_thread_max": max(ovs, default=None),
           "ovs_rx_max": waiting["ovs_rx_peak"] if waiting else None, "pfc_poll_p99_ms": None, "pfc_reaction_ms": None,
           "lossless_drops": lossless_drops,
           "offered_bps": offered_bps, "budget_bps": budget_bps, "reasons": [], "unknown": []}
    reasons, unknown = out["reasons"], out["unknown"]
    _cpu(timeline, idle, steal, sampler_error, reasons, unknown)
    if offered_bps is not None and budget_bps is not None and offered_bps > budget_bps:
        src = "calibrated" if calibrated else "default; run 'hpnlab calibrate'"
        reasons.append(f"offered load {offered_bps / 1e6:.0f} Mbit/s above this machine's faithful budget "
                       f"{budget_bps / 1e6:.0f} Mbit/s ({src})")
    if pfc:
        if pfc.get("detect", "poll") == "poll":
            out["pfc_poll_p99_ms"] = pfc["poll_period_ms"].get("p99")
        elif pfc.get("reaction_ms", {}).get("p99") is not None:  # kernel events: the poll period means nothing
            out["pfc_reaction_ms"] = {k: pfc["reaction_ms"][k] for k in ("median", "p99")}
        _late_pause(pfc, reasons, waiting)
    if pfc_enabled:
        _pfc_watched(pfc, unknown)
        # what the PFC watchdog dropped in a storm (action drop) is the fabric's doing, as on a switch
        by_watchdog = ((pfc or {}).get("watchdog") or {}).get("drops", 0)
        if lossless_drops is None:
            unknown.append("the lossless class's drops could not be read")
        elif lossless_drops > by_watchdog:
            besides = f" (besides the {by_watchdog} the PFC watchdog dropped in storms)" if by_watchdog else ""
            reasons.append(f"{lossless_drops - by_watchdog} drops in the lossless class with PFC on{besides}")
    if lost_in_emulator:
        reasons.append(f"{lost_in_emulator} TCP segments lost or reordered (or RoCE frames resent) with no drop in "
                       "any shaper and no link failure: inside the emulator, and the ops waited for them")
    out["ops_too_short"] = _latency(ops, iterations, reasons, dilation, floor or Floor(*DEFAULT_FLOOR_S))
    _too_fast(ops, reasons)
    out["of_closed_form"] = {job: round(ideal / took, 4) for job, took, ideal in _jobs(ops, iterations) if took > 0}
    if not reasons and not fabric_causes:
        _unexplained(out["of_closed_form"], _jobs(ops, iterations), links, scale, reasons, unknown)
    out["cpu_bound"] = bool(idle) and min(idle) < CPU_IDLE_MIN
    out["status"] = "not faithful" if reasons else "unknown" if unknown else "faithful"
    out["faithful"] = out["status"] == "faithful"
    return out


def _cpu(timeline: list[dict], idle: list[float], steal: list[float], sampler_error: str | None,
         reasons: list[str], unknown: list[str]) -> None:
    if sampler_error:
        unknown.append(f"the CPU sampler failed ({sampler_error}): idle and steal were not watched to the end")
    elif not idle:
        unknown.append("no CPU samples: idle and steal were not watched")
    if idle and min(idle) < CPU_IDLE_MIN:
        worst = min(timeline, key=lambda r: r["cpu_idle"]).get("cpu_idle_by_server")  # over several servers
        where = f" on server {min(worst, key=worst.get)}" if worst else ""
        reasons.append(f"CPU-bound: idle fell to {min(idle):.0%}{where} (needs >= {CPU_IDLE_MIN:.0%})")
    if steal and statistics.mean(steal) > STEAL_MAX:
        reasons.append(f"the hypervisor took {statistics.mean(steal):.0%} of the CPU (steal; <= {STEAL_MAX:.0%})")


def _late_pause(pfc: dict, reasons: list[str], waiting: dict | None = None) -> None:
    """A lossless queue past the depth its headroom is sized never to exceed; with model ingress, an ingress port
    whose bytes went past the dynamic threshold by more than its headroom (its egress queues may hold more than
    any one port's XOFF: the shared buffer bounds them). `waiting`: the timeline row with OVS's largest receive
    backlog, named beside a late pause (frames that had left the paused queue when the pause came)."""
    n = len(reasons)
    if pfc.get("model") == "ingress":
        _late_ingress(pfc, reasons)
    else:
        _late_egress(pfc, reasons)
    if len(reasons) > n and waiting and waiting["ovs_rx_peak"]:
        reasons[-1] += (f"; up to {waiting['ovs_rx_peak']:,} B of socket memory of frames waited for OVS's one thread "
                        f"at {waiting['ovs_rx_port']} (at {waiting['t']:g} s): frames that had left their queue, "
                        "which no pause holds")


def _late_egress(pfc: dict, reasons: list[str]) -> None:
    period = pfc["poll_period_ms"]
    # A host's own egress queue has nothing upstream to pause (its sender is the host's stack, held by
    # the paused port itself, as a NIC's send queue is): past XOFF there is no late pause, only a backlog.
    over = {k: q for k, q in pfc.get("queues", {}).items()
            if not q.get("host") and q["max_backlog"] > q["xoff"] + q["headroom"]}
    if over:
        k, q = max(over.items(), key=lambda kv: kv[1]["max_backlog"] - kv[1]["xoff"] - kv[1]["headroom"])
        if pfc.get("detect", "poll") == "poll":
            agent = f"agent poll p99 {period['p99']:g} ms, configured {period['configured']:g} ms"
        else:
            agent = f"PFC reaction p99 {pfc['reaction_ms']['p99']} ms, from kernel events"
        reasons.append(f"a PFC pause came late: {len(over)} lossless queue(s) past XOFF + headroom, e.g. {k} "
                       f"at {q['max_backlog']:,} B > {q['xoff'] + q['headroom']:,} B ({agent})")


def _late_ingress(pfc: dict, reasons: list[str]) -> None:
    accounts = (pfc.get("ingress") or {}).get("accounts", {})
    over = {k: a for k, a in accounts.items() if a["max_over"] > a["headroom"]}
    if over:
        k, a = max(over.items(), key=lambda kv: kv[1]["max_over"] - kv[1]["headroom"])
        reasons.append(f"a PFC pause came late: {len(over)} ingress port(s) past their threshold by more than their "
                       f"headroom, e.g. {k} by {a['max_over']:,} B > {a['headroom']:,} B (PFC reaction p99 "
                       f"{(pfc.get('reaction_ms') or {}).get('p99')} ms, from kernel events)")


def _pfc_watched(pfc: dict | None, unknown: list[str]) -> None:
    """With PFC on, the agent must have run and polled through the traffic, or its figures say nothing."""
    if not pfc:
        unknown.append("PFC is on but there is no PFC agent report")
        return
    if pfc.get("error"):
        unknown.append(f"the PFC agent died ({pfc['error']}): pauses and queue depths after that are not known")
        return
    lost, no_leaf = pfc.get("kernel_lost_events") or 0, pfc.get("kernel_no_leaf") or 0
    if lost:
        unknown.append(f"the kernel's ring buffer had no room for {lost:,} XOFF/XON crossings: the PFC agent never "
                       "heard of them (a queue left unpaused, or a pause left held)")
    if no_leaf:
        unknown.append(f"the kernel programs found no lossless leaf {no_leaf:,} times: those queues were not "
                       "watched then")
    if pfc.get("model") == "ingress":
        ing = pfc.get("ingress")
        if ing is None:
            unknown.append("PFC model ingress, but its ingress accounts were not read: no pause can be judged late")
        elif ing.get("unnamed") or ing.get("unfollowed") or ing["drained_bytes"] > DRAINED_MAX * ing["counted_bytes"]:
            unknown.append(f"PFC model ingress lost track of frames ({ing.get('unnamed')} could not be given their "
                           f"port's source MAC, {ing.get('unfollowed')} bulk dequeues were too long to follow, "
                           f"{ing['drained_bytes']:,} of {ing['counted_bytes']:,} B left their queues unseen): the "
                           "accounts were off until their queues emptied")
    period = pfc["poll_period_ms"]
    if not pfc.get("polls_in_window", pfc.get("polls")):
        unknown.append("the PFC agent never polled during the traffic")
        return
    silent_ms = max(PFC_SILENT_S * 1000, 20 * period["configured"])
    gap = max(period.get("max") or 0.0, pfc.get("last_poll_age_ms") or 0.0)
    if gap > silent_ms:
        unknown.append(f"the PFC agent was silent for {gap:,.0f} ms (configured period {period['configured']:g} ms; "
                       f"allowed {silent_ms:,.0f} ms): queues and pauses were not watched then")


def _latency(ops: list[dict], iterations: list[dict], reasons: list[str], dilation: float, floor: Floor) -> int:
    """Latency-bound ops of back-to-back jobs, and training jobs' iterations; how many ops of the training jobs
    are too short to time alone."""
    trained = {it["job"] for it in iterations}
    _ops_latency([o for o in ops if o.get("job") not in trained], reasons, dilation, floor)
    return sum(_iteration_latency(job, [o for o in ops if o.get("job") == job],
                                  [it for it in iterations if it["job"] == job], reasons, dilation, floor)
               for job in sorted(trained))


def _steps(o: dict) -> int:
    return len(o.get("step_seconds") or ())


def _short(o: dict, dilation: float, floor: Floor) -> bool:
    """The op's ideal time (in wall time) is short against the emulator's floor for it."""
    ideal = o["seconds"] * o["fraction_of_ideal"]  # fraction = busbw / ideal busbw = ideal time / time
    return ideal * dilation * LATENCY_SHARE < floor.of(_steps(o))


def _ops_latency(ops: list[dict], reasons: list[str], dilation: float, floor: Floor) -> None:
    """Ops slower than their ideal time whose measured time (in wall time, x the dilation) the emulator's own
    latency is more than LATENCY_SHARE of, or that are short against it and took over MANY_TIMES their ideal:
    how much of the figure is the emulator's cannot be told apart."""
    slow = []
    for o in ops:
        ideal = o["seconds"] * o["fraction_of_ideal"]
        if ideal > 0 and _emulators(o["seconds"], ideal, floor.of(_steps(o)), dilation, _short(o, dilation, floor)):
            slow.append((o["seconds"] / ideal, ideal, _steps(o), o))
    if slow:
        ratio, ideal, steps, o = max(slow, key=lambda s: s[0])
        reasons.append(f"latency-bound: {len(slow)} of {len(ops)} ops took longer than their ideal time and the "
                       f"emulator's own per-op latency is over {LATENCY_SHARE:.0%} of what they took (or they are "
                       f"short against it and took over {MANY_TIMES:g}x), worst "
                       f"{o['label']} {ratio:.{0 if ratio >= 10 else 1}f}x ({o['seconds'] * 1000:.2f} ms against "
                       f"{ideal * 1000:.2f} ms; {floor.of(steps) * 1000:.1f} ms of wall time for its {steps} steps, "
                       f"from {floor.source()}): the emulator, not the fabric, may be what is measured; "
                       + _advice(floor.dilation_for(ideal, steps)))


def _emulators(took: float, ideal: float, floor_wall: float, dilation: float, short: bool) -> bool:
    """Whether a figure that took `took` against `ideal` (the fabric's seconds) may be the emulator's: slower
    than its ideal, and the floor over LATENCY_SHARE of what it took, or short and MANY_TIMES its ideal."""
    return took > (1 + LATENCY_SHARE) * ideal and (floor_wall > LATENCY_SHARE * took * dilation
                                                   or (short and took > MANY_TIMES * ideal))


def _iteration_latency(job: str, ops: list[dict], its: list[dict], reasons: list[str], dilation: float,
                       floor: Floor) -> int:
    """A training job: its iterations against their ideal time, and its ops' floors added up (wall time)
    against the time the iterations took."""
    ideal, took = sum(it["predicted_s"] for it in its), sum(it["seconds"] for it in its)
    emulator = sum(floor.of(_steps(o)) for o in ops)
    if ideal > 0 and _emulators(took, ideal, emulator, dilation, emulator > LATENCY_SHARE * ideal * dilation):
        reasons.append(f"latency-bound: job {job}'s iterations took {took / ideal:.2f}x their ideal time and the "
                       f"emulator's own latency over their {len(ops)} ops ({emulator:,.2f} s of wall time, from "
                       f"{floor.source()}) is {emulator / (took * dilation):.0%} of what they took ("
                       + (f"over {LATENCY_SHARE:.0%}" if emulator > LATENCY_SHARE * took * dilation else
                          f"over {LATENCY_SHARE:.0%} of their ideal, and they took over {MANY_TIMES:g}x it")
                       + "): the emulator, not the fabric, may be what is measured; "
                       + _advice(emulator / (LATENCY_SHARE * ideal)))
    return sum(1 for o in ops if _short(o, dilation, floor))


def _jobs(ops: list[dict], iterations: list[dict]) -> list[tuple[str, float, float]]:
    """(job, seconds taken, seconds ideal) per job: a training job's iterations against their closed form, a job
    of back-to-back ops its ops' time against their ideal time (an op's record without a job is the run's)."""
    out = {}
    for it in iterations:
        took, ideal = out.get(it["job"], (0.0, 0.0))
        out[it["job"]] = (took + it["seconds"], ideal + it["predicted_s"])
    trained = set(out)
    for o in ops:
        job = o.get("job", "the run")
        if job not in trained:
            took, ideal = out.get(job, (0.0, 0.0))
            out[job] = (took + o["seconds"], ideal + o["seconds"] * o["fraction_of_ideal"])
    return [(job, took, ideal) for job, (took, ideal) in out.items()]


def link_load(links: list[dict], scale: float) -> list[tuple[float, str]]:
    """(seconds, "a->b") per link direction: its payload (bytes less HEADER_BYTES a frame) at its real rate, in
    the fabric's time (the bytes scaled up by `scale`), the time the fabric needed that link for what it
    carried. links: {"from", "to", "bytes", "packets", "gbps"} per direction."""
    return [(max(0, l["bytes"] - l["packets"] * HEADER_BYTES) * 8 * scale / (l["gbps"] * 1e9),
             f"{l['from']}->{l['to']}") for l in links if l["gbps"] > 0]


def _unexplained(fractions: dict[str, float], jobs: list[tuple[str, float, float]], links: list[dict] | None,
                 scale: float, reasons: list[str], unknown: list[str]) -> None:
    """A job under FAR of its closed form in a run with no failure, pause, drop or mark is the fabric's only if
    some link was busy for most of the time it took."""
    far = [(job, took, ideal) for job, took, ideal in jobs if took > 0 and fractions[job] < FAR]
    if not far:
        return
    job, took, ideal = min(far, key=lambda j: fractions[j[0]])
    said = (f"job {job} ran at {fractions[job]:.0%} of its closed form ({took:.4g} s of the fabric's time against "
            f"{ideal:.4g} s) with no link failure, PFC pause, shaper drop or ECN mark")
    if links is None:
        unknown.append(said + ": the links' counters were not read, so whether a busy link explains it is not known")
        return
    busy, where = max(link_load(links, scale), default=(0.0, "none"))
    if busy < FAR * took:
        reasons.append(f"far from its closed form with nothing in the fabric to explain it: {said}, and its busiest "
                       f"link ({where}) was needed for {busy:.4g} s of it (under {FAR:.0%}): the rest is the "
                       "emulator's (agents, TCP over userspace OVS, frames at the scaled rate)")


def _advice(needed: float) -> str:
    """What makes the floor LATENCY_SHARE of the ideal time: D dilated to `needed` (the floor is wall time)."""
    return f"dilate time (time.dilation >= {nice_ceil(needed, FINE):,g}, or auto)"


def _too_fast(ops: list[dict], reasons: list[str]) -> None:
    """Ops faster than the links allow: a few packets that the shapers' burst let through at once (at 40 kbit/s
    a 1.3 KB all-reduce went at 7.6x its ideal), so the time measured is not the fabric's."""
    fast = [o for o in ops if o["fraction_of_ideal"] > FASTER_MAX]
    if fast:
        o = max(fast, key=lambda o: o["fraction_of_ideal"])
        reasons.append(f"faster than the fabric allows: {len(fast)} of {len(ops)} ops above {FASTER_MAX:.0%} of "
                       f"their ideal rate, worst {o['label']} ({o['size']:,} bytes) at {o['fraction_of_ideal']:.0%}: "
                       "too few packets for the link shapers at this scale; lower the scale")


def line(v: dict) -> str:
    """One line for a terminal or a summary (a verdict as results.json holds it)."""
    return Verdict.model_validate(v).line()
