"""Failure rates per component kind, and a seeded sample of a fabric's outages from them.

Each component (a NIC-ToR link, a ToR, an aggregation switch, a ToR-aggregation link) fails as a Poisson
process whose rate gives its kind's monthly failure probability p (rate = -ln(1 - p) per month), and each
failure is repaired after a lognormal time (median and shape per kind). The defaults, and where each comes
from (the docs' page on failure campaigns cites them; a figure not found is a parameter and says so):

- NIC-ToR link, 0.057% a month, and ToR, 0.051% a month: Alibaba HPN (SIGCOMM'24), section 2, the production
  figures that motivate the dual-ToR design, as this project reads them (the paper itself could not be
  re-read from this machine: check them against your copy, and override them in the experiment file).
- aggregation switch, 10% a year (0.87% a month): Gill et al., "Understanding Network Failures in Data
  Centers" (SIGCOMM'11): commodity ToRs fail about 5% a year and aggregation switches about 10%. (Their ToR
  figure, 0.43% a month, is an older fabric's; HPN's is kept as the ToR default.)
- ToR-aggregation link: no published monthly figure found here; HPN's NIC-ToR link figure (a link of the same
  optics) is the default. A parameter.
- Repair times: no published distribution found here. Defaults: a link 1 hour (cable or optics swapped),
  a switch 4 hours (replaced), lognormal with shape 1. Parameters.

A fabric slice this small fails rarely (8 hosts of HPN: 32 NIC-ToR links, about one failure every 55 months
at HPN's rate), so a campaign asks for a number of outages and the sample runs as many months of the slice as
that takes (`months` says how many it covered: the interruptions per month are figured against it).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from topos.model import Topology

MONTH_S = 30.44 * 86_400.0
KINDS = ("nic-tor", "tor", "agg", "tor-agg")


@dataclass(frozen=True)
class Rate:
    monthly: float  # probability that one component of the kind fails within a month
    repair_median_s: float
    repair_shape: float = 1.0  # sigma of the lognormal repair time
    source: str = ""

    @property
    def per_second(self) -> float:
        return -math.log1p(-self.monthly) / MONTH_S


DEFAULT_RATES = {
    "nic-tor": Rate(0.00057, 3600.0, 1.0, "HPN (SIGCOMM'24) section 2; repair time a parameter"),
    "tor": Rate(0.00051, 4 * 3600.0, 1.0, "HPN (SIGCOMM'24) section 2; repair time a parameter"),
    "agg": Rate(1 - 0.9 ** (1 / 12), 4 * 3600.0, 1.0,
                "Gill et al. (SIGCOMM'11): ~10% of aggregation switches a year; repair time a parameter"),
    "tor-agg": Rate(0.00057, 3600.0, 1.0, "no published figure found: HPN's NIC-ToR link rate; a parameter"),
}


@dataclass(frozen=True)
class Outage:
    t_s: float  # when it fails, in the slice's own (real) time from the campaign's start
    kind: str
    component: str  # a link's or a switch's name
    repair_s: float  # how long it stays down (real time)


def components(topo: Topology, kind: str) -> list[str]:
    """The names of a topology's components of one kind, in a stable order."""
    if kind == "nic-tor":
        return sorted(l.name for l in topo.links if l.kind == "host-tor")
    if kind == "tor-agg":
        return sorted(l.name for l in topo.links if l.kind == "tor-agg")
    if kind in ("tor", "agg"):
        return sorted(n.name for n in topo.by_role(kind))
    raise ValueError(f"unknown component kind {kind!r}: one of {', '.join(KINDS)}")


def sample(topo: Topology, rates: dict[str, Rate], outages: int, seed: int) -> tuple[list[Outage], float]:
    """The first `outages` outages of the fabric's components (superposed Poisson processes, one per
    component), and the months of the slice they span: the time of the last one, drawn as the next arrival of
    the whole fabric's process. Same seed, same outages."""
    rng = random.Random(seed)
    pool = [(kind, c, rates[kind]) for kind in KINDS if kind in rates for c in components(topo, kind)]
    total = sum(r.per_second for _k, _c, r in pool)
    if total <= 0 or outages < 1:
        return [], 0.0
    weights = [r.per_second for _k, _c, r in pool]
    out, t = [], 0.0
    for _ in range(outages):
        t += rng.expovariate(total)  # the superposition is Poisson at the summed rate ...
        kind, comp, r = rng.choices(pool, weights)[0]  # ... and each arrival is one component's, by its rate
        out.append(Outage(t, kind, comp, rng.lognormvariate(math.log(r.repair_median_s), r.repair_shape)))
    return out, t / MONTH_S


def expected_per_month(topo: Topology, rates: dict[str, Rate]) -> dict[str, float]:
    """Outages a month per kind on this fabric (what a long sample's counts approach)."""
    return {k: len(components(topo, k)) * rates[k].per_second * MONTH_S for k in KINDS if k in rates}
