"""DCQCN's reaction point, one queue pair's sending rate (pure code: the caller gives the time).

The algorithm of Zhu et al. (SIGCOMM 2015), with the timers and stages as the HPCC ns-3 simulator runs
Mellanox's version and as `testbed/qos/bpf/dcqcn.bpf.c` runs it for the TCP stand-in:

- a CNP sets two flags; the first CNP of the QP sets alpha = 1, the target rate to the current one, and starts
  the timers (its cut comes at once);
- every T_alpha: alpha = (1 - g) alpha + g if a CNP came in the interval, else (1 - g) alpha;
- at most every T_dec, after a CNP: the target rate takes the current one (unless the QP has not increased since
  its last cut), the rate is cut to max(R_min, R_c (1 - alpha / 2)), and the increase stages start over;
- every T_inc without a cut: `fast_recovery` periods of R_c = (R_c + R_t) / 2, then additive increase (R_t +=
  R_AI) and then hyper increase (R_t += R_HAI), each also halving the distance; R_t at most the line rate.

The timers run lazily: whatever elapsed since the QP was last looked at is applied in one go when it is (a
CNP arrives, or the sender asks its rate), so a QP costs nothing while it sends nothing. Times in seconds of the
fabric's time, rates in bits per second of the fabric.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RpParams:
    """The HPCC simulator's `dcqcn_paper` set (as testbed/qos/cc.py's DcqcnParams): the paper's timers, g =
    1/256, one fast-recovery period, R_AI 5 and R_HAI 50 Mbit/s per 25 Gbit/s of line rate, 1 Gbit/s floor."""

    line_bps: float
    t_alpha_s: float = 50e-6
    t_dec_s: float = 50e-6
    t_inc_s: float = 55e-6
    g: float = 1 / 256
    fast_recovery: int = 1
    ai_bps: float | None = None  # default: line x 5 / 25,000
    hai_bps: float | None = None  # default: line x 50 / 25,000
    min_bps: float = 1e9

    @property
    def r_ai(self) -> float:
        return self.line_bps * 5 / 25_000 if self.ai_bps is None else self.ai_bps

    @property
    def r_hai(self) -> float:
        return self.line_bps * 50 / 25_000 if self.hai_bps is None else self.hai_bps


@dataclass
class ReactionPoint:
    """One QP's DCQCN state. `rate(now)` is what its pacer sends at; `on_cnp(now)` takes a notification."""

    p: RpParams
    rate_bps: float = 0.0
    target_bps: float = 0.0
    alpha: float = 1.0
    notified: bool = False
    stage: int = 0  # increase periods since the last cut
    cuts: int = 0
    _cnp_alpha: bool = False  # a CNP came in the current alpha interval
    _cnp_at: float | None = None  # when the first CNP since the last cut came: a cut is due
    # each timer: when it started and how many of its periods were applied (whole periods counted from a fixed
    # start, not a sum of float periods: the rate must not depend on how often it was looked at)
    _alpha_from: float = 0.0
    _alpha_done: int = 0
    _t_dec: float = float("-inf")
    _inc_from: float = 0.0
    _inc_done: int = 0

    def __post_init__(self):
        self.rate_bps = self.rate_bps or self.p.line_bps
        self.target_bps = self.target_bps or self.rate_bps

    def on_cnp(self, now: float) -> None:
        self._advance(now)
        if not self.notified:  # alpha 1, the target the current rate, the timers start, the cut at once
            self.notified, self.alpha, self.target_bps = True, 1.0, self.rate_bps
            self._alpha_from, self._alpha_done = now, 0
            self._inc_from, self._inc_done = now, 0
        else:
            self._cnp_alpha = True
        if self._cnp_at is None:
            self._cnp_at = now
        self._advance(now)

    def rate(self, now: float) -> float:
        self._advance(now)
        return self.rate_bps

    def _advance(self, now: float) -> None:
        """Every timer event up to `now`, in order: a due cut happens when T_dec allows it (not when the QP is
        next looked at), after the alpha periods and increases before it."""
        if not self.notified:
            return
        if self._cnp_at is not None:
            due = max(self._cnp_at, self._t_dec + self.p.t_dec_s)
            if due <= now:
                self._update_alpha(due)
                self._increase(due)
                self._cut(due)
        self._update_alpha(now)
        self._increase(now)

    def _update_alpha(self, now: float) -> None:
        n = _periods(now, self._alpha_from, self.p.t_alpha_s) - self._alpha_done
        if n <= 0:
            return
        g = self.p.g
        a = (1 - g) * self.alpha + (g if self._cnp_alpha else 0.0)
        self.alpha = a * (1 - g) ** (n - 1)
        self._cnp_alpha = False
        self._alpha_done += n

    def _cut(self, at: float) -> None:
        if self.stage:  # a cut right after a cut keeps the target (the simulator's CLAMP_TARGET_RATE 0)
            self.target_bps = self.rate_bps
        self.rate_bps = max(self.p.min_bps, self.rate_bps * (1 - self.alpha / 2))
        self.stage, self._cnp_at, self.cuts = 0, None, self.cuts + 1
        self._t_dec = self._inc_from = at
        self._inc_done = 0

    def _increase(self, now: float) -> None:
        n = _periods(now, self._inc_from, self.p.t_inc_s) - self._inc_done
        if n <= 0:
            return
        self._inc_done += n
        for _ in range(n):
            if self.target_bps >= self.p.line_bps and self.p.line_bps - self.rate_bps <= 1e-9 * self.p.line_bps:
                self.stage += 1  # at the line rate: the periods left change nothing (hyper increase at most
                break  # ~500 periods from the floor: a long idle QP costs no more)
            if self.stage == self.p.fast_recovery:
                self.target_bps += self.p.r_ai
            elif self.stage > self.p.fast_recovery:
                self.target_bps += self.p.r_hai
            self.target_bps = min(self.target_bps, self.p.line_bps)
            self.rate_bps = (self.rate_bps + self.target_bps) / 2
            self.stage += 1


def _periods(now: float, start: float, period: float) -> int:
    """Whole periods from `start` to `now`."""
    return max(0, int((now - start) / period))


@dataclass
class NotificationPoint:
    """The receiving NIC's side of one QP: a CNP back to the sender when a CE-marked frame arrives, at most one
    per `interval_s` of the fabric's time (the DCQCN paper's N = 50 us, Mellanox's min_time_between_cnps)."""

    interval_s: float = 50e-6
    sent: int = 0
    _last: float = float("-inf")

    def on_ce(self, now: float) -> bool:
        """Whether to send a CNP for a CE-marked frame arriving `now`."""
        if now - self._last < self.interval_s:
            return False
        self._last, self.sent = now, self.sent + 1
        return True
