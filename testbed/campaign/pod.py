"""From the emulated slice to the paper's pod: a Monte-Carlo year of failures for jobs of the paper's sizes, with
each outage's cost taken from what a campaign measured on the emulated fabric (pure).

The pod is HPN's (section 3): 15,360 GPUs, 1,920 hosts of 8 GPUs and 8 NICs of 2 ports, segments of 1,024 GPUs
under 16 ToRs (8 with a single ToR per rail), 60 aggregation switches per plane, every ToR with 60 uplinks.
A job of G GPUs on consecutive segments meets the failures of what it uses: its hosts' NIC-ToR links, its
segments' ToRs, and when it spans segments every aggregation switch and its ToRs' uplinks (within one
segment, its traffic never leaves the ToRs).

Per outage of a kind, as the campaign measured it for that kind (`Measured`): a restart with the measured
share of restarts, else a slowdown drawn from the measured ones. A NIC-ToR link or a ToR costs a job at the
pod what it cost the slice's job (a ring runs at its slowest NIC's pace, on either fabric); an aggregation
switch or an uplink takes a smaller share of the capacity at the pod (1 of 60 per plane against 1 of the
slice's few), so the slowdown measured beyond 1 is scaled by that share: a model, stated in the output. Costs
in GPU time as testbed/campaign/cost.py charges them (a restart's lost work: the outage's time within the
checkpoint interval, uniform).
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field

from .cost import Resilience
from .model import MONTH_S, Rate

POD_GPUS = 15_360
SEGMENT_GPUS = 1_024
GPUS_PER_HOST = 8
RAILS = 8
AGGS_PER_PLANE = 60
TOR_UPLINKS = 60
JOB_SIZES = (512, 1_024, 4_096, 15_360)  # a parameter: the paper's job sizes could not be re-read here
YEAR_MONTHS = 12.0


@dataclass(frozen=True)
class Measured:
    """One kind's outages as a campaign measured them on the emulated slice."""

    events: int
    restarts: int
    slowdowns: tuple[float, ...]  # each non-restart outage's slowdown (1.0 for no effect)

    @property
    def restart_share(self) -> float:
        return self.restarts / self.events


@dataclass(frozen=True)
class Pod:
    dual_tor: bool = True
    planes: int = 2

    def components(self, gpus: int) -> dict[str, int]:
        """What a job of `gpus` GPUs uses, per kind."""
        hosts = math.ceil(gpus / GPUS_PER_HOST)
        segments = math.ceil(gpus / SEGMENT_GPUS)
        tors = segments * RAILS * (2 if self.dual_tor else 1)
        across = segments > 1
        return {"nic-tor": hosts * RAILS * (2 if self.dual_tor else 1), "tor": tors,
                "agg": AGGS_PER_PLANE * self.planes if across else 0, "tor-agg": tors * TOR_UPLINKS if across else 0}


@dataclass
class Year:
    gpus: int
    interruptions: list[int] = field(default_factory=list)
    lost_gpu_hours: list[float] = field(default_factory=list)

    def stats(self) -> dict:
        return {"gpus": self.gpus, "interruptions": _ci(self.interruptions), "lost_gpu_hours": _ci(self.lost_gpu_hours),
                "goodput": round(1 - statistics.mean(self.lost_gpu_hours) / (self.gpus * YEAR_MONTHS * MONTH_S / 3600),
                                 6)}


def _ci(xs: list[float]) -> dict:
    """Mean and the central 95% of the trials."""
    s = sorted(xs)
    return {"mean": round(statistics.mean(s), 4), "p2.5": round(s[int(0.025 * (len(s) - 1))], 4),
            "p97.5": round(s[int(0.975 * (len(s) - 1))], 4)}


def _poisson(rng: random.Random, lam: float) -> int:
    """Knuth's method for small means, a rounded normal for large ones (a pod-year of links: thousands)."""
    if lam > 50:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    k, p, limit = 0, 1.0, math.exp(-lam)
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def year(gpus: int, pod: Pod, rates: dict[str, Rate], measured: dict[str, Measured], r: Resilience,
         trials: int, seed: int, slice_aggs_per_plane: int) -> Year:
    """`trials` years of one job of `gpus` GPUs on `pod`, kinds without a measurement left out (see `pod_picture`)."""
    rng = random.Random(seed)
    out = Year(gpus)
    uses = pod.components(gpus)
    share = slice_aggs_per_plane / AGGS_PER_PLANE  # an uplink-side outage's share of the capacity, pod vs slice
    for _ in range(trials):
        stops, lost = 0, 0.0
        for kind, m in measured.items():
            rate = rates[kind]
            for _ in range(_poisson(rng, uses.get(kind, 0) * rate.per_second * YEAR_MONTHS * MONTH_S)):
                repair = rng.lognormvariate(math.log(rate.repair_median_s), rate.repair_shape)
                if rng.random() < m.restart_share:
                    stops += 1
                    lost += gpus * (r.watchdog_s + r.restart_s + rng.uniform(0, r.checkpoint_s))
                elif m.slowdowns:
                    slow = rng.choice(m.slowdowns)
                    slow = 1 + (slow - 1) * share if kind in ("agg", "tor-agg") else slow
                    lost += gpus * repair * (1 - 1 / slow)
        out.interruptions.append(stops)
        out.lost_gpu_hours.append(lost / 3600)
    return out


def measured_from(outcomes: list[dict]) -> dict[str, Measured]:
    """Per kind, what a campaign's outcomes (cost.Outcome as dicts) measured."""
    out = {}
    for kind in sorted({o["kind"] for o in outcomes}):
        os_ = [o for o in outcomes if o["kind"] == kind]
        out[kind] = Measured(len(os_), sum(1 for o in os_ if o["outcome"] == "restart"),
                             tuple(o["slowdown"] if o["outcome"] == "slowdown" else 1.0
                                   for o in os_ if o["outcome"] != "restart"))
    return out


def pod_picture(pod: Pod, rates: dict[str, Rate], measured: dict[str, Measured], r: Resilience,
                sizes: tuple[int, ...] = JOB_SIZES, trials: int = 2000, seed: int = 0,
                slice_aggs_per_plane: int = 2) -> dict:
    """A year at the pod for each job size: interruptions and lost GPU-hours (mean, 95% of trials), goodput;
    which kinds the campaign did not measure (left out: their cost is not known)."""
    missing = [k for k in rates if k not in measured]
    return {"pod": {"gpus": POD_GPUS, "dual_tor": pod.dual_tor, "planes": pod.planes}, "trials": trials,
            "left_out": missing, "uplink_share": f"{slice_aggs_per_plane}/{AGGS_PER_PLANE}",
            "jobs": [year(g, pod, rates, measured, r, trials, seed + i, slice_aggs_per_plane).stats()
                     for i, g in enumerate(sizes)]}
