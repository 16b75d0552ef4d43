"""What each outage of a campaign cost a job, from what the emulation measured around it (pure).

Per outage, in the fabric's time of the run:

- stall: the longest step of the job's ops in flight while the outage was held (a step runs from its first
  piece sent to its last one arrived: a ring's rank waits that long for its predecessor's chunk, making no
  progress). NCCL's watchdog fails a job whose collective makes no progress for its timeout; so a stall over
  `watchdog_s` is a job failure and a restart, a shorter one a slowdown only. (The emulation lets the op
  finish once the outage is repaired, so the job goes on to meet the next outage; the restart is charged
  here, not waited for.) A job still stuck from the outage before (TCP's backed-off retransmission timer
  outlasts a repair) is `confounded` for this one, and left out of the counts.
- slowdown: the job's ops begun while the outage was held (else those it hit) against its ops clear of every
  outage (the median, the job's first op left out: it opens the connections).
- reroute: from the interface going down to the controller having heard it and recomputed its routes.

What it cost, in GPU time of the real fabric (GPU-seconds):

- a restart: every GPU of the job for the watchdog's timeout, the restart and the work since the last
  checkpoint (the outage's time in the month modulo the checkpoint interval);
- a slowdown: every GPU of the job for the lost share of the outage's real repair time, 1 - 1/slowdown
  (the emulation holds an outage seconds; the real one lasts its repair time, at the slowdown measured).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

from .model import MONTH_S, Outage

SLOWDOWN_NOISE = 1.05  # a job this close to its speed clear of outages was not slowed (run-to-run noise)


@dataclass(frozen=True)
class Resilience:
    watchdog_s: float
    restart_s: float
    checkpoint_s: float


@dataclass(frozen=True)
class Outcome:
    outage: int
    kind: str
    component: str
    job: str
    t: float  # when it was played (the fabric's time of the run)
    stall_s: float | None  # None: no op of the job was in flight
    slowdown: float | None
    reroute_ms: float | None
    outcome: str  # restart | slowdown | none | confounded
    lost_gpu_s: float


def _windows(log: list[dict], hold_s: float) -> dict[int, tuple[dict, float]]:
    """Outage index -> (its down entry, when it was repaired) from the failure log."""
    downs = {e["outage"]: e for e in log if e.get("outage") is not None and not e["up"]}
    ups = {e["outage"]: e["t"] for e in log if e.get("outage") is not None and e["up"]}
    return {k: (d, ups.get(k, d["t"] + hold_s)) for k, d in downs.items()}


def _overlapping(ops: list[dict], t0: float, t1: float) -> list[dict]:
    return [o for o in ops if o["start"] < t1 and o["start"] + o["seconds"] > t0]


def _reroute_ms(down: dict, controller_events: list[dict]) -> float | None:
    """The controller's first link-down of the outage's links at or after it went down: heard and recomputed."""
    links = set(down["links"])
    heard = [e for e in controller_events if e.get("event") == "link-down" and e.get("link") in links
             and e["time"] >= down["time"] - 0.05]
    if not heard:
        return None
    e = min(heard, key=lambda e: e["time"])
    return round((e["time"] - down["time"]) * 1000 + e.get("recompute_ms", 0.0), 3)


def _stall(hit: list[dict]) -> tuple[float, dict] | None:
    """The longest step of the ops in flight (a step: from its first piece sent to its last one arrived; a ring's
    rank waits that long for its predecessor's chunk), and its op; None when no op was in flight."""
    return max(((max(o["step_seconds"] or [o["seconds"]]), o) for o in hit), key=lambda x: x[0], default=None)


def _slowdown(hit: list[dict], t0: float, t1: float, base: float | None) -> float | None:
    """How much slower the job progressed while the outage was held than clear of outages: each op counts by the
    share of it inside the window, so the op the failure stalled counts, and where the op boundaries fall (an op
    begun just before the repair ran mostly clear) does not sway it."""
    done = sum((min(t1, o["start"] + o["seconds"]) - max(t0, o["start"])) / o["seconds"] for o in hit if o["seconds"])
    return (t1 - t0) / base / done if base and done > 0 else None


def outcomes(outages: list[Outage], log: list[dict], ops: list[dict], controller_events: list[dict],
             gpus: dict[str, int], r: Resilience, hold_s: float) -> list[Outcome]:
    """One outcome per (played outage, job). An outage whose longest stall is in an op begun before the outage
    before it was repaired (the job still stuck from that one) is `confounded`: its cost cannot be told apart."""
    windows = sorted(_windows(log, hold_s).items())
    out = []
    for job, n in gpus.items():
        mine = sorted((o for o in ops if o["job"] == job), key=lambda o: o["start"])
        clear = [o["seconds"] for o in mine[1:] if not any(_overlapping([o], d["t"], up) for _k, (d, up) in windows)]
        base = statistics.median(clear) if clear else None
        previous_up = -math.inf
        for k, (down, up) in windows:
            hit = _overlapping(mine, down["t"], up)
            stall = _stall(hit)
            slow = _slowdown(hit, down["t"], up, base)
            confounded = stall is not None and stall[0] > r.watchdog_s and stall[1]["start"] < previous_up
            out.append(_cost(outages[k], k, job, n, down, None if stall is None else stall[0], slow,
                             _reroute_ms(down, controller_events), r, confounded))
            previous_up = up
    return out


def _cost(o: Outage, k: int, job: str, gpus: int, down: dict, stall: float | None, slow: float | None,
          reroute: float | None, r: Resilience, confounded: bool = False) -> Outcome:
    if confounded:
        lost, said = 0.0, "confounded"
    elif stall is not None and stall > r.watchdog_s:
        lost, said = gpus * (r.watchdog_s + r.restart_s + o.t_s % r.checkpoint_s), "restart"
    elif slow is not None and slow > SLOWDOWN_NOISE:
        lost, said = gpus * o.repair_s * (1 - 1 / slow), "slowdown"
    else:
        lost, said = 0.0, "none"
    return Outcome(k, o.kind, o.component, job, down["t"], None if stall is None else round(stall, 4),
                   None if slow is None else round(slow, 4), reroute, said, round(lost, 1))


def summary(results: list[Outcome], months: float, gpus: dict[str, int]) -> dict:
    """Per job: outages met, restarts, interruptions a month of the slice, lost GPU-hours (and a month), and
    goodput (the share of its GPU time not lost)."""
    out = {}
    for job, n in gpus.items():
        mine = [x for x in results if x.job == job]
        restarts = sum(1 for x in mine if x.outcome == "restart")
        lost = sum(x.lost_gpu_s for x in mine)
        told = [x for x in mine if x.outcome != "confounded"]
        out[job] = {"outages": len(mine), "restarts": restarts,
                    "slowdowns": sum(1 for x in mine if x.outcome == "slowdown"),
                    "confounded": len(mine) - len(told),
                    "survived": round(1 - restarts / len(told), 4) if told else None,
                    "interruptions_per_month": round(restarts / months, 6) if months else None,
                    "lost_gpu_hours": round(lost / 3600, 3),
                    "lost_gpu_hours_per_month": round(lost / 3600 / months, 6) if months else None,
                    "goodput": round(1 - lost / (n * months * MONTH_S), 6) if months and n else None}
    return out


def as_dicts(results: list[Outcome]) -> list[dict]:
    return [asdict(x) for x in results]


def record(outages: list[Outage], months: float, played_s: float, log: list[dict], ops: list[dict],
           controller_events: list[dict], gpus: dict[str, int], r: Resilience, hold_s: float) -> dict:
    """A campaign's part of a run's record: what was sampled, how much it was compressed, each outcome, the
    summary."""
    results = outcomes(outages, log, ops, controller_events, gpus, r, hold_s)
    return {"outages": [asdict(o) for o in outages], "months": round(months, 4), "played_s": played_s,
            "compression": round(months * MONTH_S / played_s, 1) if played_s else None,
            "resilience": asdict(r), "outcomes": as_dicts(results), "summary": summary(results, months, gpus)}
