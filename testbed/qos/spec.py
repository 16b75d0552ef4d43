"""What the QoS layer is asked to do, and the numbers derived from it (pure: no tc, no root).

Rates: a link of R Gbit/s in the Topology is emulated at R / scale. The default
scale puts a 200G host port at 20 Mbit/s, where 2 cores of userspace OVS keep
up (docs/benchmarks.md, the scale table).

Classes (HTB children of one per-port parent at the link rate):
    high         DSCP 48 (CNP, control), TCP pure ACKs and the traffic agents' one-byte
                 acknowledgements (`ack_priority`): a RoCE NIC answers in
                 hardware, not behind its own queued data                 strict priority 0
    lossless<p>  one per lossless 802.1p priority p (`lossless`, up to 8; default one,
                 priority 3 with DSCP 26, which also takes UDP dport 4791: RoCEv2)
                 each with its own queue, PFC thresholds and pauses      priorities 1.. in list order
    default      everything else (lossy)                                 last
With `scheduling: weighted` every class shares one HTB priority and gets the
link in proportion to its weight (the lossless weight split among the lossless
priorities by their `weight`).

PFC defaults, per lossless priority, from the scaled port rate r and the
switch's total ingress rate R_in (bytes/s; the sum of its other links), the
agent's poll period T and its reaction time A (`pfc.reaction_ms`):
    headroom = R_in x A + R_x x L + 32 x MTU + 2 x MTU + N_in x MTU
                                       (what can still arrive while a pause takes
                                        effect: for A, ingress until the agent acted;
                                        the queue sees every ingress, so all count;
                                        each of the N_in ingress links' paused gate
                                        may still finish one frame (shaper.py);
                                        R_x of them from other servers, whose pause is
                                        a message that takes up to L = pfc.remote_ms;
                                        and an OVS batch: what userspace OVS had already
                                        read from the paused port goes on. Measured:
                                        placement at D = 5, ToR uplinks 4:1, queues ran
                                        53-60 KB past XOFF with poll gaps of 7-13 ms
                                        (11-20 KB of ingress growth); without the batch
                                        they dropped in 2 of 2 runs)
    A        = with kernel events (the network resolves it, testbed/qos/ports.py):
               twice the longest reaction `hpnlab calibrate` measured (crossing in
               the kernel -> upstream classes set; 1.5 ms on the development
               machine); polling: 5 T, the agent's longest gap between polls,
               measured at 2.4-4.2 T in quiet runs on 2 cores (two T, one to notice
               and one to act, let a crux run drop 2 lossless packets at a 2.6 T gap)
    XOFF     = max(64 x MTU, 4 x r x T,  (userspace OVS forwards in batches of up to 32
                   Kmax + 32 x MTU)      frames, and what piled up while its thread was
                                         away leaves in batches back to back: one flow at
                                         a port's own rate built 54 frames at the next
                                         port; a burst, not congestion. Kmax: ECN's, the
                                         published one for the port's speed in emulated
                                         bytes (testbed/qos/ecn.py): marks act first)
    XON      = XOFF / 2
    lossless queue limit = XOFF + headroom + 2 x MTU  (never reached while PFC works)
A priority's own xoff_bytes / xon_bytes / headroom_bytes override pfc's.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topos.errors import InputError

from . import ecn as marking
from .mmu import MmuSpec
from .pfc_watchdog import Action, WatchdogConfig

log = logging.getLogger(__name__)

MTU = 1514  # bytes on the wire for a full Ethernet frame without FCS
OVS_BATCH = 32  # NETDEV_MAX_BURST: frames userspace OVS forwards per batch
# What a queue must take before it means congestion: two batches. Measured (SimAI microAllReduce, D = 1,500, one
# flow per ToR port at that port's rate): ToR queues of up to 54 frames; with XOFF at one batch PFC paused the
# fabric in 2 of 5 runs, which then took 1.20-1.33x the closed form; at two batches 0 pauses in 6, 1.07-1.08x.
OVS_BURST_FRAMES = 2 * OVS_BATCH
KICK_MINOR = 0x50  # the class a resume's kick frame goes to, and is dropped in (testbed/qos/shaper.py)
HTB_BURST = 2 * MTU  # bytes every HTB class may send at once (burst and cburst): a frame that arrives paced goes on
REACTION_POLLS = 5  # a polling agent's headroom covers this many poll periods of ingress (module docstring)
HIGH_MINOR, LOSSLESS_MINOR, DEFAULT_MINOR = 0x10, 0x30, 0x40  # HTB minor ids under 1: (lossless: + priority)
PARENT_MINOR = 0x1
MAX_TIME_MS = 10_000  # buffer_ms and delay_ms, as asked (before dilation)
Cc = Literal["none", "ecn", "dctcp", "dcqcn"]  # congestion control at the hosts (testbed/qos/cc.py)
CCS: tuple[str, ...] = get_args(Cc)
HTB_LEVELS = 8  # TC_HTB_NUMPRIO: strict scheduling has high, the lossless priorities and default in 8 levels


def polled_reaction_ms(poll_ms: float) -> float:
    """What a polling agent's headroom covers: REACTION_POLLS of its poll periods."""
    return REACTION_POLLS * poll_ms


def fixed_headroom(ingress_links: int) -> int:
    """The headroom's part that no rate or reaction sets: an OVS batch already read from the paused port, two
    frames, and the frame each ingress link's paused gate may still finish (see the module's docstring)."""
    return (OVS_BATCH + 2 + ingress_links) * MTU


def lossless_class(priority: int) -> str:
    return f"lossless{priority}"


def lossless_minor(priority: int) -> int:
    return LOSSLESS_MINOR + priority


def class_of_minor(minor: int) -> str | None:
    """The class an HTB minor id (or leaf major) stands for, None for ones this layer does not make."""
    if minor == HIGH_MINOR:
        return "high"
    if minor == DEFAULT_MINOR:
        return "default"
    if LOSSLESS_MINOR <= minor < LOSSLESS_MINOR + 8:
        return lossless_class(minor - LOSSLESS_MINOR)
    return None


class WatchdogSpec(BaseModel):
    """The PFC watchdog (testbed/qos/pfc_watchdog.py), off by default as on switches: a lossless queue held paused
    while it has frames and sends none is in a storm (a stuck peer, a deadlock); it is mitigated until the peer has
    let go for restore_ms. Times are the fabric's: a dilated run stretches them with its clock."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    enabled: bool = Field(False, description="watch every paused lossless queue for storms")
    action: Literal["drop", "forward", "alert"] = Field(
        "drop", description="in a storm: drop (the queue takes nothing, what it held drains), forward (send past "
                            "the pause), alert (only report it)")
    poll_ms: float = Field(100.0, gt=0, le=10_000, description="how often paused queues are looked at")
    detect_polls: int = Field(2, ge=1, le=100, description="stalled polls in a row that make a storm")
    restore_ms: float = Field(200.0, ge=0, le=60_000, description="how long the peer must have let go before PFC "
                              "is honoured on the queue again")

    def config(self, dilation: float) -> WatchdogConfig:
        """The state machine's settings on this machine's clock (`dilation` times the fabric's)."""
        return WatchdogConfig(self.poll_ms * dilation, self.detect_polls, self.restore_ms * dilation,
                              Action(self.action))


class PfcSpec(BaseModel):
    """The pause agent: whether it runs, its thresholds (derived from the port rate and the measured reaction
    unless given), how it sees crossings (kernel events or polling)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "5" or true is no number
    enabled: bool = Field(True, description="pause upstream when a lossless queue passes XOFF")
    poll_ms: float | Literal["auto"] = Field("auto", description="agent poll period; auto: 5 ms for the 8-host "
                                                              "HPN's 128 switch ports, longer in proportion")
    xoff_bytes: int | None = Field(None, gt=0, le=1 << 30, description="default from rate and poll period")
    xon_bytes: int | None = Field(None, ge=0, le=1 << 30, description="resume below this; default XOFF / 2")
    headroom_bytes: int | None = Field(None, ge=0, le=1 << 30, description="room past XOFF for ingress until the "
                                       "pause acts; default from the reaction and the ingress rates")
    frames: bool = Field(False, description="also emit 802.1Qbb PAUSE frames (scapy) for captures")
    remote_ms: float = Field(5.0, gt=0, le=1000, description="what a pause toward another server's port adds "
                             "(a message between the servers' agents): headroom for ingress across servers")
    reaction_ms: float | Literal["auto"] = Field(
        "auto", description="how long after a crossing the headroom takes ingress for (see the module's "
                            "docstring); auto: from the agent's measured reaction with kernel events, 5 poll "
                            "periods when polling")
    detect: Literal["auto", "kernel", "poll"] = Field(
        "auto", description="how XOFF/XON crossings are seen: kernel (BPF on the qdisc tracepoints, per packet), "
                            "poll (every queue read each poll_ms), auto (kernel where this machine can)")
    watchdog: WatchdogSpec = Field(default_factory=WatchdogSpec, description="storm detection and recovery")
    model: Literal["auto", "egress", "ingress"] = Field(
        "egress", description="whom a congested switch pauses: ingress (802.1Qbb: each ingress port by its own "
                              "bytes in the shared buffer, kernel detection only), egress (every ingress "
                              "neighbour of a queue past XOFF), auto (ingress where the agent acts on kernel "
                              "events on one server and its buffers fit the kernel's queues, else egress)")
    mmu: MmuSpec = Field(default_factory=MmuSpec, description="the shared buffer of model ingress")

    @model_validator(mode="before")
    @classmethod
    def _gone(cls, data):
        """`pause_rate_fraction` (what a paused class still sent) is gone, a pause now stops: older experiment
        files and run records still read, and say so."""
        if isinstance(data, dict) and "pause_rate_fraction" in data:
            data = {k: v for k, v in data.items() if k != "pause_rate_fraction"}
            log.warning("qos.pfc.pause_rate_fraction is ignored: a paused priority sends nothing now (CHANGELOG, "
                        "2026-11-28); leave it out")
        return data

    @model_validator(mode="after")
    def _check(self) -> PfcSpec:
        if self.poll_ms != "auto" and not 0 < self.poll_ms <= 1000:
            raise InputError("poll_ms must be in (0, 1000] (or auto)", "e.g. poll_ms: 5, or poll_ms: auto",
                             field="qos.pfc.poll_ms", value=self.poll_ms)
        if self.model == "ingress" and self.detect == "poll":
            raise InputError("model ingress counts each ingress port's bytes in the kernel; detect poll cannot",
                             "detect: auto (or kernel), or model: egress", field="qos.pfc.detect", value="poll")
        if self.reaction_ms != "auto" and not 0 < self.reaction_ms <= 10_000:
            raise InputError("reaction_ms must be in (0, 10000] (or auto)", "e.g. reaction_ms: 3, or auto",
                             field="qos.pfc.reaction_ms", value=self.reaction_ms)
        return self

    def reaction_s(self) -> float:
        """The time the headroom covers: as given, or (auto, not resolved for kernel events) the polling agent's."""
        if self.reaction_ms != "auto":
            return self.reaction_ms / 1000
        if self.poll_ms == "auto":
            raise ValueError("pfc.poll_ms auto is resolved (testbed.qos.ports.resolve) before ports are planned")
        return polled_reaction_ms(self.poll_ms) / 1000


class EcnSpec(BaseModel):
    """ECN marking at switch egress per lossless priority, RED-style as DCQCN's switches (testbed/qos/kqueues.py).

    The default thresholds are HPCC's and SimAI's per link speed (Kmin 600 KB, Kmax 2,400 KB at 200 Gbit/s, Pmax
    0.2), in the fabric's bytes: divided by the bytes scale, floored at the emulator's burst (testbed/qos/ecn.py).
    With time dilated to keep the bytes near the fabric's (cc_incast: 1/10) they are the published ones; at an
    undilated run's scale (1/10,000) they are a fraction of a frame, and the floor gives Kmin a quarter of XOFF,
    Kmax at XOFF. With cc dctcp (and no thresholds given) marking is DCTCP's step at K = Kmin: with the RED ramp
    the queue settled near the middle of it (56-57 KB of a 97 KB XOFF in an 8-host incast), where the ramp's
    probability matched what DCTCP needs."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "5" or true is no number
    enabled: bool = Field(False, description="mark ECN-capable lossless packets CE at switch egress")
    kmin_bytes: int | None = Field(None, ge=0, le=1 << 30, description="default: HPCC's per link speed, scaled")
    kmax_bytes: int | None = Field(None, gt=0, le=1 << 30, description="default: HPCC's per link speed, scaled")
    pmax: float = Field(marking.PMAX, gt=0, le=1, description="marking probability just below kmax")
    mark_at: Literal["enqueue", "dequeue"] = Field(
        "enqueue", description="judge a packet on the queue it joins (enqueue) or on the queue it leaves behind "
                               "(dequeue, as the HPCC simulator's switches)")

    @model_validator(mode="after")
    def _check(self) -> EcnSpec:
        if self.kmin_bytes is not None and self.kmax_bytes is not None and self.kmin_bytes > self.kmax_bytes:
            raise InputError("kmin_bytes must not be above kmax_bytes", "e.g. kmin_bytes: 20000, kmax_bytes: 80000",
                             field="qos.ecn.kmin_bytes", value=self.kmin_bytes)
        return self

    def red(self, defaults: tuple[int, int], step: bool = False) -> tuple[int, int]:
        """(kmin, kmax) bytes: as given, else the port's `defaults`; `step`: DCTCP's marking (every packet above one
        threshold K, RFC 8257), K at kmin unless kmax is given."""
        kmin = defaults[0] if self.kmin_bytes is None else self.kmin_bytes
        if step and self.kmax_bytes is None:
            return kmin, kmin
        return kmin, max(kmin, defaults[1]) if self.kmax_bytes is None else self.kmax_bytes


class LosslessPriority(BaseModel):
    """One lossless 802.1p priority: its DSCP, its share under weighted scheduling, its own PFC thresholds."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "5" or true is no number
    priority: int = Field(ge=0, le=7, description="the 802.1p priority its pauses name")
    dscp: int = Field(ge=0, le=63, description="the DSCP that selects this priority")
    weight: float = Field(1.0, gt=0, le=1e6, description="share of the lossless weight (weighted scheduling)")
    xoff_bytes: int | None = Field(None, gt=0, le=1 << 30, description="default: pfc.xoff_bytes or derived")
    xon_bytes: int | None = Field(None, ge=0, le=1 << 30, description="default: pfc.xon_bytes or XOFF / 2")
    headroom_bytes: int | None = Field(None, ge=0, le=1 << 30, description="default: pfc.headroom_bytes or "
                                       "derived")

    @property
    def name(self) -> str:
        return lossless_class(self.priority)


class QosSpec(BaseModel):
    """How every link is shaped: the bytes scale, priority classes and their DSCPs, lossless priorities with PFC,
    ECN marking and the hosts' congestion control."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)  # "5" or true is no number
    scale: float | Literal["auto"] = Field(10_000.0, description="emulated rate = topology rate / scale; auto: "
                                                              "from the offered load and this machine's budget")
    buffer_ms: float = Field(20.0, gt=0, description="lossy queue limit, in ms at the port rate (at most 10 s)")
    min_buffer_bytes: int = Field(16 * MTU, gt=0, le=1 << 30, description="the least a lossy queue holds")
    scheduling: Literal["strict", "weighted"] = Field(
        "strict", description="strict: high, then the lossless priorities, then default; weighted: one HTB "
                              "priority, rates in proportion to weights")
    weights: dict[str, float] = Field(default_factory=lambda: {"high": 10, "lossless": 60, "default": 30},
                                      description="weighted scheduling: each class's share")
    lossless: list[LosslessPriority] = Field(
        default_factory=lambda: [LosslessPriority(priority=3, dscp=26)], min_length=1, max_length=8,
        description="lossless priorities, first served first under strict scheduling; the first is the default "
                    "class of lossless traffic and takes RoCEv2 (UDP 4791)")
    high_dscp: int = Field(48, ge=0, le=63, description="the DSCP of the high class (CNPs, control)")
    roce_udp_port: int = Field(4791, ge=1, le=65535, description="UDP destination port classed as RoCEv2 "
                                                               "(the first lossless priority)")
    ack_priority: bool = Field(True, description="TCP pure ACKs (segments without payload) and the agents' one-byte "
                                                     "acknowledgements ride the high class")
    delay_ms: float | None = Field(None, gt=0, description="needs netem (at most 10 s)")
    loss_pct: float | None = Field(None, gt=0, le=100, description="needs netem")
    pfc: PfcSpec = Field(default_factory=PfcSpec, description="the pause agent's thresholds and detection")
    ecn: EcnSpec = Field(default_factory=EcnSpec, description="ECN marking at switch egress")
    cc: Cc = Field(
        "none", description="congestion control at the hosts (tcp transport, testbed/qos/cc.py): none, classic "
                            "ECN, DCTCP, or DCQCN (RoCE's, on the TCP stand-in); any but none turns ECN marking "
                            "on unless ecn says otherwise")
    # Set by dilated(), not by experiment files (time.dilation is theirs): the scale and the times above are this
    # many times what was asked, and the bounds apply to what was asked. A dilated spec so stays a valid one
    # (the PFC agent's process and a server's agent take it as JSON): buffer_ms 20 at D = 1,500 is 30 s.
    dilated_by: float = Field(1.0, ge=1, description="set by the runner from time.dilation",
                              json_schema_extra={"internal": True})

    @model_validator(mode="after")
    def _check(self) -> QosSpec:
        if self.cc != "none" and not self.ecn.enabled:
            if "ecn" in self.model_fields_set and "enabled" in self.ecn.model_fields_set:
                raise InputError(f"cc: {self.cc} reacts to ECN marks, and qos.ecn.enabled is false",
                                 "set qos.ecn.enabled: true (or leave it out), or cc: none", field="qos.cc",
                                 value=self.cc)
            self.ecn = self.ecn.model_copy(update={"enabled": True})
        d = self.dilated_by
        if self.scale != "auto" and not 1 <= self.scale / d <= 1e9:
            raise InputError("scale must be 1 to 1e9 (or auto)", "e.g. scale: 20000, or scale: auto",
                             field="qos.scale", value=self.scale / d)
        for name in ("buffer_ms", "delay_ms"):
            if (value := getattr(self, name)) is not None and value / d > MAX_TIME_MS:
                raise InputError(f"{name} must be at most {MAX_TIME_MS:,} ms", f"e.g. {name}: 20", field=f"qos.{name}",
                                 value=value / d)
        if set(self.weights) != {"high", "lossless", "default"}:
            raise InputError("weights must name exactly the classes high, lossless, default",
                             "e.g. weights: {high: 10, lossless: 60, default: 30}", field="qos.weights",
                             value=sorted(self.weights))
        if any(not 0 < w <= 1e6 for w in self.weights.values()):
            raise InputError("weights must be positive (at most 1e6)", "give every class a weight > 0",
                             field="qos.weights", value=self.weights)
        for what in ("priority", "dscp"):
            seen = [getattr(c, what) for c in self.lossless]
            dup = next((v for v in seen if seen.count(v) > 1), None)
            if dup is not None:
                raise InputError(f"two lossless priorities have the same {what}", f"give each its own {what}",
                                 field=f"qos.lossless[].{what}", value=dup)
        if self.high_dscp in {c.dscp for c in self.lossless}:
            raise InputError("the high class and a lossless priority have the same DSCP", "e.g. lossless 26, high 48",
                             field="qos.lossless[].dscp", value=self.high_dscp)
        if self.scheduling == "strict" and len(self.lossless) > HTB_LEVELS - 2:
            raise InputError(f"strict scheduling serves high, the lossless priorities and default in HTB's "
                             f"{HTB_LEVELS} levels", f"give at most {HTB_LEVELS - 2} lossless priorities, or use "
                             "scheduling: weighted", field="qos.lossless", value=len(self.lossless))
        return self

    def dilated(self, dilation: float) -> QosSpec:
        """What the network is shaped with when the emulation runs `dilation` times slower than the fabric
        (traffic/timebase.py): rates / dilation (scale x dilation), and what is given as a time at those rates
        (the lossy buffer, a link delay) x dilation, so a buffer holds the same bytes and a delay is the same
        in the fabric's time. The PFC agent's poll is this machine's own clock and stays as it is."""
        if dilation == 1:
            return self
        if self.scale == "auto":
            raise ValueError("dilate a numeric scale (resolve 'auto' first)")
        upd: dict = {"scale": self.scale * dilation, "buffer_ms": self.buffer_ms * dilation,
                     "dilated_by": self.dilated_by * dilation}
        if self.delay_ms:
            upd["delay_ms"] = self.delay_ms * dilation
        return self.model_copy(update=upd)

    @property
    def lossless_dscp(self) -> int:
        """The default lossless class's DSCP (the first priority): what lossless traffic uses unless told."""
        return self.lossless[0].dscp

    def lossless_dscp_of(self, priority: int) -> int:
        for c in self.lossless:
            if c.priority == priority:
                return c.dscp
        raise KeyError(priority)

    def class_minors(self) -> dict[str, int]:
        """Class name -> HTB minor id, in the order the classes are served."""
        return {"high": HIGH_MINOR, **{c.name: lossless_minor(c.priority) for c in self.lossless},
                "default": DEFAULT_MINOR}


@dataclass(frozen=True)
class PfcPlan:
    """One lossless priority's queue at one port."""

    limit: int  # queue limit in bytes
    xoff: int
    xon: int
    headroom: int
    ingress: int = 0  # bytes/s the port's device takes in on its other links: what arrives while a pause acts
    ingress_links: int = 1  # those links
    needed: int = 0  # the headroom the reaction and the ingress call for (the default); a given one may be less
    kmin: int = 0  # ECN marking, where qos.ecn turns it on (testbed/qos/ecn.py): none at or below kmin bytes,
    kmax: int = 0  # every ECN-capable packet at or above kmax

    def covers_ms(self) -> float | None:
        """How long of the port's full ingress the headroom takes past its fixed part (module docstring), in ms;
        None without ingress."""
        if not self.ingress:
            return None
        return max(0, self.headroom - fixed_headroom(self.ingress_links)) / self.ingress * 1000


@dataclass(frozen=True)
class PortPlan:
    """Numbers for one egress port."""

    rate_bps: int  # emulated link rate
    buffer_bytes: int  # lossy queue limit
    lossless: dict[int, PfcPlan]  # 802.1p priority -> its queue's numbers
    class_rates_bps: dict[str, int]  # guaranteed rate per class (weighted) or the full rate (strict)
    prio: dict[str, int]


def port_plan(rate_gbps: float, spec: QosSpec, ingress_gbps: float | None = None,
              remote_ingress_gbps: float = 0.0, ingress_links: int = 1) -> PortPlan:
    """Numbers for an egress port of `rate_gbps` on a device whose `ingress_links` other links sum to
    `ingress_gbps`, of which `remote_ingress_gbps` come from another server (over several servers)."""
    if spec.scale == "auto" or spec.pfc.poll_ms == "auto":
        raise ValueError("scale and pfc.poll_ms auto are resolved (testbed.qos.ports.resolve) before ports are "
                         "planned")
    rate_bps = max(int(rate_gbps * 1e9 / spec.scale), 8000)
    r = rate_bps / 8  # bytes per second
    r_in = (rate_gbps if ingress_gbps is None else ingress_gbps) * 1e9 / spec.scale / 8
    t, react = spec.pfc.poll_ms / 1000, spec.pfc.reaction_s()
    late = remote_ingress_gbps * 1e9 / spec.scale / 8 * spec.pfc.remote_ms / 1000
    buffer_bytes = max(spec.min_buffer_bytes, int(r * spec.buffer_ms / 1000))
    pfc = spec.pfc
    floor = max(OVS_BURST_FRAMES * MTU, int(4 * r * t))
    published = marking.scaled(rate_gbps, spec.scale / spec.dilated_by)  # in emulated bytes: / the bytes scale
    # XOFF one OVS batch above the published Kmax: ECN's marks act before pauses
    xoff_default = max(floor, published[1] + OVS_BATCH * MTU)
    lossless = {}
    for c in spec.lossless:
        derived = int(r_in * react + late) + fixed_headroom(ingress_links)
        headroom = next(v for v in (c.headroom_bytes, pfc.headroom_bytes, derived) if v is not None)
        xoff = next(v for v in (c.xoff_bytes, pfc.xoff_bytes, xoff_default) if v is not None)
        # marking reaches every packet by the time the queue pauses (or, lossy, drops)
        top = xoff if pfc.enabled else buffer_bytes
        kmin, kmax = spec.ecn.red(marking.thresholds(published, floor, top), spec.cc == "dctcp")
        xon = next(v for v in (c.xon_bytes, pfc.xon_bytes, xoff // 2) if v is not None)
        if xon >= xoff:
            raise InputError("XON must be below XOFF", f"use an xon_bytes below {xoff}",
                             field=f"qos.lossless[priority {c.priority}].xon_bytes", value=xon)
        # Without PFC a lossless class is an ordinary queue: it drops when the buffer is full.
        lossless[c.priority] = PfcPlan(xoff + headroom + 2 * MTU if pfc.enabled else buffer_bytes, xoff, xon, headroom,
                                       int(r_in), ingress_links, derived, kmin, kmax)
    classes = spec.class_minors()
    if spec.scheduling == "strict":
        # A 1% floor each; the rest of the link is borrowed in priority order (HTB lends by prio).
        rates = {c: max(8000, rate_bps // 100) for c in classes}
        prio = {c: i for i, c in enumerate(classes)}
    else:
        share = {"high": spec.weights["high"], "default": spec.weights["default"]}
        lw = sum(c.weight for c in spec.lossless)
        share.update({c.name: spec.weights["lossless"] * c.weight / lw for c in spec.lossless})
        total = sum(share.values())
        rates = {c: max(8000, int(rate_bps * share[c] / total)) for c in classes}
        prio = {c: 1 for c in classes}
    return PortPlan(rate_bps, buffer_bytes, lossless, rates, prio)
