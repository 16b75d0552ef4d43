"""A shared-buffer switch's memory management unit as 802.1Qbb switches and ns-3's switch MMU account it (pure).

A switch pauses an ingress port by that port's own bytes inside the switch, not by the egress queue they wait
in. Each (ingress port, priority) owns:

- a *reserve* (4 KiB by default): its first bytes, always admitted, never paused;
- bytes in the *shared* buffer, up to a dynamic threshold: what is left of the shared buffer (the buffer less
  every port's headroom and reserve, less the shared bytes in use) times alpha (1/8 by default; a port twice
  the NIC rate gets twice the alpha, as in HPCC's simulation). Past it the port's priority is paused (XOFF);
- *headroom* per port: what still arrives after the pause was sent (the port plan's, testbed/qos/spec.py).
  A frame that finds headroom and shared space both full is dropped: the lossless class lost it.

The pause is released (XON) when the port's headroom is empty and its shared bytes are below the threshold by
`resume_offset` (3 KiB), or are gone: the hysteresis keeps a port from flapping at the threshold.

Defaults are the Broadcom-like ones of HPCC's ns-3 simulation (the one SimAI's network backend runs): a 32 MiB
buffer, reserve 4 KiB, resume offset 3 KiB, alpha 1/8. In the emulation every byte figure is scaled like the
links (`scaled`).

A PAUSE frame carries a time in quanta of 512 bit times at the link's rate (`pause_s`). The receiver stops the
priority until that time runs out or a frame with 0 quanta resumes it; the sender refreshes the pause while the
condition holds, before it runs out (`PauseTimer`, `refresh_s`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from topos.errors import InputError

QUANTUM_BITS = 512  # 802.1Qbb: a pause quantum is 512 bit times at the link's rate
MAX_QUANTA = 0xFFFF


@dataclass(frozen=True)
class MmuConfig:
    """The buffer's sizes in bytes and the dynamic threshold's alpha as a shift (alpha = 2^-shift)."""

    buffer_bytes: int = 32 << 20
    reserve_bytes: int = 4 << 10
    resume_offset_bytes: int = 3 << 10
    alpha_shift: int = 3

    def scaled(self, scale: float) -> MmuConfig:
        """The same switch for links emulated `scale` times slower (bytes scaled like the links')."""
        return MmuConfig(max(1, round(self.buffer_bytes / scale)), max(1, round(self.reserve_bytes / scale)),
                         max(1, round(self.resume_offset_bytes / scale)), self.alpha_shift)


class MmuSpec(BaseModel):
    """`qos.pfc.mmu`: a switch's shared buffer as `pfc.model: ingress` accounts it, in the fabric's bytes (scaled
    like the links). HPCC's defaults; in the emulation every figure has a floor the emulator needs (kmmu.py)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)
    buffer_bytes: int | Literal["auto"] = Field(
        "auto", description="each switch's buffer; auto: HPCC's 32 MiB scaled, or where that is too small for "
                            "the emulator, the ports' headroom and reserve plus room for one port to reach XOFF")
    reserve_bytes: int = Field(4 << 10, ge=0, le=1 << 30, description="per (ingress port, priority): never paused")
    resume_offset_bytes: int = Field(3 << 10, ge=0, le=1 << 30, description="XON this far below the threshold")
    alpha_shift: int = Field(3, ge=0, le=16, description="the dynamic threshold's alpha as 2^-shift at the NIC "
                             "rate (a port twice as fast gets one less)")

    @model_validator(mode="after")
    def _check(self) -> MmuSpec:
        if self.buffer_bytes != "auto" and not 0 < self.buffer_bytes <= 1 << 40:
            raise InputError("buffer_bytes must be in (0, 2^40] (or auto)", "e.g. buffer_bytes: 33554432 (32 MiB)",
                             field="qos.pfc.mmu.buffer_bytes", value=self.buffer_bytes)
        return self


def alpha_shift(rate_bps: float, nic_rate_bps: float, base_shift: int = 3) -> int:
    """A port's alpha as a shift: the base, one less for each doubling of its rate past the NIC's (a faster port
    may hold more of the shared buffer)."""
    shift = base_shift
    while rate_bps > nic_rate_bps and shift > 0:
        shift -= 1
        rate_bps /= 2
    return shift


@dataclass
class SwitchMmu:
    """Ingress accounting of one switch: bytes per (ingress port, priority) in reserve, shared and headroom.

    `headroom` and `shifts` are per ingress port; every port the switch has must be in `headroom` (a port's
    planned lossless headroom, PfcPlan.headroom in testbed/qos/spec.py: its ingress for the pause's reaction)."""

    config: MmuConfig
    headroom: dict[int, int]
    shifts: dict[int, int] = field(default_factory=dict)
    ingress: dict[tuple[int, int], int] = field(default_factory=dict)  # reserve + shared bytes
    hdrm: dict[tuple[int, int], int] = field(default_factory=dict)  # bytes that went to headroom
    shared_used: int = 0
    paused: set[tuple[int, int]] = field(default_factory=set)

    def __post_init__(self) -> None:
        reserved = sum(self.headroom.values()) + self.config.reserve_bytes * len(self.headroom)
        if reserved >= self.config.buffer_bytes:
            raise ValueError(f"the ports' headroom and reserve ({reserved:,} bytes) fill the whole buffer "
                             f"({self.config.buffer_bytes:,} bytes): nothing is left to share")
        self._fixed = reserved

    def threshold(self, port: int) -> int:
        """The dynamic threshold: the free shared buffer times the port's alpha."""
        free = self.config.buffer_bytes - self._fixed - self.shared_used
        return free >> self.shifts.get(port, self.config.alpha_shift)

    def shared_of(self, port: int, prio: int) -> int:
        return max(0, self.ingress.get((port, prio), 0) - self.config.reserve_bytes)

    def admit(self, port: int, prio: int, size: int) -> bool:
        """Whether a frame of `size` bytes in through `port` finds room (else the lossless class drops it)."""
        return (size + self.hdrm.get((port, prio), 0) <= self.headroom[port]
                or size + self.shared_of(port, prio) <= self.threshold(port))

    def enqueue(self, port: int, prio: int, size: int) -> None:
        """A frame admitted: its bytes go to the reserve, the shared buffer or, past the threshold, headroom."""
        key = (port, prio)
        new = self.ingress.get(key, 0) + size
        if new <= self.config.reserve_bytes:
            self.ingress[key] = new
        elif new - self.config.reserve_bytes > self.threshold(port):
            self.hdrm[key] = self.hdrm.get(key, 0) + size
        else:
            self.ingress[key] = new
            self.shared_used += min(size, new - self.config.reserve_bytes)

    def dequeue(self, port: int, prio: int, size: int) -> None:
        """A frame that came in through `port` left the switch: headroom empties first, then shared, then reserve."""
        key = (port, prio)
        from_hdrm = min(self.hdrm.get(key, 0), size)
        from_shared = min(size - from_hdrm, self.shared_of(port, prio))
        self.hdrm[key] = self.hdrm.get(key, 0) - from_hdrm
        self.ingress[key] = self.ingress.get(key, 0) - (size - from_hdrm)
        if self.ingress[key] < 0:
            raise ValueError(f"port {port} priority {prio}: {size} bytes out that never came in")
        self.shared_used -= from_shared

    def update(self, port: int, prio: int) -> str | None:
        """"pause" or "resume" when (port, prio) must change state now (and takes it), else None."""
        key = (port, prio)
        shared, limit = self.shared_of(port, prio), self.threshold(port)
        if key not in self.paused and (self.hdrm.get(key, 0) > 0 or shared >= limit):
            self.paused.add(key)
            return "pause"
        if key in self.paused and self.hdrm.get(key, 0) == 0 and (
                shared == 0 or shared + self.config.resume_offset_bytes <= limit):
            self.paused.discard(key)
            return "resume"
        return None


def pause_s(quanta: int, rate_bps: float) -> float:
    """How long a PAUSE of `quanta` stops a priority on a link of `rate_bps`."""
    if not 0 <= quanta <= MAX_QUANTA:
        raise ValueError(f"pause quanta {quanta}: 802.1Qbb carries 0-{MAX_QUANTA}")
    return quanta * QUANTUM_BITS / rate_bps


def refresh_s(quanta: int, rate_bps: float) -> float:
    """How often a switch holding a pause sends it again: at half its time, so it never runs out while held."""
    return pause_s(quanta, rate_bps) / 2


@dataclass
class PauseTimer:
    """A priority of a port as its receiver sees PAUSE frames: stopped until the last frame's time runs out."""

    rate_bps: float
    until: float = float("-inf")

    def frame(self, now: float, quanta: int) -> None:
        """A PAUSE frame arrived at `now`: it sets the stop to its own time from now (0 quanta: go at once)."""
        self.until = now + pause_s(quanta, self.rate_bps)

    def stopped(self, now: float) -> bool:
        return now < self.until
