"""The PFC watchdog's state machine, pure: a lossless queue held paused while it has frames and sends none.

Switches offer it because PFC fails in two famous ways: a peer that keeps pausing (a pause storm: a stuck NIC)
and a cyclic buffer dependency (a deadlock: every hop of a loop paused by the next, for good). SONiC's pfcwd and
Junos' pfc-watchdog do the same three things, and so does this one, per (egress port, priority):

- detection, polled every `poll_ms`: a queue paused through a whole poll interval, with bytes queued and none
  sent since the poll before, has stalled; `detect_polls` stalled polls in a row are a storm;
- mitigation, the `action`: `drop` empties the queue and drops what comes to it, `forward` sends past the pause,
  `alert` only reports it. The agent (pfc.py) applies it; nothing here touches the system;
- restoration: the storm ends once the peer has released its pause for `restore_ms` in a row (SONiC's rule;
  a queue still paused stays mitigated), and PFC is honoured on the queue again.

The defaults are the switches' (100 ms polls, 2 of them to detect, 200 ms to restore), in the fabric's time: a
dilated run stretches them with its clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

Key = tuple[str, int]  # (egress port key, 802.1p priority), as in pfc_state


class Action(StrEnum):
    DROP = "drop"
    FORWARD = "forward"
    ALERT = "alert"


class Change(StrEnum):
    STORM = "storm"  # mitigate from now
    RESTORED = "restored"  # honour the pause again


@dataclass(frozen=True)
class WatchdogConfig:
    poll_ms: float = 100.0
    detect_polls: int = 2
    restore_ms: float = 200.0
    action: Action = Action.DROP


@dataclass(frozen=True)
class Sample:
    """One queue as a poll finds it: since when its peer has held it paused (None: not paused), the bytes waiting
    in it, and the bytes it has sent so far (a counter that only grows)."""

    paused_since: float | None
    backlog: int
    sent: int


@dataclass
class QueueWatch:
    """One queue's watch: its stalled polls in a row, and the storm it is in, if any."""

    last_poll: float | None = None
    last_sent: int | None = None
    stalled: int = 0
    storm_since: float | None = None
    released_since: float | None = None
    storms: int = 0
    storm_s: float = 0.0

    def poll(self, now: float, s: Sample, cfg: WatchdogConfig) -> Change | None:
        """What this poll changes: a storm detected, a storm over, or nothing."""
        before, sent_before = self.last_poll, self.last_sent
        self.last_poll, self.last_sent = now, s.sent
        if self.storm_since is not None:
            return self._restoring(now, s, cfg)
        paused_through = s.paused_since is not None and before is not None and s.paused_since <= before
        stalled = paused_through and s.backlog > 0 and s.sent == sent_before
        self.stalled = self.stalled + 1 if stalled else 0
        if self.stalled < cfg.detect_polls:
            return None
        self.stalled, self.storm_since, self.released_since = 0, now, None
        self.storms += 1
        return Change.STORM

    def _restoring(self, now: float, s: Sample, cfg: WatchdogConfig) -> Change | None:
        if s.paused_since is not None:  # the peer still pauses: the storm goes on
            self.released_since = None
            return None
        if self.released_since is None:
            self.released_since = now
        if (now - self.released_since) * 1000 < cfg.restore_ms:
            return None
        return self.end(now)

    def end(self, now: float) -> Change | None:
        """The storm over at `now` (restored, or the run ending): RESTORED if one was on."""
        if self.storm_since is None:
            return None
        self.storm_s += now - self.storm_since
        self.storm_since = self.released_since = None
        return Change.RESTORED


@dataclass
class Watchdog:
    """Every lossless queue's watch, and what happened when (for the run's record)."""

    cfg: WatchdogConfig = field(default_factory=WatchdogConfig)
    queues: dict[Key, QueueWatch] = field(default_factory=dict)
    events: list[tuple[float, Key, Change]] = field(default_factory=list)

    def poll(self, now: float, samples: dict[Key, Sample]) -> list[tuple[Key, Change]]:
        """One poll over the queues sampled: the changes to apply, in key order. A queue watched before and not
        sampled now was not paused: its stalled polls start over (a queue in a storm is always sampled)."""
        for key, w in self.queues.items():
            if key not in samples and w.storm_since is None:
                w.stalled, w.last_poll = 0, None
        changes = []
        for key in sorted(samples):
            change = self.queues.setdefault(key, QueueWatch()).poll(now, samples[key], self.cfg)
            if change is not None:
                changes.append((key, change))
                self.events.append((now, key, change))
        return changes

    def in_storm(self) -> list[Key]:
        return sorted(k for k, w in self.queues.items() if w.storm_since is not None)

    def end(self, now: float) -> list[Key]:
        """Every storm over (the run stopping): the queues to hand back to PFC."""
        ended = [k for k, w in sorted(self.queues.items()) if w.end(now) is not None]
        self.events.extend((now, k, Change.RESTORED) for k in ended)
        return ended

    def report(self, now: float) -> WatchdogReport:
        """So far, at `now`: a storm still on counts until then."""
        stormy = sorted((k, w) for k, w in list(self.queues.items()) if w.storms)
        secs = {k: w.storm_s + (now - w.storm_since if w.storm_since is not None else 0.0) for k, w in stormy}
        return WatchdogReport(self.cfg.action, sum(w.storms for _, w in stormy), round(sum(secs.values()), 4),
                              {k: (w.storms, round(secs[k], 4)) for k, w in stormy})


@dataclass(frozen=True)
class WatchdogReport:
    """What the watchdog did over a run: storms detected, seconds mitigated, per queue (storms, seconds)."""

    action: Action
    storms: int
    storm_s: float
    queues: dict[Key, tuple[int, float]]
