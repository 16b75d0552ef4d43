"""`scale: auto`: the scale that fits a workload's offered load into what this machine forwards faithfully.

The budget is the aggregate host-NIC rate (bits/s of emulated traffic, on
cross-segment paths of three switches) at which `hpnlab calibrate` measured
rate fidelity >= 0.95 with the CPU never running out. It is cached per machine,
per probe size and per transport (testbed/qos/calibrated.py; roce's NICs are the agents' own
Python; without a calibration of its own it takes TCP's, and says so): what a
machine forwards faithfully shrinks as the fabric grows (more ports for Open
vSwitch and the PFC agent to poll, more agent processes), so a fabric uses the
calibration of the largest probe not bigger than itself, and the choice says which. Without a calibration the
DEFAULT_BUDGET measured on the development machine (2 cores, userspace OVS)
is used, and the choice says so. A latency measured on a smaller fabric than
the one it is used for (a default one: on 8 hosts) is scaled by `growth`, the
ratio of their switch ports: the per-op floor's step and the PFC headroom's
window (`Reaction`).

    offered (real)  = per step, min(senders' NIC ports, receivers' NIC ports) x port rate,
                      the busiest step, summed over jobs running side by side
                      (a ring all-reduce: every rank's NIC; an incast: the receiver's)
    scale           = offered / (budget x SAFETY x D), rounded up to 1, 2, 2.5 or 5 x 10^k

With time dilation D (traffic/timebase.py) links run at rate / (scale x D): the same budget then carries D
times the bytes, so the bytes scale is D times smaller (ops of more packets, less rounded by the shapers).

`dilation: auto` chooses D from the emulator's own per-op latency (its floor, `Floor`: what an op of no
bytes takes through agents, coordinator and userspace OVS, in wall time; `hpnlab calibrate` measures it on
this machine, per fabric size) against each op's ideal time in the fabric:

    D needed for an op = floor(op's steps) / (LATENCY_SHARE x op's ideal time)
    D               = the largest over the ops, rounded up to 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 x 10^k,
                      lowered to what fits the wall-time cap (the fabric's time x D <= max wall)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

from topos import build
from topos.model import Topology
from traffic.timebase import MAX_DILATION

from .calibrated import PROBE_HOSTS, calibrations, floors, probe_for, probe_params, reactions
from .ports import switch_ports

DEFAULT_BUDGET_BPS = 128e6  # the lower of two calibrations of the development machine (128, 160 Mbit/s)
PORT_LOAD_BPS = 16e9  # emulated bits/s x host ports sending at once that kept CPU idle >= 16% (testbed/qos/cpu.py)
SAFETY = 1.0  # the calibration probe already runs agents, the controller and PFC polling, as runs do
NICE = (1, 2, 2.5, 5)
FINE = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8)  # dilations: each step costs wall time, so finer steps


@dataclass(frozen=True)
class Budget:
    bps: float  # for this load: the calibrated (or default) figure, held to PORT_LOAD over its sending ports
    calibrated: bool  # measured on this machine (else DEFAULT_BUDGET_BPS)
    at_hosts: int | None = None  # the probe fabric's size it was measured on
    ports: int | None = None  # the host ports sending at once, when they held it below the calibrated figure
    tcps: bool = False  # a roce run's, taken from TCP's calibration or default: roce has none of its own here

    def source(self, hosts: int | None = None) -> str:
        said = _source("the default budget", self.calibrated, self.at_hosts, hosts)
        if self.tcps:
            said += ", TCP's (roce not calibrated here: run 'hpnlab calibrate --transport roce')"
        return said + (f", held to {PORT_LOAD_BPS / 1e9:g} Gbit/s over its {self.ports} sending host ports "
                       "(testbed/qos/cpu.py)" if self.ports else "")


def _source(default: str, calibrated: bool, at_hosts: int | None, hosts: int | None) -> str:
    """Where a figure came from: this machine's calibration (and on what size), or the named default."""
    if not calibrated:
        return f"{default} (not calibrated here: run 'hpnlab calibrate')"
    return _measured_on(at_hosts, hosts)


def _grown(by: float, op: str) -> str:
    return f", {op} {by:.2f} for this fabric's switch ports" if by > 1 else ""


@functools.lru_cache(maxsize=64)
def _hpn_ports(hosts: int) -> int:
    return switch_ports(build("hpn", **probe_params(hosts)))


def growth(at_hosts: int | None, hosts: int | None, ports: int | None = None) -> float:
    """How much longer the emulator's own latencies are on a fabric of `hosts` than on the probe fabric of
    `at_hosts` (the development machine's 8 when None) that a figure was measured on: the ratio of their HPNs'
    switch ports, at least 1. Open vSwitch's one thread goes over every port, and agents and PFC queues come with
    them: here the per-step floor rose from 2.6 ms at 8 hosts to 12.5 ms at 64 (x 4.8; the ports x 5.3) and the
    PFC agent's longest reaction 2-3x. (The budget is not scaled so: at 32 and 64 hosts a budget divided by it
    put so few frames per step on ports of 100-400 kbit/s that the all-reduce fell from 85-90% of ideal to
    68-85%, while what the CPU lacked at 64 hosts is mostly not the load's.) `ports`: the fabric's own switch
    ports, where it is not a 2-rail HPN (8 rails put 5.3x the ports of the probe on 16 hosts)."""
    at = at_hosts or PROBE_HOSTS
    if ports is not None:
        return max(1.0, ports / _hpn_ports(at))
    if hosts is None or hosts <= at:
        return 1.0
    return _hpn_ports(-(-hosts // PROBE_HOSTS) * PROBE_HOSTS) / _hpn_ports(at)


def _measured_on(at_hosts: int | None, hosts: int | None) -> str:
    text = f"this machine's calibration on {at_hosts} hosts"
    if hosts is not None and at_hosts is not None and hosts > at_hosts:
        # Costs grow with the fabric (ports polled, agents), not only with the load.
        text += f" (this fabric has {hosts}: 'hpnlab calibrate --hosts {hosts}' measures its own)"
    return text


@dataclass(frozen=True)
class ScaleChoice:
    scale: float
    offered_real_bps: float
    budget: Budget
    hosts: int | None = None
    dilation: float = 1.0

    @property
    def offered_emulated_bps(self) -> float:
        """What the machine forwards: the offered load at rate / (scale x D)."""
        return self.offered_real_bps / self.scale / self.dilation

    def why(self) -> str:
        slow = f" with time dilated {self.dilation:g}x" if self.dilation != 1 else ""
        return (f"scale auto = 1/{self.scale:,.0f}{slow}: {self.offered_real_bps / 1e12:g} Tbit/s offered -> "
                f"{self.offered_emulated_bps / 1e6:.0f} Mbit/s emulated, within {SAFETY:.0%} of "
                f"{self.budget.bps / 1e6:.0f} Mbit/s from {self.budget.source(self.hosts)}")


# The emulator's own wall time for an op of nothing on the development machine, 8 hosts (hpnlab calibrate
# measures this machine's): handing the op out and hearing it is done, and each dependent step after that.
DEFAULT_FLOOR_S = (0.005, 0.003)  # (base, per step): see Floor; 8 hosts here: 3-7 ms + 2.6-3.2 ms
LATENCY_SHARE = 0.05  # the floor may be at most this share of an op's ideal time
DEFAULT_MAX_WALL_S = 600.0


@dataclass(frozen=True)
class Floor:
    """What an op of no bytes takes in wall time: `base_s` (the op handed to the ranks, its end heard) plus
    `per_step_s` for each step that waits for the one before (an agent's turn, a hop through userspace OVS).

    `frame_s`: what a step of full frames adds beyond that, in wall time, as `hpnlab calibrate` measured it at
    the rate runs use (testbed/experiment/calibration.py; 0 on the development machine: HTB's burst forwards a
    paced frame at once, so a frame is not stored whole at every hop)."""

    base_s: float
    per_step_s: float
    calibrated: bool = False
    at_hosts: int | None = None
    frame_s: float = 0.0
    grown: float = 1.0  # what per_step_s was multiplied by for a bigger fabric than measured (`growth`)

    def of(self, steps: int) -> float:
        return self.base_s + (self.per_step_s + self.frame_s) * max(1, steps)

    def dilation_for(self, ideal_s: float, steps: int) -> float:
        """The dilation that makes this floor LATENCY_SHARE of an op whose ideal time in the fabric is ideal_s."""
        return self.of(steps) / (LATENCY_SHARE * ideal_s) if ideal_s > 0 else math.inf

    def source(self, hosts: int | None = None) -> str:
        said = _source("the default floor", self.calibrated, self.at_hosts, hosts)
        if self.frame_s:
            said += f", plus {self.frame_s * 1000:.1f} ms per step of full frames"
        return said + _grown(self.grown, "per step x")

    def as_dict(self) -> dict:
        return {"base_s": self.base_s, "per_step_s": self.per_step_s, "calibrated": self.calibrated,
                "at_hosts": self.at_hosts, "frame_s": self.frame_s, "grown": self.grown}


# What a lossless queue takes in after it crossed XOFF, as time of its full ingress: the PFC agent's reaction
# on kernel events (the crossing in the kernel to its upstream classes paused) and what had already left the
# upstream queues for userspace OVS by then, beyond one OVS batch (the headroom's constant part). The default
# is the development machine's longest reaction at 8 hosts under an all-reduce beside a 7-to-1 incast
# (0.5-1.8 ms in eight runs; hpnlab calibrate measures this machine's, per fabric size). The headroom covers
# REACTION_MARGIN times the longer of the two: a pause later than the headroom covers is a drop in a lossless
# class, so the rare slow one matters, not the median.
DEFAULT_REACTION_MAX_S = 0.0015
REACTION_MARGIN = 2.0


@dataclass(frozen=True)
class Reaction:
    """How late an upstream port stops after a lossless queue crossed XOFF, in wall time (kernel events)."""

    max_s: float  # the agent's longest reaction
    p99_s: float | None = None
    calibrated: bool = False
    at_hosts: int | None = None
    needed_s: float = 0.0  # the longest a queue took in at its full ingress past XOFF and an OVS batch
    grown: float = 1.0  # what the window was multiplied by for a bigger fabric than measured (`growth`)

    @property
    def window_s(self) -> float:
        """What the headroom covers: ingress for this long after a crossing."""
        return REACTION_MARGIN * max(self.max_s, self.needed_s) * self.grown

    def why(self, hosts: int | None = None) -> str:
        said = _source("the development machine's", self.calibrated, self.at_hosts, hosts)
        return (f"PFC headroom covers {self.window_s * 1000:.1f} ms of ingress: {REACTION_MARGIN:g} x the longer of "
                f"the agent's reaction ({self.max_s * 1000:.2f} ms) and the queues' intake past XOFF "
                f"({self.needed_s * 1000:.2f} ms), from {said}{_grown(self.grown, 'x')}")


@dataclass(frozen=True)
class OpTime:
    """An op as dilation auto weighs it: its ideal time alone in the fabric (real rates) and its steps."""

    label: str
    ideal_s: float
    steps: int

    def need(self, floor: Floor) -> float:
        return floor.dilation_for(self.ideal_s, self.steps)

    def describe(self, floor: Floor) -> str:
        return (f"the smallest op ({self.label}, {self.steps} steps, ideal {self.ideal_s * 1e6:,.1f} us) needs "
                f"{{need}}x for the emulator's {floor.of(self.steps) * 1000:.1f} ms per op to be "
                f"{LATENCY_SHARE:.0%} of it")


@dataclass(frozen=True)
class IterationLoad:
    """A training job's iteration as dilation auto weighs it: its figure is the iteration, so its ops' floors
    are added up against the iteration's ideal time (an op of 4 bytes cannot be timed alone at any dilation;
    what it adds to the iteration can be kept small)."""

    label: str
    ideal_s: float  # one iteration, compute included
    ops: tuple[OpTime, ...]

    def floors_s(self, floor: Floor) -> float:
        return sum(floor.of(o.steps) for o in self.ops)

    def need(self, floor: Floor) -> float:
        return self.floors_s(floor) / (LATENCY_SHARE * self.ideal_s) if self.ideal_s > 0 else math.inf

    def describe(self, floor: Floor) -> str:
        return (f"{self.label}: an iteration (ideal {self.ideal_s:.4g} s, {len(self.ops):,} network ops whose floors "
                f"add up to {self.floors_s(floor):,.2f} s of wall time) needs {{need}}x for them to be "
                f"{LATENCY_SHARE:.0%} of it")


@dataclass(frozen=True)
class DilationChoice:
    dilation: float
    needed: float  # what makes every op's floor at most LATENCY_SHARE of it (may be over the cap)
    virtual_s: float  # the traffic's ideal time in the fabric (compute included), every iteration
    floor: Floor
    worst: OpTime | IterationLoad  # what needs the most
    bound: int  # ops and iterations that stay latency-bound at this dilation
    ops: int  # ops and iterations weighed
    max_wall_s: float
    hosts: int | None = None
    busy_s: float | None = None  # the part of virtual_s that costs wall time (compute skipping), if less
    cpu: str = ""  # why the CPU took D above what the latency needs (testbed/qos/cpu.py), if it did

    @property
    def costly_s(self) -> float:
        """The fabric's time that costs wall time: what compute skipping leaves of virtual_s."""
        return self.virtual_s if self.busy_s is None else self.busy_s

    @property
    def wall_s(self) -> float:
        """The wall time the traffic will take at the least (its ideal time that is not skipped, dilated)."""
        return self.costly_s * self.dilation

    def why(self) -> str:
        head = (f"dilation auto = {self.dilation:,.4g}: " + (f"{self.cpu}; for the latency, " if self.cpu else "")
                + self.worst.describe(self.floor).format(need=f"{min(self.needed, MAX_DILATION):,.0f}")
                + f" (from {self.floor.source(self.hosts)})")
        skipped = "" if self.busy_s is None else f" (compute skipped: {self.busy_s:.3g} s of it with ops in flight)"
        cost = (f"; {self.virtual_s:.3g} s of the fabric's time{skipped} will take {self.wall_s:,.0f} s or more of "
                "wall time")
        if not self.bound:
            return head + cost
        return (head + cost + f"; capped at {self.max_wall_s:,.0f} s of wall time (or at the largest dilation, "
                f"{MAX_DILATION:,.0f}): {self.bound} of {self.ops} ops or iterations stay latency-bound and the "
                "verdict will say so")


def choose_dilation(ops: list[OpTime], virtual_s: float, floor: Floor | None = None, hosts: int | None = None,
                    max_wall_s: float | None = None, iterations: list[IterationLoad] = (),
                    busy_s: float | None = None, ports: int | None = None) -> DilationChoice:
    """The least dilation that makes the floor small against every op and every iteration's ops together,
    within the wall-time cap (on `busy_s` when compute is skipped, else on `virtual_s`)."""
    floor = floor or load_floor(hosts=hosts, ports=ports)
    cap = DEFAULT_MAX_WALL_S if max_wall_s is None else max_wall_s
    items = [o for o in ops if o.ideal_s > 0] + list(iterations)
    if not items:
        raise ValueError("no op with bytes to weigh: dilation auto has nothing to go by")
    needs = [it.need(floor) for it in items]  # the floor is wall time: D shrinks all of it
    d = min(nice_ceil(max(needs), FINE), MAX_DILATION)
    costly = virtual_s if busy_s is None else busy_s
    if costly * d > cap:
        d = max(1.0, nice_floor(cap / costly, FINE))
    needed, worst = max(zip(needs, items, strict=True), key=lambda x: x[0])
    return DilationChoice(d, max(1.0, needed), virtual_s, floor, worst, sum(1 for n in needs if n > d), len(items),
                          cap, hosts, busy_s)


def load_budget(path: Path | None = None, hosts: int | None = None, ports: int | None = None,
                transport: str = "tcp") -> Budget:
    """This machine's budget for a fabric of `hosts` (`probe_for`) and `transport`, or the default; with
    `ports` host ports sending at once, at most PORT_LOAD_BPS over them (testbed/qos/cpu.py says why). roce
    without a calibration of its own takes TCP's, and says so: the transport benchmark measured it faithful at
    TCP's default (8 hosts at 128 Mbit/s: 93.8% of ideal, CPU idle 18% against TCP's 39%), its agents' CPU
    per emulated Gbit 4.1x TCP's."""
    known = calibrations(path, transport)
    tcps = transport == "roce" and not known
    if tcps:
        known = calibrations(path)
    at = probe_for(known, hosts) if known else None
    bps = known[at] if known else DEFAULT_BUDGET_BPS
    if ports and PORT_LOAD_BPS / ports < bps:
        return Budget(PORT_LOAD_BPS / ports, bool(known), at, ports, tcps)
    return Budget(bps, bool(known), at, tcps=tcps)


def load_floor(path: Path | None = None, hosts: int | None = None, ports: int | None = None) -> Floor:
    """This machine's per-op floor for a fabric of `hosts` (`probe_for`; its switch `ports`, if given, set
    the growth), or the default."""
    known = floors(path)
    if not known:
        base, per_step = DEFAULT_FLOOR_S
        return Floor(base, per_step * (g := growth(None, hosts, ports)), grown=g)
    at = probe_for(known, hosts)
    base, per_step, frame = known[at]
    return Floor(base, per_step * (g := growth(at, hosts, ports)), calibrated=True, at_hosts=at, frame_s=frame,
                 grown=g)


def load_reaction(path: Path | None = None, hosts: int | None = None) -> Reaction:
    """This machine's PFC reaction for a fabric of `hosts` (`probe_for`), or the development machine's."""
    known = reactions(path)
    if not known:
        return Reaction(DEFAULT_REACTION_MAX_S, grown=growth(None, hosts))
    at = probe_for(known, hosts)
    return Reaction(**known[at], calibrated=True, at_hosts=at, grown=growth(at, hosts))


def offered_load(topo: Topology, ranks: list[tuple[str, int]] | None = None) -> float:
    """Real bits/s when every port of the given ranks' NICs (default: every host NIC) sends at once."""
    nics = set(ranks) if ranks is not None else {(h.name, n) for h in topo.hosts for n in range(h.nics)}
    return sum(l.rate_gbps * 1e9 for h, n in nics for l in topo.links_of(h) if l.kind == "host-tor" and l.nic == n)


def nice_floor(x: float, steps: tuple = NICE) -> float:
    """The largest of steps x 10^k that is <= x (at least 1)."""
    if x <= 1:
        return 1.0
    exp = math.floor(math.log10(x))
    return float(max(m * 10 ** exp for m in steps if m * 10 ** exp <= x * (1 + 1e-12)))


def nice_ceil(x: float, steps: tuple = NICE) -> float:
    """The smallest of steps x 10^k that is >= x (by default 1, 2, 2.5 or 5 x 10^k: scales people can read and
    compare)."""
    if x <= 1:
        return 1.0
    exp = math.floor(math.log10(x))
    for k in (exp, exp + 1):
        for m in steps:
            if m * 10 ** k >= x * (1 - 1e-12):
                return float(m * 10 ** k)
    return float(10 ** (exp + 1))


def choose_scale(offered_real_bps: float, budget_bps: float | None = None, hosts: int | None = None,
                 dilation: float = 1.0, budget: Budget | None = None) -> ScaleChoice:
    if budget is None:
        budget = Budget(budget_bps, True, hosts) if budget_bps is not None else load_budget(hosts=hosts)
    return ScaleChoice(nice_ceil(offered_real_bps / (budget.bps * SAFETY * dilation)), offered_real_bps, budget,
                       hosts, dilation)
