"""One clock for a run: the emulated fabric's virtual time, and the wall time the emulation takes for it.

`scale` divides bytes and rates by the same factor, so a bulk transfer takes as long as the real one; the
emulator's own latencies (an agent's wake-up, a hop through userspace OVS, a PFC poll: milliseconds) stay
what they are, while the fabric they stand for works in microseconds. Time dilation D (wall seconds per
virtual second, D >= 1) runs the whole emulation D times slower than the fabric: links are shaped at
real rate / (scale x D), so the same bytes take D times as long in wall time, and every fixed latency of
the emulator shrinks by D in the fabric's time (time dilation, Gupta et al. NSDI'06; DieCast, NSDI'08).

What a user writes (compute phases, failure times and periods, timeouts) is virtual and becomes wall time on
the way in (`wall`); what is measured is wall time and becomes virtual on the way out (`virtual`, and
`rate` for a bit rate). With D = 1 both are the same and nothing changes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

MAX_DILATION = 100_000.0


@dataclass(frozen=True)
class Timebase:
    dilation: float = 1.0  # D: wall seconds per virtual second

    def __post_init__(self):
        if not 1.0 <= self.dilation <= MAX_DILATION:
            raise ValueError(f"time dilation {self.dilation!r} is not in [1, {MAX_DILATION:g}]")

    def wall(self, virtual_s: float) -> float:
        """A span of the fabric's time as the emulation takes it."""
        return virtual_s * self.dilation

    def virtual(self, wall_s: float) -> float:
        """A measured span as the fabric's time."""
        return wall_s / self.dilation

    def rate(self, wall_bps: float) -> float:
        """A rate measured against the wall clock as the fabric's (the same bytes in 1/D of the time)."""
        return wall_bps * self.dilation


class Clock:
    """A run's clock from its start: `now()` in virtual seconds, `wall_now()` in wall seconds.

    One object for every part of a run that stamps times (the record, the failure injector, the sampler), so
    they agree on the origin and the dilation."""

    def __init__(self, timebase: Timebase | None = None, t0: float | None = None):
        self.timebase = timebase or Timebase()
        self.t0 = time.time() if t0 is None else t0

    def restart(self) -> None:
        self.t0 = time.time()

    def wall_now(self) -> float:
        return time.time() - self.t0

    def now(self) -> float:
        return self.timebase.virtual(self.wall_now())

    def wall_at(self, virtual_t: float) -> float:
        """The epoch time at which virtual time `virtual_t` of this run comes."""
        return self.t0 + self.timebase.wall(virtual_t)
