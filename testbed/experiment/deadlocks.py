"""Where a planned run's lossless traffic can deadlock under PFC: the cyclic buffer dependencies
(controllers/deadlock.py) of its lossless jobs' flows over the routes each failure leaves (pure code).

A run states them before it starts (a plan note) and keeps them in its record (`pfc.buffer_cycles`): a
researcher injecting failures learns which failure made PFC able to deadlock, and which flows tie the cycle.
The controller's precise modes pin each flow to one of the ECMP paths taken here, so for them a cycle found is
one that *can* form, depending on the pins.
"""

from __future__ import annotations

from dataclasses import dataclass

from controllers.deadlock import Cycle, cycles, dependencies
from controllers.routing import RoutingGraph, compute_tables
from topos.model import Topology

from .failures import Event
from .spec import Experiment

MAX_STATES = 32  # distinct sets of links down analysed per run (a campaign may have thousands)
MAX_SHOWN = 3  # cycles per state in the record


@dataclass(frozen=True)
class RouteCycles:
    """The routes from `t` on (seconds after the traffic starts; None: from the start), with `down` links down,
    close these cycles among the lossless flows."""

    t: float | None
    down: tuple[str, ...]
    cycles: tuple[Cycle, ...]

    def line(self) -> str:
        when = "the healthy routes" if self.t is None else (
            f"the routes after t={self.t:g} s ({len(self.down)} link(s) down: {', '.join(self.down[:4])}"
            + (", ..." if len(self.down) > 4 else "") + ")")
        return (f"{when} close {len(self.cycles)} cyclic buffer dependenc{'y' if len(self.cycles) == 1 else 'ies'} "
                f"in the lossless class, e.g. {self.cycles[0]}: PFC can deadlock there (qos.pfc.watchdog breaks "
                "a deadlock)")

    def record(self) -> dict:
        return {"t": self.t, "down": list(self.down), "cycles": [str(c) for c in self.cycles[:MAX_SHOWN]],
                "count": len(self.cycles),
                "flows": sorted({f"{a}->{b}" for c in self.cycles[:MAX_SHOWN] for a, b in c.flows})}


def lossless_flows(exp: Experiment, jobs: list) -> list[tuple[str, int, str, int]]:
    """Every (source host, NIC, destination host, NIC) a lossless job of the plan sends between hosts."""
    lossless = {c.dscp for c in exp.qos.lossless}
    pairs = {(f.src[0], f.src[1], f.dst[0], f.dst[1]) for j in jobs if j.dscp in lossless
             for _op, sched in j.items if sched is not None for step in sched.steps for f in step
             if f.src[0] != f.dst[0]}
    return sorted(pairs)


def down_states(events: list[Event]) -> list[tuple[float, frozenset[str]]]:
    """The links down after each failure event that changes them (gray failures keep links up), at most
    MAX_STATES distinct sets, in time order."""
    down: set[str] = set()
    seen: set[frozenset[str]] = {frozenset()}
    states = []
    for e in events:
        if e.gray is not None:
            continue
        (down.difference_update if e.up else down.update)(e.links)
        now = frozenset(down)
        if now not in seen and len(seen) <= MAX_STATES:
            seen.add(now)
            states.append((e.t, now))
    return states


def buffer_cycles(exp: Experiment, topo: Topology, jobs: list, events: list[Event]) -> list[RouteCycles]:
    """The route states of the run, healthy first, whose lossless flows close a cyclic buffer dependency."""
    if not exp.qos.pfc.enabled:
        return []
    flows = lossless_flows(exp, jobs)
    if not flows:
        return []
    graph = RoutingGraph(topo)
    mode = "shortest" if exp.routing == "shortest" else "ecmp"  # precise pins among the ECMP paths
    found = []
    for t, down in [(None, frozenset()), *down_states(events)]:
        closed = cycles(dependencies(graph, compute_tables(graph, down, mode), flows))  # cut-off flows: skipped
        if closed:
            found.append(RouteCycles(t, tuple(sorted(down)), tuple(closed)))
    return found

