"""Compute skipping: the run's clock jumps over stretches where every rank computes and nothing is in flight.

Under time dilation D a training iteration's compute costs D times its length in wall time, although nothing
the emulation measures can happen while every GPU computes and the network is empty. So those stretches are
skipped instead of slept through (DieCast and Mininet-HiFi keep virtual time for the same reason), and the
iteration's virtual time stays what it would have been.

Each rank tells, through its agent, when it starts a compute wait with nothing of its own in flight (its part
of every op it started is done) and until when (`computing`). A rank counts as busy from the moment its job
joins until it says so, and again once that time has passed: a rank that said nothing, or whose compute has
ended, holds the clock. When every rank that joined computes beyond now + MARGIN_S, and nothing else is planned
before (a failure: `limit`), the clock jumps to MARGIN_S before the earliest of those ends, and every listener
(the agents) hears the new total. If every rank computes, no flow can be in flight: a flow's sender is busy
until its receiver acknowledged it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterable

from .timebase import Clock

log = logging.getLogger(__name__)

MARGIN_S = 0.005  # wall: what a jump leaves of the shortest compute (the agents hear of the jump within it)
MIN_JUMP_S = 0.005  # wall: a shorter jump is not worth its messages


def jump(now: float, ends: Iterable[float | None], limit: float | None = None) -> float:
    """How far the clock may jump at epoch time `now` with these ranks' compute ends (None: busy; inf: its
    iteration is over, it waits for the next), stopping MARGIN_S before the earliest end or `limit`; 0 when not
    at all (pure). Ranks that are all over leave nothing to jump to."""
    ends = list(ends)
    if not ends or any(e is None for e in ends):
        return 0.0
    to = min([*ends, *(() if limit is None else (limit,))])
    if math.isinf(to):
        return 0.0
    gap = to - now - MARGIN_S
    return gap if gap >= MIN_JUMP_S else 0.0


class Skipper:
    """Watches the ranks' compute reports and jumps `clock` when `jump` allows (a thread of its own)."""

    def __init__(self, clock: Clock, limit: Callable[[], float | None] = lambda: None):
        self.clock, self.limit = clock, limit
        self._cv = threading.Condition()
        self._ends: dict[str, float | None] = {}  # rank -> when its compute ends (emulation epoch), None: busy
        self._listeners: list[Callable[[float], None]] = []
        self._stopped = False
        self._thread: threading.Thread | None = None
        self.jumps = 0

    def listen(self, fn: Callable[[float], None]) -> None:
        """`fn(total skipped)` after every jump (a transport telling its agents)."""
        self._listeners.append(fn)

    def join(self, ranks: Iterable[str]) -> None:
        """These ranks take part from now on; busy until they say otherwise."""
        with self._cv:
            self._ends.update(dict.fromkeys(ranks))

    def leave(self, ranks: Iterable[str]) -> None:
        """These ranks are done (their job ended): they no longer hold the clock."""
        with self._cv:
            for r in ranks:
                self._ends.pop(r, None)
            self._cv.notify_all()

    def computing(self, rank: str, until: float) -> None:
        with self._cv:
            if rank in self._ends:
                self._ends[rank] = until
                self._cv.notify_all()

    def finished(self, rank: str) -> None:
        """The rank's iteration is over: it holds the clock no longer (its job's next iteration joins it again;
        found when the ranks that ended first held a GPT-13B iteration's last 800 s of compute)."""
        self.computing(rank, math.inf)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hpnlab-skipper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        # Only a report or a leave can make a jump possible (time passing only ends computes), so this waits
        # for those and never polls.
        while True:
            with self._cv:
                gap = 0.0
                while not self._stopped and not (gap := jump(self.clock.epoch(), self._ends.values(), self.limit())):
                    self._cv.wait()
                if self._stopped:
                    return
                total = self.clock.skip(gap)
                self.jumps += 1
            for fn in self._listeners:
                try:
                    fn(total)
                except (OSError, ValueError) as exc:  # an agent gone: its job halts on its own
                    log.debug("skip not delivered: %s", exc)
