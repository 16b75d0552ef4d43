"""The PFC watchdog at work in the agent (pfc.py): paused queues looked at every poll, storms mitigated on the gates.

The decisions are pfc_watchdog.py's. This reads what they need, each paused queue's backlog and the bytes its
leaf has sent (one qdisc dump per namespace that holds one: nothing is read while nothing is paused), and sets
the gates: in a storm, `drop` opens the gate with no room (what comes is dropped, what the queue held drains)
and `forward` opens it as it is; once restored, the gate is the pause's again (Shaper.set_paused). While a queue
is mitigated the agent's pauses and resumes leave its gate alone (`mitigated`), and keep their own books: the
watchdog restores the queue from them.

It also plays the peer that causes a storm, on request (`StuckPeers`): a NIC that keeps sending PAUSE holds every
lossless priority of the port toward it paused until told otherwise, as a stuck NIC does.
"""

from __future__ import annotations

import logging
import queue
import time

from .netlink import QdiscDumper, dumper_in
from .pfc_state import Key, PauseState
from .pfc_watchdog import Action, Change, Sample, Watchdog, WatchdogConfig
from .ports import queue_key
from .shaper import Shaper

log = logging.getLogger(__name__)

STUCK_PEER = "stuck-peer"  # who holds an injected storm's pause (PauseState.by): no queue of ours


class StormGuard:
    """The watchdog over one agent's ports: `tick` when `due`, `stop` when the agent stops."""

    def __init__(self, shaper: Shaper, cfg: WatchdogConfig, by_ifindex: dict[tuple[str | None, int], str],
                 leaves: dict[int, int]):
        self.shaper = shaper
        self.dog = Watchdog(cfg)
        self.cfg = cfg
        self.mitigated: set[Key] = set()  # queues whose gate is the watchdog's now (drop or forward)
        self.next_at = 0.0
        self.started = time.monotonic()
        self._by_ifindex = by_ifindex  # (netns, ifindex) -> port key
        self._leaves = leaves  # lossless leaf handle -> priority
        self._dumpers: dict[str | None, QdiscDumper] = {}
        self._drops: dict[Key, int] = {}  # each watched queue's drop counter at the last poll
        self._drops_at: dict[Key, int] = {}  # ... when its storm began (a storm on now)
        self.dropped = 0  # frames the stormed queues dropped while mitigated (action drop: the watchdog's own)

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def tick(self, now: float, pauses: dict[Key, PauseState]) -> None:
        """One watchdog poll: the switch queues paused now, or in a storm, sampled and judged; changes applied.
        A host NIC's queues are not watched: the watchdog is a switch's (a NIC's own storm guard stops it from
        sending pauses, which a stuck NIC here does by definition)."""
        self.next_at = now + self.cfg.poll_ms / 1000
        paused = {k for k, st in pauses.items() if st.since is not None and not self.shaper.ports[k[0]].is_host}
        watched = paused | set(self.dog.in_storm())
        figures = self._read({self.shaper.ports[k].netns for k, _ in watched}) if watched else {}
        samples = {k: Sample(pauses[k].since, *figures[k][:2]) for k in watched if k in figures}
        self._drops.update((k, figures[k][2]) for k in samples)
        for key, change in self.dog.poll(now, samples):
            self._apply(key, change, pauses[key])

    def _read(self, namespaces: set[str | None]) -> dict[Key, tuple[int, int, int]]:
        """(port, priority) -> (backlog, bytes sent, drops) of every lossless leaf in these namespaces."""
        out = {}
        for netns in namespaces:
            if netns not in self._dumpers:
                self._dumpers[netns] = dumper_in(netns)
            for ifindex, handle, backlog, drops, sent in self._dumpers[netns].backlogs(frozenset(self._leaves)):
                port = self._by_ifindex.get((netns, ifindex))
                if port is not None:
                    out[port, self._leaves[handle]] = backlog, sent, drops
        return out

    def _apply(self, key: Key, change: Change, pause: PauseState) -> None:
        what = f"PFC watchdog: {queue_key(*key)} {change}"
        if self.cfg.action is Action.ALERT:
            log.warning("%s (alert only)", what)
            return
        log.warning("%s: %s", what, self.cfg.action if change is Change.STORM else "PFC honoured again")
        if change is Change.STORM:
            self._drops_at[key] = self._drops[key]
            self.mitigated.add(key)
            self.shaper.open_gate(*key, room=self.cfg.action is Action.FORWARD)
        else:
            self.mitigated.discard(key)
            self.shaper.set_paused(*key, pause.since is not None)
            # counted once the gate is closed: the kernel went on dropping arrivals between this poll's read and
            # the gate's change (a slow-tier run counted 1 frame of 4,322 short)
            self.dropped += self._drops_now(key) - self._drops_at.pop(key)

    def _drops_now(self, key: Key) -> int:
        """A queue's drop counter read now (the last poll's where its namespace cannot be read)."""
        try:
            figures = self._read({self.shaper.ports[key[0]].netns})
        except OSError as exc:
            log.warning("PFC watchdog: %s's drops not read: %s", queue_key(*key), exc)
            return self._drops[key]
        return figures[key][2] if key in figures else self._drops[key]

    def stop(self, now: float) -> None:
        """Every storm ended and its gate handed back, running (the agent then releases every pause); the drops
        of the storms still on counted from a last read."""
        if self._drops_at:
            try:
                last = self._read({self.shaper.ports[k].netns for k, _ in self._drops_at})
            except OSError as exc:  # a host's namespace gone already: the last poll's figures stand
                log.warning("PFC watchdog: the storms' last drops not read: %s", exc)
                last = {k: (0, 0, self._drops[k]) for k in self._drops_at}
            self.dropped += sum(last[k][2] - at for k, at in self._drops_at.items() if k in last)
            self._drops_at.clear()
        for key in self.dog.end(now):
            if key in self.mitigated:
                self.mitigated.discard(key)
                try:
                    self.shaper.set_paused(*key, False)
                except Exception:  # noqa: BLE001 - the port may be gone already
                    pass
        for d in self._dumpers.values():
            d.close()
        self._dumpers.clear()

    def report(self, since: float | None) -> dict:
        """What the watchdog did: its settings (this machine's clock), storms and seconds mitigated per queue,
        and each change with its time after `since` (a monotonic time; the guard's start if None). Asked from
        another thread than the agent's loop: every dictionary is copied whole first (one step under the GIL)."""
        r = self.dog.report(time.monotonic())
        storming = list(self._drops_at.items())
        t0 = self.started if since is None else since
        return {"action": str(r.action), "poll_ms": self.cfg.poll_ms, "detect_polls": self.cfg.detect_polls,
                "restore_ms": self.cfg.restore_ms, "storms": r.storms, "storm_s": r.storm_s,
                # frames dropped by mitigation so far (action drop); a storm still on counts to its last poll
                "drops": self.dropped + sum(self._drops[k] - at for k, at in storming),
                "queues": {queue_key(*k): {"storms": n, "storm_s": s} for k, (n, s) in r.queues.items()},
                "events": [{"t": round(t - t0, 4), "queue": queue_key(*k), "change": str(c)}
                           for t, k, c in list(self.dog.events)]}


class StuckPeers:
    """Storms asked for from another thread (the agent process's request reader), taken by the agent's loop:
    (port key, on) - the peer behind that port starts or stops pausing it."""

    def __init__(self):
        self._asked: queue.SimpleQueue[tuple[str, bool]] = queue.SimpleQueue()
        self.storming: set[str] = set()

    def ask(self, port: str, on: bool) -> None:
        self._asked.put((port, on))

    def taken(self) -> list[tuple[str, bool]]:
        """What was asked since the last call, in order; only changes (a storm asked twice starts once)."""
        out = []
        while not self._asked.empty():
            port, on = self._asked.get()
            if (port in self.storming) != on:
                (self.storming.add if on else self.storming.discard)(port)
                out.append((port, on))
        return out
