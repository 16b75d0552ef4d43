"""`hpnlab calibrate`: how much traffic this machine forwards faithfully, measured once and cached.

The probe is the default HPN (8 hosts, 16 switches) with every host sending to
a host of the other segment and receiving from one, on both ports of NIC 0,
precise routing (disjoint paths: nothing but the machine limits the rate),
lossless class with PFC, for a few seconds at each scale of SCALES, lighter
first. A point is faithful when the run's fidelity verdict is (CPU, OVS
thread, steal, PFC) and the rate fidelity, goodput / (line rate x TCP's
payload share), is at least RATE_FIDELITY_MIN. The budget is the offered
emulated load (all sending ports x their rate) of the heaviest faithful point.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from testbed.qos.scale import machine_key, save_budget
from topos import build

from .runner import run_one
from .spec import from_dict

SCALES = (80_000, 40_000, 25_000, 20_000, 15_000, 10_000, 5_000)
RATE_FIDELITY_MIN = 0.95
TCP_PAYLOAD_SHARE = 1448 / 1514  # MSS with timestamps over a full frame on the wire
SECONDS = 6.0


def probe_experiment(scale: float, seconds: float = SECONDS) -> dict:
    """Two jobs side by side: sendrecv pairs across the segments, one each way."""
    topo = build("hpn")
    hosts = [h.name for h in topo.hosts]
    half = len(hosts) // 2
    there = [x for i in range(half) for x in (hosts[i], hosts[half + i])]
    back = [x for i in range(half) for x in (hosts[half + i], hosts[i])]
    ports = 2
    port_bps = topo.links_of(hosts[0])[0].rate_gbps * 1e9 / scale
    size = int(ports * port_bps * seconds / 8) * scale  # real bytes: the emulated flow lasts `seconds`
    job = {"op": "sendrecv", "size": int(size), "iters": 1}
    return {"name": "calibrate", "topology": {"name": "hpn"}, "routing": "precise",
            "qos": {"scale": scale}, "channels": ports, "step_timeout_s": 120,
            "jobs": [{"name": "there", "collective": {**job, "ranks": ",".join(f"{h}:0" for h in there)}},
                     {"name": "back", "collective": {**job, "ranks": ",".join(f"{h}:0" for h in back)}}]}


def measure_point(scale: float, seconds: float = SECONDS) -> dict:
    exp = from_dict(probe_experiment(scale, seconds))
    rec = run_one(f"scale-{scale:g}", exp, Path.cwd(), None, 0)
    topo = build("hpn")
    offered = len(topo.hosts) * 2 * topo.links_of(topo.hosts[0].name)[0].rate_gbps * 1e9 / scale
    fractions = [o["fraction_of_ideal"] for o in rec["ops"]]
    rate_fidelity = min(fractions, default=0.0) / TCP_PAYLOAD_SHARE
    faithful = bool(fractions) and rec["fidelity"]["faithful"] and rate_fidelity >= RATE_FIDELITY_MIN \
        and not rec["halted"]
    return {"scale": scale, "offered_bps": offered, "rate_fidelity": round(rate_fidelity, 4),
            "fidelity": rec["fidelity"], "bytes_ok": rec["fidelity"]["bytes_ok"], "faithful": faithful}


def calibrate(scales: tuple[float, ...] = SCALES, seconds: float = SECONDS,
              progress: Callable[[dict], None] | None = None, save: bool = True) -> dict:
    """Measure from light to heavy until a point is not faithful; cache the budget for this machine."""
    points = []
    for scale in scales:
        p = measure_point(scale, seconds)
        points.append(p)
        if progress:
            progress(p)
        if not p["faithful"]:
            break
    good = [p for p in points if p["faithful"]]
    result = {"machine": machine_key(), "budget_bps": max((p["offered_bps"] for p in good), default=None),
              "points": points}
    if save and result["budget_bps"] is not None:
        result["cache"] = str(save_budget(result))
    return result
