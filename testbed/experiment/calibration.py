"""`hpnlab calibrate`: how much traffic this machine forwards faithfully, measured once and cached.

The probe is the default HPN (8 hosts, 16 switches; `--hosts N`: segments of 8
hosts, as the scale benchmark builds them) with every host sending to
a host of the other segment and receiving from one, on both ports of NIC 0,
precise routing (disjoint paths: nothing but the machine limits the rate),
lossless class with PFC, for a few seconds at each scale of SCALES, lighter
first. A point is faithful when the run's fidelity verdict is (CPU, steal,
PFC; the budget itself is not applied here) and the rate fidelity, the bits
the hosts' ports put on the wire per second (qdisc counters, the median over
the busy samples) over what those ports are configured for, is at least
RATE_FIDELITY_MIN. The budget is the offered emulated load (all sending ports
x their rate) of the heaviest faithful point.

The per-op floor (testbed/qos/scale.py `Floor`, what `dilation: auto` and the
verdict's latency rule go by) is measured on the same fabric with ops of next
to no bytes, so that what they take is the emulator's own: FLOOR_OPS sendrecvs
between two hosts of different segments (one step) and FLOOR_OPS ring
all-reduces over every host (2(n-1) steps), undilated; of each, the FLOOR_Q
quantile after the first FLOOR_WARMUP. The two give the time per op and per
step (a line through both). A third probe checks what full frames add: the
same ring with FRAME_STEP_FRAMES full frames per connection and step, at the
scale `auto` gives this fabric's every host port sending (the rate runs use),
beyond its ideal time and the line above (`frame_s`, per step; 0 when
nothing). A frame is not scaled down with the bytes, so a shaped hop that
stored it whole before sending it on would add its time at the emulated rate
per hop: 12 ms per step of 4 hops at 4 Mbit/s. Measured here it adds
nothing (HTB's burst of two frames forwards a frame that arrives paced at
once): a ring of 14 such steps took 189 ms for 168 ms ideal.

The PFC reaction (testbed/qos/scale.py `Reaction`, what the lossless headroom
covers with kernel events) is timed under a ring all-reduce over every host's
NIC 0 beside a TCP incast over every NIC 1 (`reaction_experiment`): from a
queue's XOFF crossing in the kernel to its upstream classes paused, its
maximum and p99 kept, with how far the switch queues went past XOFF.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from testbed.qos.calibrated import PROBE_HOSTS, budget_key, machine_key, probe_params, save_budget
from testbed.qos.scale import choose_scale, offered_load
from testbed.qos.spec import fixed_headroom
from topos import build

from .fidelity import STEAL_MAX
from .runner import run_one
from .spec import from_dict

SCALES = (80_000, 40_000, 30_000, 25_000, 20_000, 15_000, 10_000, 5_000)
RATE_FIDELITY_MIN = 0.95
SECONDS = 6.0
STEAL_RETRIES = 2  # a point spoilt only by steal is measured again before the sweep ends on it


FLOOR_OPS = 40
FLOOR_WARMUP = 5  # the first ops open connections and warm the agents up
UNDILATED = 1.0  # the probes measure this machine in wall time: never dilated (the default, auto, would)
FLOOR_Q = 0.9  # a floor that most ops stay under: the verdict and dilation auto go by it
FLOOR_SCALE = 1000  # links at 200 Mbit/s: a frame takes microseconds there, so what an op takes is not its bytes
FLOOR_SIZE = 64 * FLOOR_SCALE  # real bytes: 64 emulated, a few per chunk
FRAME_STEP_FRAMES = 4  # full frames per connection and ring step in the frames probe (HTB's burst is two)
FRAME_OPS = 8  # its ops take 0.2 s each at 8 hosts, 6 s at 64 (126 steps at 1 Mbit/s)
FRAME_WARMUP = 2  # its first op opens the connections; each op has many steps to time already
MSS = 1448  # TCP payload of a full frame (1,514 bytes with its headers and timestamps)
REACTION_SECONDS = 6.0  # of the PFC reaction probe's traffic: hundreds of crossings at 8 hosts


def host_port_gbps(topo) -> float:
    return next(l.rate_gbps for l in topo.links if l.kind == "host-tor")


def probe_experiment(scale: float, seconds: float = SECONDS, hosts: int = PROBE_HOSTS, transport: str = "tcp") -> dict:
    """Two jobs side by side: sendrecv pairs across the segments, one each way, over `transport`."""
    params = probe_params(hosts)
    topo = build("hpn", **params)
    hosts = [h.name for h in topo.hosts]
    half = len(hosts) // 2
    there = [x for i in range(half) for x in (hosts[i], hosts[half + i])]
    back = [x for i in range(half) for x in (hosts[half + i], hosts[i])]
    ports = 2
    port_bps = host_port_gbps(topo) * 1e9 / scale
    size = int(ports * port_bps * seconds / 8) * scale  # real bytes: the emulated flow lasts `seconds`
    job = {"op": "sendrecv", "size": int(size), "iters": 1}
    return {"name": "calibrate", "topology": {"name": "hpn", "params": params}, "routing": "precise",
            "transport": transport,
            "qos": {"scale": scale}, "time": {"dilation": UNDILATED}, "channels": ports, "step_timeout_s": 120,
            "jobs": [{"name": "there", "collective": {**job, "ranks": ",".join(f"{h}:0" for h in there)}},
                     {"name": "back", "collective": {**job, "ranks": ",".join(f"{h}:0" for h in back)}}]}


def measure_point(scale: float, seconds: float = SECONDS, hosts: int = PROBE_HOSTS, transport: str = "tcp") -> dict:
    exp = from_dict(probe_experiment(scale, seconds, hosts, transport))
    rec = run_one(f"scale-{scale:g}", exp, Path.cwd(), None, 0)
    topo = exp.topology.build()
    offered = len(topo.hosts) * 2 * host_port_gbps(topo) * 1e9 / scale
    rate_fidelity = wire_fidelity([r.host_tx_bps for r in rec.timeline], offered)
    reasons = [r for r in rec.fidelity.reasons if not r.startswith("offered load")]
    faithful = bool(rec.ops) and not reasons and rate_fidelity >= RATE_FIDELITY_MIN and not rec.halted \
        and rec.bytes_ok
    return {"scale": scale, "offered_bps": offered, "rate_fidelity": round(rate_fidelity, 4),
            "fidelity": rec.fidelity.dump(), "reasons": reasons, "bytes_ok": rec.bytes_ok, "faithful": faithful}


def stolen_only(point: dict) -> bool:
    """Unfaithful for no reason but the hypervisor's steal: the neighbours, not this load."""
    steal = point["fidelity"].get("steal_mean") or 0.0
    return len(point["reasons"]) == 1 and steal > STEAL_MAX and point["rate_fidelity"] >= RATE_FIDELITY_MIN


def wire_fidelity(tx_bps: list[float], offered_bps: float) -> float:
    """Median sending rate over the busy samples (ramp-up and ramp-down samples left out) / configured."""
    busy = [x for x in tx_bps if x >= 0.1 * offered_bps]
    core = busy[1:-1] if len(busy) > 2 else busy
    return statistics.median(core) / offered_bps if core else 0.0


def scales_for(hosts: int) -> list[float]:
    """SCALES for the 8-host probe, the same loads per host for a bigger one (its load grows with it)."""
    return [s * hosts // PROBE_HOSTS for s in SCALES]


def floor_experiment(hosts: int, op: str, frames: bool = False) -> dict:
    """FLOOR_OPS ops of FLOOR_SIZE: a sendrecv across the segments, or a ring all-reduce over every host; with
    `frames`, FRAME_OPS ring all-reduces of FRAME_STEP_FRAMES full frames per connection and step at the scale
    auto gives every host port sending."""
    params = probe_params(hosts)
    topo = build("hpn", **params)
    names = [h.name for h in topo.hosts]
    ranks = [names[0], names[len(names) // 2]] if op == "sendrecv" else names
    scale, size, ops = FLOOR_SCALE, FLOOR_SIZE, FLOOR_OPS
    if frames:
        scale = choose_scale(offered_load(topo), hosts=hosts).scale
        size, ops = FRAME_STEP_FRAMES * MSS * len(ranks) * 2 * int(scale), FRAME_OPS  # a ring step: size / ranks
    return {"name": f"floor-{op}" + ("-frames" if frames else ""), "topology": {"name": "hpn", "params": params},
            "routing": "precise", "qos": {"scale": scale}, "time": {"dilation": UNDILATED}, "channels": 2,
            "workload": {"collective": {"op": op, "size": size, "iters": ops,
                                        "ranks": ",".join(f"{h}:0" for h in ranks)}}}


def floor_point(hosts: int, op: str, frames: bool = False) -> dict:
    """One probe: its steps and what its ops took beyond their ideal time (wall seconds, undilated), the
    quantile kept."""
    exp = floor_experiment(hosts, op, frames)
    rec = run_one(exp["name"], from_dict(exp), Path.cwd(), None, 0)
    ops = exp["workload"]["collective"]["iters"]
    if rec.halted or len(rec.ops) < ops:
        raise RuntimeError(f"the per-op floor's {exp['name']} probe did not finish: {rec.halted}")
    warm = FRAME_WARMUP if frames else FLOOR_WARMUP
    secs = sorted(o.seconds * (1 - o.fraction_of_ideal) for o in rec.ops[warm:])
    return {"op": op, "frames": frames, "steps": len(rec.ops[0].step_seconds),
            "median_s": statistics.median(secs), "q_s": secs[min(len(secs) - 1, int(FLOOR_Q * len(secs)))],
            "fidelity": rec.fidelity.status}


def measure_floor(hosts: int = PROBE_HOSTS) -> dict:
    """The emulator's own time per op and per step on a fabric of `hosts` (the line through the two probes of
    next to no bytes), and what a step of full frames adds beyond that line."""
    one, ring, full = floor_point(hosts, "sendrecv"), floor_point(hosts, "allreduce"), \
        floor_point(hosts, "allreduce", frames=True)
    per_step = max(0.0, (ring["q_s"] - one["q_s"]) / max(1, ring["steps"] - one["steps"]))
    base = max(0.0, one["q_s"] - per_step * one["steps"])
    frame = max(0.0, (full["q_s"] - base) / full["steps"] - per_step)
    return {"base_s": round(base, 6), "per_step_s": round(per_step, 6), "frame_s": round(frame, 6),
            "quantile": FLOOR_Q, "points": [one, ring, full]}


def reaction_experiment(hosts: int, seconds: float = REACTION_SECONDS, budget_bps: float | None = None,
                        dilation: float = 1.0) -> dict:
    """A ring all-reduce over every host's NIC 0 beside a TCP incast over every NIC 1 toward the first host, both
    lasting about `seconds` at the fabric's rates: the incast's receiver ports cross XOFF again and again (TCP
    without end-to-end control fills them) while the agent watches a fabric busy with the all-reduce. The scale
    puts the budget (`budget_bps`, else this machine's) on the wire; time `dilation` D puts 1/D of it there (the
    hosts' TCP timers dilated with it, where slower links alone would time out)."""
    params = probe_params(hosts)
    topo = build("hpn", **params)
    names = [h.name for h in topo.hosts]
    n, port_bytes_s = len(names), host_port_gbps(topo) * 1e9 / 8
    ring = seconds * 2 * port_bytes_s * n / (2 * (n - 1))  # a rank sends 2(n-1)/n of it on its NIC's 2 ports
    incast = seconds * 2 * port_bytes_s / (n - 1)  # the receiver's 2 ports take all n-1 senders' parts
    offered = offered_load(topo, [(h, 0) for h in names] + [(names[0], 1)])
    scale = choose_scale(offered, budget_bps, hosts).scale
    return {"name": "pfc-reaction", "topology": {"name": "hpn", "params": params}, "routing": "precise",
            "qos": {"scale": scale}, "time": {"dilation": dilation}, "channels": 2, "step_timeout_s": 120,
            "jobs": [{"name": "allreduce", "collective": {"op": "allreduce", "size": int(ring), "iters": 1,
                                                          "ranks": ",".join(f"{h}:0" for h in names)}},
                     {"name": "incast", "collective": {"op": "incast", "size": int(incast), "iters": 1,
                                                       "ranks": ",".join(f"{h}:1" for h in names)}}]}


def measure_reaction(hosts: int = PROBE_HOSTS, seconds: float = REACTION_SECONDS, budget_bps: float | None = None,
                     dilation: float = 1.0) -> dict:
    """The PFC agent's reaction (a crossing in the kernel to the upstream classes paused, wall time) under
    `reaction_experiment`, and how far the switch queues went past XOFF (what the headroom must hold)."""
    exp = reaction_experiment(hosts, seconds, budget_bps, dilation)
    rec = run_one("pfc-reaction", from_dict(exp), Path.cwd(), None, 0)
    pfc = rec.pfc or {}
    r = pfc.get("reaction_ms") or {}
    if pfc.get("detect") != "kernel" or r.get("max") is None:
        raise RuntimeError("the PFC reaction probe saw no reaction on kernel events (detect "
                           f"{pfc.get('detect')!r}{', ' + pfc['detect_why'] if pfc.get('detect_why') else ''}): "
                           "'hpnlab doctor' says whether this machine can load the BPF programs")
    switch = [q for q in pfc.get("queues", {}).values() if not q.get("host")]
    # what a queue took in past XOFF and the headroom's fixed part, as time of its full ingress (a lower bound
    # where it dropped)
    needed = [(q["max_backlog"] - q["xoff"] - fixed_headroom(q["ingress_links"])) / q["ingress_Bps"]
              for q in switch if q["xoff_events"] and q.get("ingress_Bps")]
    return {"hosts": hosts, "scale": exp["qos"]["scale"], "dilation": dilation,
            "max_s": r["max"] / 1000, "p99_s": r["p99"] / 1000, "median_s": r["median"] / 1000,
            "needed_s": round(max(needed + [0.0]), 6), "window_ms": pfc.get("headroom_covers_ms"),
            "pauses": sum(t["pause_events"] for t in pfc.get("pauses_by_tier", {}).values()),
            "past_xoff_max_bytes": max((q["max_backlog"] - q["xoff"] for q in switch), default=0),
            "headroom_min_bytes": min((q["headroom"] for q in switch), default=None),
            "lossless_drops": rec.fidelity.lossless_drops, "fidelity": rec.fidelity.status,
            "reasons": rec.fidelity.why(), "cpu_idle_min": rec.fidelity.cpu_idle_min}


def calibrate(hosts: int = PROBE_HOSTS, seconds: float = SECONDS, progress: Callable[[dict], None] | None = None,
              save: bool = True, scales: list[float] | None = None, budget: bool = True,
              floor: bool = True, reaction: bool = True, transport: str = "tcp") -> dict:
    """Measure the budget (`sweep`, over `transport`: each has its own), the per-op floor (`measure_floor`)
    and/or the PFC reaction (`measure_reaction`) and cache them for this machine and size; a measurement not
    made, or that found nothing faithful, leaves the cached one as it was."""
    result: dict = {"machine": machine_key(), "hosts": hosts, "transport": transport}
    if budget:
        result |= sweep(hosts, seconds, progress, scales, transport)
    if floor:
        result["floor"] = measure_floor(hosts)
    if reaction:  # at the load the sweep just found faithful, if it found one
        try:
            result["reaction"] = measure_reaction(hosts, budget_bps=result.get("budget_bps"))
        except RuntimeError as exc:  # no kernel events here: the polling agent's headroom needs no reaction
            result["reaction_error"] = str(exc)
    # a sweep that found nothing faithful keeps the cached budget and the points it was measured with; roce's
    # are kept beside TCP's, under their own keys (calibrated.budget_key)
    key, points = budget_key(transport), "points" if transport != "roce" else "roce_points"
    keep = {k: v for k, v in result.items() if k != "transport" and (
        result.get("budget_bps") is not None or k not in ("budget_bps", "points"))}
    if key != "budget_bps" and "budget_bps" in keep:
        keep[key], keep[points] = keep.pop("budget_bps"), keep.pop("points")
    if save and (key in keep or "floor" in keep or "reaction" in keep):
        result["cache"] = str(save_budget(keep, hosts=hosts))
    return result


def sweep(hosts: int, seconds: float, progress: Callable[[dict], None] | None = None,
          scales: list[float] | None = None, transport: str = "tcp") -> dict:
    """Measure from light to heavy until a point is not faithful: the budget is the heaviest faithful load."""
    points = []
    for scale in scales or scales_for(hosts):
        for attempt in range(STEAL_RETRIES + 1):
            p = measure_point(scale, seconds, hosts, transport)
            if p["faithful"] or not stolen_only(p) or attempt == STEAL_RETRIES:
                break
            if progress:
                progress(p | {"retry": True})
        points.append(p)
        if progress:
            progress(p)
        if not p["faithful"]:
            break
    good = [p for p in points if p["faithful"]]
    return {"budget_bps": max((p["offered_bps"] for p in good), default=None), "points": points}
