"""What the QoS layer is asked to do, and the numbers derived from it (pure: no tc, no root).

Rates: a link of R Gbit/s in the Topology is emulated at R / scale. The default
scale puts a 200G host port at 20 Mbit/s, where 2 cores of userspace OVS keep
up (see ../shared/DESIGN.md, Scale).

Classes (HTB children of one per-port parent at the link rate):
    high      DSCP 48 (CNP, control), and TCP pure ACKs (`ack_priority`): a RoCE NIC
              answers in hardware, not behind its own queued data    strict priority 0
    lossless  DSCP 26 or UDP dport 4791 (RoCEv2 data, priority 3)   priority 1
    default   everything else (lossy)          priority 2
With `scheduling: weighted` all three share one HTB priority and get the link
in proportion to their weights instead.

PFC defaults, from the scaled port rate r and the switch's total ingress rate
R_in (bytes/s; the sum of its other links) and the agent's poll period T:
    headroom = 2 x R_in x T + 2 x MTU  (what can still arrive while a pause takes
                                        effect: one poll to notice, one to act; the
                                        queue sees every ingress, so all of them count)
    XOFF     = max(32 x MTU, 4 x r x T)  (userspace OVS forwards in batches of up to 32
                                         frames: a batch is a burst, not congestion)
    XON      = XOFF / 2
    lossless queue limit = XOFF + headroom + 2 x MTU  (never reached while PFC works)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topos.errors import InputError

MTU = 1514  # bytes on the wire for a full Ethernet frame without FCS
OVS_BATCH = 32  # NETDEV_MAX_BURST: frames userspace OVS forwards per batch
CLASS_IDS = {"high": 0x10, "lossless": 0x30, "default": 0x40}  # HTB minor ids under 1:
PARENT_MINOR = 0x1


class PfcSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool = True
    poll_ms: float | Literal["auto"] = Field("auto", description="agent poll period; auto: 5 ms for the 8-host "
                                                              "HPN's 128 switch ports, longer in proportion")
    xoff_bytes: int | None = Field(None, gt=0, le=1 << 30, description="default from rate and poll period")
    xon_bytes: int | None = Field(None, ge=0, le=1 << 30)
    headroom_bytes: int | None = Field(None, ge=0, le=1 << 30)
    frames: bool = Field(False, description="also emit 802.1Qbb PAUSE frames (scapy) for captures")
    pause_rate_fraction: float = Field(1 / 16, gt=0, lt=1, description="what a paused class still sends")

    @model_validator(mode="after")
    def _check(self) -> PfcSpec:
        if self.poll_ms != "auto" and not 0 < self.poll_ms <= 1000:
            raise InputError("poll_ms must be in (0, 1000] (or auto)", "e.g. poll_ms: 5, or poll_ms: auto",
                             field="qos.pfc.poll_ms", value=self.poll_ms)
        return self


class QosSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    scale: float | Literal["auto"] = Field(10_000.0, description="emulated rate = topology rate / scale; auto: "
                                                              "from the offered load and this machine's budget")
    buffer_ms: float = Field(20.0, gt=0, le=10_000, description="lossy queue limit, in ms at the port rate")
    min_buffer_bytes: int = Field(16 * MTU, gt=0, le=1 << 30)
    scheduling: Literal["strict", "weighted"] = "strict"
    weights: dict[str, float] = Field(default_factory=lambda: {"high": 10, "lossless": 60, "default": 30})
    lossless_dscp: int = Field(26, ge=0, le=63)
    high_dscp: int = Field(48, ge=0, le=63)
    roce_udp_port: int = Field(4791, ge=1, le=65535)
    ack_priority: bool = Field(True, description="TCP segments under 128 bytes (pure ACKs) ride the high class")
    delay_ms: float | None = Field(None, gt=0, le=10_000, description="needs netem")
    loss_pct: float | None = Field(None, gt=0, le=100, description="needs netem")
    pfc: PfcSpec = Field(default_factory=PfcSpec)

    @model_validator(mode="after")
    def _check(self) -> QosSpec:
        if self.scale != "auto" and not 1 <= self.scale <= 1e9:
            raise InputError("scale must be 1 to 1e9 (or auto)", "e.g. scale: 20000, or scale: auto",
                             field="qos.scale", value=self.scale)
        if set(self.weights) != set(CLASS_IDS):
            raise InputError("weights must name exactly the classes high, lossless, default",
                             "e.g. weights: {high: 10, lossless: 60, default: 30}", field="qos.weights",
                             value=sorted(self.weights))
        if any(not 0 < w <= 1e6 for w in self.weights.values()):
            raise InputError("weights must be positive (at most 1e6)", "give every class a weight > 0",
                             field="qos.weights", value=self.weights)
        if self.lossless_dscp == self.high_dscp:
            raise InputError("the lossless and high classes need different DSCPs", "e.g. lossless 26, high 48",
                             field="qos.lossless_dscp", value=self.lossless_dscp)
        return self


@dataclass(frozen=True)
class PortPlan:
    """Numbers for one egress port."""

    rate_bps: int  # emulated link rate
    buffer_bytes: int  # lossy queue limit
    lossless_limit: int
    xoff: int
    xon: int
    headroom: int
    class_rates_bps: dict[str, int]  # guaranteed rate per class (weighted) or the full rate (strict)
    prio: dict[str, int]


def port_plan(rate_gbps: float, spec: QosSpec, ingress_gbps: float | None = None) -> PortPlan:
    """Numbers for an egress port of `rate_gbps` on a device whose other links sum to `ingress_gbps`."""
    if spec.scale == "auto" or spec.pfc.poll_ms == "auto":
        raise ValueError("scale and pfc.poll_ms auto are resolved (testbed.qos.ports.resolve) before ports are "
                         "planned")
    rate_bps = max(int(rate_gbps * 1e9 / spec.scale), 8000)
    r = rate_bps / 8  # bytes per second
    r_in = (rate_gbps if ingress_gbps is None else ingress_gbps) * 1e9 / spec.scale / 8
    t = spec.pfc.poll_ms / 1000
    buffer_bytes = max(spec.min_buffer_bytes, int(r * spec.buffer_ms / 1000))
    headroom = spec.pfc.headroom_bytes if spec.pfc.headroom_bytes is not None else int(2 * r_in * t + 2 * MTU)
    xoff = spec.pfc.xoff_bytes if spec.pfc.xoff_bytes is not None else max(OVS_BATCH * MTU, int(4 * r * t))
    xon = spec.pfc.xon_bytes if spec.pfc.xon_bytes is not None else xoff // 2
    if xon >= xoff:
        raise InputError("XON must be below XOFF", f"use an xon_bytes below {xoff}", field="qos.pfc.xon_bytes",
                         value=xon)
    # Without PFC the lossless class is an ordinary queue: it drops when the buffer is full.
    lossless_limit = xoff + headroom + 2 * MTU if spec.pfc.enabled else buffer_bytes
    if spec.scheduling == "strict":
        # A 1% floor each; the rest of the link is borrowed in priority order (HTB lends by prio).
        rates = {c: max(8000, rate_bps // 100) for c in CLASS_IDS}
        prio = {"high": 0, "lossless": 1, "default": 2}
    else:
        total = sum(spec.weights.values())
        rates = {c: max(8000, int(rate_bps * spec.weights[c] / total)) for c in CLASS_IDS}
        prio = {c: 1 for c in CLASS_IDS}
    return PortPlan(rate_bps, buffer_bytes, lossless_limit, xoff, xon, headroom, rates, prio)
