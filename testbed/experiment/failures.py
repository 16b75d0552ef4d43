"""Failure injection: a schedule of link and switch events, fired in the data plane at their times.

`expand` (pure) turns an experiment's failures into timed events on link names:
a switch "down" is all its links down; a flap is `count` down/up cycles of
`period`; random failures are a Poisson process per link (rate per minute, as in
HPN's production statistics) drawn from the experiment's seed, each repaired
after `repair_after` seconds. `Injector` fires them against a running network
(interfaces really go down) and logs the time of each (virtual, and wall).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass

from topos.errors import InputError
from topos.model import Topology
from traffic.timebase import Clock, stamp

from .spec import MAX_EVENTS, Experiment

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Event:
    t: float  # seconds after the workload starts
    up: bool
    links: tuple[str, ...]
    cause: str


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
        if f.action == "flap":
            for c in range(f.count):
                events.append(Event(f.at + 2 * c * f.period, False, links, f"flap {what}"))
                events.append(Event(f.at + (2 * c + 1) * f.period, True, links, f"flap {what}"))
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
    return sorted(events, key=lambda e: (e.t, e.up))


class Injector:
    """Fires events against `net` (anything with set_link) from its own thread, each at its virtual time on the
    run's clock (its wall time is D times that under time dilation)."""

    def __init__(self, net, events: list[Event], clock: Clock | None = None):
        self.net = net
        self.events = events
        self.clock = clock or Clock()
        self.log: list[dict] = []
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
                     "up": ev.up, "links": list(ev.links), "cause": ev.cause, "time": time.time()}
            try:
                for link in ev.links:
                    self.net.set_link(link, up=ev.up)
            except Exception as exc:  # noqa: BLE001 - a campaign goes on; the record says what did not happen
                entry["error"] = f"{type(exc).__name__}: {exc}"
                log.warning("failure %r at %.2f s did not complete: %s", ev.cause, ev.t, entry["error"])
            self.log.append(entry)

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
