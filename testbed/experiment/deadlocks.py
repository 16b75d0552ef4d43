"""Where a planned run's lossless traffic can deadlock under PFC: the cyclic buffer dependencies
(controllers/deadlock.py) of its lossless jobs' flows over the routes each failure leaves (pure code).

A run states them before it starts (a plan note) and keeps them in its record (`pfc.buffer_cycles`): a
researcher injecting failures learns which failure made PFC able to deadlock, and which flows tie the cycle.
Afterwards the PFC agent's samples say whether one closed: every queue on it paused at once (`pfc.deadlocks`),
how often, for how long, and whether it still held when the traffic ended (a deadlock the watchdog did not
break).
The controller's precise modes pin each flow to one of the ECMP paths taken here, so for them a cycle found is
one that *can* form, depending on the pins.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from controllers.deadlock import Cycle, Queue, cycles, dependencies
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



@dataclass(frozen=True)
class Hold:
    """A cyclic buffer dependency the PFC agent's samples saw closed: every queue on it paused at once."""

    cycle: str
    closed: int  # stretches of consecutive samples in which it was
    first_s: float  # when it first closed (the samples' clock: fabric seconds from the agent's start)
    longest_s: float  # the longest, first to last sample in it (fabric time)
    to_end: bool  # closed in the last sample: held when the traffic ended, nothing broke it

    def record(self) -> dict:
        return asdict(self)

    def line(self, label: str) -> str:
        end = ("still held when the traffic ended: a PFC deadlock" if self.to_end
               else "broken each time (open at the end)")
        return (f"PFC deadlock, {label}: {self.cycle} closed (every queue on it paused) {self.closed} time(s) from "
                f"t={self.first_s:g} s, for {self.longest_s:g} s at most (fabric time), {end}")


def holds(routes: list[RouteCycles], topo: Topology, samples: list[dict], priorities: list[int]) -> list[Hold]:
    """Which of the cycles `routes` predicted the samples (the PFC agent's: `t`, `paused` queue keys) saw
    closed in one of the lossless `priorities`. A queue toward a neighbour is paused when one of the switch's
    ports to it is (parallel links: the cycle's flows may take any of them)."""
    found: dict[str, Hold] = {}
    paused = [(s["t"], set(s["paused"])) for s in samples]
    for cycle in {c for r in routes for c in r.cycles}:
        names = [queue_ports(topo, q) for q in cycle.queues]
        closed = [any(all(any(f"{p}/p{prio}" in now for p in ports) for ports in names) for prio in priorities)
                  for _t, now in paused]
        stretches = _stretches([t for t, _ in paused], closed)
        if stretches:
            found[str(cycle)] = Hold(str(cycle), len(stretches), stretches[0][0],
                                     round(max(b - a for a, b in stretches), 4), closed[-1])
    return sorted(found.values(), key=lambda h: (not h.to_end, -h.longest_s, h.cycle))


def queue_ports(topo: Topology, q: Queue) -> list[str]:
    """The switch's ports toward the neighbour, as queue keys name them (`switch:ofport`)."""
    return [f"{q.switch}:{l.port_of(q.switch)}" for l in topo.links_of(q.switch) if l.other(q.switch) == q.toward]


def _stretches(times: list[float], on: list[bool]) -> list[tuple[float, float]]:
    """(first, last) time of each run of consecutive True."""
    out: list[tuple[float, float]] = []
    start = None
    for i, (t, now) in enumerate(zip(times, on, strict=True)):
        if now and start is None:
            start = t
        if start is not None and (not now or i == len(times) - 1):
            out.append((start, t if now else times[i - 1]))
            start = None
    return out


MIN_FROZEN_SAMPLES = 10  # consecutive samples (every 20th poll of the agent): a paused queue resumes within one


@dataclass(frozen=True)
class Freeze:
    """Lossless queues holding frames that the samples saw paused, their backlogs unchanged, sample after sample
    to the end of the traffic: nothing moved in them and nothing resumed them, a deadlock whether or not the
    routes predicted one (the egress model pauses every ingress neighbour of a congested switch, which ties
    queues that no flow ties)."""

    queues: tuple[str, ...]  # queue keys (`port/pN`)
    from_s: float  # the samples' clock (fabric seconds) at the first sample of the stretch
    held_s: float  # to the last sample

    def record(self) -> dict:
        return {"queues": list(self.queues), "from_s": self.from_s, "held_s": self.held_s}

    def line(self, label: str) -> str:
        shown = ", ".join(self.queues[:4]) + (f" and {len(self.queues) - 4} more" if len(self.queues) > 4 else "")
        return (f"PFC froze, {label}: {len(self.queues)} lossless queue(s) paused with frames in them and their "
                f"backlogs unchanged from t={self.from_s:g} s to the end ({self.held_s:g} s, fabric time): "
                f"{shown}")


def frozen(samples: list[dict], priorities: list[int]) -> Freeze | None:
    """The lossless `priorities`' queues that were paused, with the same backlog above 0, in each of the last
    MIN_FROZEN_SAMPLES samples or more (`t`, `paused` queue keys, `backlog` by queue key), with the time since
    all of them were; None when none was."""
    if not samples:
        return None
    last = samples[-1]
    ends = tuple(f"/p{p}" for p in priorities)
    since: dict[str, int] = {}  # queue -> the first sample of its frozen stretch to the end
    for q in last["paused"]:
        b = last["backlog"].get(q, 0)
        if not q.endswith(ends) or not b:
            continue
        i = len(samples) - 1
        while i > 0 and q in samples[i - 1]["paused"] and samples[i - 1]["backlog"].get(q) == b:
            i -= 1
        if len(samples) - i >= MIN_FROZEN_SAMPLES:
            since[q] = i
    if not since:
        return None
    first = samples[max(since.values())]["t"]
    return Freeze(tuple(sorted(since)), first, round(last["t"] - first, 4))


def recorded(routes: list[RouteCycles], topo: Topology, pfc: dict) -> dict:
    """What the run's PFC record gets: the predicted cycles, those its samples saw closed, and lossless queues
    frozen to the end (`frozen`, null when none)."""
    samples, priorities = pfc.get("samples") or [], pfc.get("priorities") or []
    seen, froze = holds(routes, topo, samples, priorities), frozen(samples, priorities)
    return {"buffer_cycles": [r.record() for r in routes], "deadlocks": [h.record() for h in seen],
            "frozen": froze.record() if froze else None}
