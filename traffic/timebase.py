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

import threading
import time
from dataclasses import dataclass

MAX_DILATION = 100_000.0
STOP_POLL_S = 0.05  # how soon a sleeper notices that it was told to stop
VIRTUAL_DIGITS = 9  # virtual times are kept to the nanosecond: dilated, an op of the fabric lasts microseconds


def stamp(virtual_s: float) -> float:
    """A virtual time or span as a record keeps it (rounded to 0.1 ms, a 0.55 ms op read as 0.5 ms and
    its ideal time, derived from it, 9% short)."""
    return round(virtual_s, VIRTUAL_DIGITS)


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
    """A run's clock from its start: `now()` in virtual seconds, `wall_now()` in the machine's wall seconds.

    One object for every part of a run that stamps or waits for times (the record, the failure injector, the
    sampler, the replayers and through them the agents), so they agree on the origin and the dilation.

    Compute skipping: while every rank of every job computes and nothing is in flight, nothing the emulation
    measures can happen, so that stretch is jumped over instead of slept through (`skip`): the emulation's own
    epoch clock (`epoch()`) then runs ahead of the machine's by `skipped` wall seconds, and virtual time with
    it. Whoever waits for a moment of the emulation's clock waits with `sleep_until`, which a skip wakes."""

    def __init__(self, timebase: Timebase | None = None, t0: float | None = None):
        self.timebase = timebase or Timebase()
        self.t0 = time.time() if t0 is None else t0
        self.skipped = 0.0  # wall seconds jumped over so far
        self._cv = threading.Condition()

    def restart(self) -> None:
        with self._cv:
            self.t0, self.skipped = time.time(), 0.0

    def epoch(self) -> float:
        """The emulation's epoch time: the machine's plus what was skipped."""
        return time.time() + self.skipped

    def wall_now(self) -> float:
        """Wall seconds the machine spent since the start (skipped stretches cost none)."""
        return time.time() - self.t0

    def now(self) -> float:
        return self.at(self.epoch())

    def at(self, epoch: float) -> float:
        """The virtual time of this run at the emulation's epoch time `epoch`."""
        return self.timebase.virtual(epoch - self.t0)

    def wall_at(self, virtual_t: float) -> float:
        """The emulation's epoch time at which virtual time `virtual_t` of this run comes."""
        return self.t0 + self.timebase.wall(virtual_t)

    def skip(self, wall_s: float) -> float:
        """Jump the emulation's clock `wall_s` ahead; the total skipped so far."""
        with self._cv:
            self.skipped += wall_s
            self._cv.notify_all()
            return self.skipped

    def sleep_until(self, epoch: float, stop: threading.Event | None = None) -> bool:
        """Wait until the emulation's clock reaches `epoch` (sooner if a skip brings it); True if `stop` was set
        first."""
        with self._cv:
            while not (stop is not None and stop.is_set()):
                left = epoch - self.epoch()
                if left <= 0:
                    return False
                self._cv.wait(min(left, STOP_POLL_S))
        return True
