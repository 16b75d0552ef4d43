"""Failure injection: a schedule of link and switch events, fired in the data plane at their times.

`expand` (pure) turns an experiment's failures into timed events on link names:
a switch "down" is all its links down; a flap is `count` down/up cycles of
`period`; random failures are a Poisson process per link (rate per minute, as in
HPN's production statistics) drawn from the experiment's seed, each repaired
after `repair_after` seconds; a campaign's outages (testbed/campaign), sampled from production failure rates,
are played one after another, each held `hold_s` (`campaign_events`). `Injector` fires them against a running network
(interfaces really go down) and logs the time of each (virtual, and wall).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass

from testbed.campaign.model import DEFAULT_RATES, MONTH_S, Outage, Rate, sample
from topos.errors import InputError
from topos.model import Topology
from traffic.timebase import Clock, stamp

from .failure_spec import GRAY, MAX_EVENTS
from .spec import Experiment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    t: float  # seconds after the workload starts
    up: bool
    links: tuple[str, ...]
    cause: str
    outage: int | None = None  # a campaign's outage this is the start or the end of
    gray: tuple[str, float] | None = None  # (lossy, loss rate), (degrade, fraction of the rate) or (restore, 0)
    flap: float | None = None  # one down or up of a flapping link: its period (the detector watches for flaps)


def host_links_down(events: list[Event], topo: Topology) -> list[str]:
    """The host links the schedule takes down (named, flapped, at a failed ToR, or drawn at random), in order."""
    host = {lk.name for lk in topo.links if lk.kind == "host-tor"}
    return list(dict.fromkeys(name for e in events if not e.up and e.gray is None for name in e.links
                              if name in host))


def host_links_down_in_any_rep(exp: Experiment, topo: Topology) -> list[str]:
    """The host links the schedule takes down in any of the experiment's repetitions: each draws its random
    failures and campaign with its own seed (Experiment.repetition), and the transport is chosen from these, so
    that every repetition of a variant runs on the same one and they compare."""
    names = [n for r in range(exp.repetitions) for n in host_links_down(expand(exp.repetition(r), topo), topo)]
    return list(dict.fromkeys(names))


def expand(exp: Experiment, topo: Topology) -> list[Event]:
    """Every failure event in time order; refused (before any is built) when there would be more than
    MAX_EVENTS: high random-failure rates over a long horizon on a large fabric reach millions."""
    rf = exp.random_failures
    planned = sum(2 * f.count if f.action == "flap" else 1 for f in exp.failures)
    if rf is not None:
        links = sum(1 for l in topo.links if l.kind in rf.kinds)
        # one down/up pair per link per (mean gap + repair time) over the horizon
        planned += 2 * links * exp.horizon_s / (60.0 / rf.link_down_per_min + rf.repair_after)
    if planned > MAX_EVENTS:
        raise InputError(f"the failure schedule would hold about {planned:,.0f} events, more than {MAX_EVENTS:,}",
                         "lower the flap counts or link_down_per_min, or shorten horizon_s", field="failures",
                         value=f"{len(exp.failures)} failures" + (", random_failures" if rf else ""))
    events: list[Event] = []
    for f in exp.failures:
        links = (topo.find_link(f.link).name,) if f.link else tuple(l.name for l in topo.links_of(f.node))
        what = f.link or f.node
        if f.action in GRAY:
            rate = topo.find_link(f.link).rate_gbps
            value = {"lossy": f.loss, "degrade": (f.rate_gbps or 0) / rate}.get(f.action, 0.0)
            events.append(Event(f.at, True, links, f"{f.action} {what}", gray=(f.action, value)))
        elif f.action == "flap":
            for c in range(f.count):
                events.append(Event(f.at + 2 * c * f.period, False, links, f"flap {what}", flap=f.period))
                events.append(Event(f.at + (2 * c + 1) * f.period, True, links, f"flap {what}", flap=f.period))
        else:
            events.append(Event(f.at, f.action == "up", links, f"{f.action} {what}"))
    if rf is not None:
        rng = random.Random(exp.seed)
        rate = rf.link_down_per_min / 60.0
        for l in topo.links:
            if l.kind not in rf.kinds:
                continue
            t = rng.expovariate(rate)
            while t < exp.horizon_s and len(events) < 2 * MAX_EVENTS:  # the draw may exceed the mean
                events.append(Event(t, False, (l.name,), f"random {l.name}"))
                events.append(Event(t + rf.repair_after, True, (l.name,), f"repair {l.name}"))
                t += rf.repair_after + rng.expovariate(rate)
    events += campaign_events(exp, topo)
    return sorted(events, key=lambda e: (e.t, e.up))


def campaign_rates(exp: Experiment) -> dict[str, Rate]:
    """The campaign's kinds that can fail, at the file's rates or else the published defaults."""
    c = exp.campaign
    rates = {k: Rate(**c.rates[k].model_dump(), source="the experiment file") if k in c.rates else DEFAULT_RATES[k]
             for k in c.kinds} if c is not None else {}
    return {k: r for k, r in rates.items() if r.monthly > 0}


def campaign_outages(exp: Experiment, topo: Topology) -> tuple[list[Outage], float]:
    """The campaign's outages and the months of this fabric they span."""
    if exp.campaign is None:
        return [], 0.0
    return sample(topo, campaign_rates(exp), exp.campaign.outages, exp.seed)


def campaign_plan(exp: Experiment, topo: Topology) -> str:
    """What a campaign will play, in a line: its outages by kind, the months of the slice they span, the time
    it plays them in and the compression that is."""
    outages, months = campaign_outages(exp, topo)
    c = exp.campaign
    played = c.start_s + len(outages) * (c.hold_s + c.settle_s)
    kinds = ", ".join(f"{sum(1 for o in outages if o.kind == k)} {k}" for k in c.kinds)
    return (f"campaign: {len(outages)} outages ({kinds}) over {months:,.1f} months of this fabric, played in "
            f"{played:,.0f} s of the fabric's time ({months * MONTH_S / played:,.0f}x compressed), each held "
            f"{c.hold_s:g} s")


def campaign_events(exp: Experiment, topo: Topology) -> list[Event]:
    """Each outage in a slot of its own: down at start_s + k (hold_s + settle_s), repaired hold_s later (or after
    its real repair time, if shorter), a switch as all its links."""
    c = exp.campaign
    events = []
    for k, o in enumerate(campaign_outages(exp, topo)[0]):
        t = c.start_s + k * (c.hold_s + c.settle_s)
        switch = o.kind in ("tor", "agg")
        links = tuple(l.name for l in topo.links_of(o.component)) if switch else (o.component,)
        what = f"{o.kind} {o.component}"
        events += [Event(t, False, links, f"outage {what}", k),
                   Event(t + min(c.hold_s, o.repair_s), True, links, f"repair {what}", k)]
    return events


class Injector:
    """Fires events against `net` (anything with set_link) from its own thread, each at its virtual time on the
    run's clock (its wall time is D times that under time dilation)."""

    def __init__(self, net, events: list[Event], clock: Clock | None = None):
        self.net = net
        self.events = events
        self.clock = clock or Clock()
        self.log: list[dict] = []
        self._storming: set[str] = set()  # host links whose NIC pauses its ToR now (pfc_storm)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hpnlab-failures", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for ev in self.events:
            if self.clock.sleep_until(self.clock.wall_at(ev.t), self._stop):
                return
            entry = {"t": stamp(self.clock.now()), "wall_t": round(self.clock.wall_now(), 4), "planned_t": ev.t,
                     "up": ev.up, "links": list(ev.links), "cause": ev.cause, "time": time.time(), "outage": ev.outage,
                     **({"gray": list(ev.gray)} if ev.gray else {}), **({"flap": ev.flap} if ev.flap else {})}
            try:
                for link in ev.links:
                    self._fire(link, ev)
            except Exception as exc:  # noqa: BLE001 - a campaign goes on; the record says what did not happen
                entry["error"] = f"{type(exc).__name__}: {exc}"
                log.warning("failure %r at %.2f s did not complete: %s", ev.cause, ev.t, entry["error"])
            self.log.append(entry)

    def _fire(self, link: str, ev: Event) -> None:
        if ev.gray is None:
            self.net.set_link(link, up=ev.up)
        elif ev.gray[0] == "lossy":
            self.net.gray.set_loss(link, ev.gray[1])
        elif ev.gray[0] == "degrade":
            self.net.gray.set_rate(link, ev.gray[1])
        elif ev.gray[0] == "pfc_storm":
            self.net.pfc_storm(link, True)
            self._storming.add(link)
        elif link in self._storming:  # restore: the storm ends (the agent's watchdog restores what it mitigated)
            self._storming.discard(link)
            self.net.pfc_storm(link, False)
        else:
            self.net.gray.restore(link)

    def pending(self) -> bool:
        """Events left to fire (a campaign's jobs run until its last outage is repaired)."""
        return len(self.log) < len(self.events) and not self._stop.is_set()

    def next_epoch(self) -> float | None:
        """When (the emulation's epoch time) the next event fires, if one is left: compute skipping stops
        short of it."""
        left = self.events[len(self.log):]
        return self.clock.wall_at(left[0].t) if left else None

    def stop(self) -> list[dict]:
        """Stops firing; returns the planned events that never fired (the traffic ended first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        return [{"planned_t": ev.t, "up": ev.up, "links": list(ev.links), "cause": ev.cause}
                for ev in self.events[len(self.log):]]
