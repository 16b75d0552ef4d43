"""DCQCN on an ideal fabric: the reference an emulated incast is read against (pure: no root, no network).

A discrete-time model, in steps of one microsecond of the fabric's time, of one bottleneck port fed by queue
pairs: each QP sends frames at its reaction point's rate (traffic/roce/dcqcn.py, the algorithm the roce NIC
runs), into a FIFO the port drains at its line rate; the switch marks a frame CE with RED's probability on the
backlog as the frame joins the queue (enqueue) or on what it leaves behind (dequeue); the receiver's
notification point sends at most one CNP per QP per 50 us, which reaches the sender a fixed delay later; PFC
stops every sender while the queue is above XOFF until it drains to XON. What it leaves out is the emulator:
no Python pacing, no batches of userspace OVS, no pause agent's reaction time, no CPU. Where the emulated run
and this model part, the emulator is the cause; where they agree, the algorithm is.
"""

from __future__ import annotations

import random
import statistics
from collections import deque
from dataclasses import dataclass

from traffic.roce.dcqcn import ReactionPoint, RpParams

STEP_S = 1e-6
CNP_INTERVAL_S = 50e-6


@dataclass(frozen=True)
class Port:
    """One bottleneck port and the senders into it; bytes and times of the fabric."""

    senders: int
    bytes_each: float
    rate_bps: float
    frame: int  # bytes per frame (the emulation's: its MTU times the bytes scale)
    kmin: float
    kmax: float
    pmax: float
    xoff: float
    xon: float
    dcqcn: bool = True
    dequeue: bool = False
    feedback_s: float = 4e-6  # from the mark to the CNP at the sender, past the queue itself

    def mark_probability(self, backlog: float) -> float:
        """RED as the switches mark (queues.bpf.c): none at or below kmin, rising to pmax just below kmax, every
        frame from kmax on."""
        if backlog <= self.kmin:
            return 0.0
        return 1.0 if backlog >= self.kmax else self.pmax * (backlog - self.kmin) / (self.kmax - self.kmin)


@dataclass(frozen=True)
class Outcome:
    seconds: float  # until the last byte left the port
    queue: list[float]  # the backlog at every step, bytes

    def percentile(self, f: float) -> float:
        q = sorted(self.queue)
        return q[min(len(q) - 1, int(f * len(q)))] if q else 0.0


class _Run:
    """The state of one port's run."""

    def __init__(self, port: Port, seed: int):
        self.p = port
        self.rng = random.Random(seed)
        self.rps = [ReactionPoint(RpParams(line_bps=port.rate_bps)) for _ in range(port.senders)]
        self.sent = [0.0] * port.senders
        self.credit = [0.0] * port.senders
        self.fifo: deque[list] = deque()  # [bytes left, sender, marked]
        self.backlog = 0.0
        self.paused = False
        self.cnps: deque[tuple[float, int]] = deque()  # (arrival at the sender, sender)
        self.np_last = [float("-inf")] * port.senders

    def marked(self) -> bool:
        prob = self.p.mark_probability(self.backlog) if self.p.dcqcn else 0.0
        return prob >= 1 or (prob > 0 and self.rng.random() < prob)  # a draw only where the ramp is

    def send(self, t: float) -> None:
        p = self.p
        self.paused = self.backlog >= p.xoff or (self.paused and self.backlog > p.xon)
        for i, rp in enumerate(self.rps):
            if self.sent[i] >= p.bytes_each:
                continue
            if self.paused:  # a paused NIC stops; its pacer does not save up
                self.credit[i] = min(self.credit[i], p.frame)
                continue
            self.credit[i] += (rp.rate(t) if p.dcqcn else p.rate_bps) * STEP_S / 8
            while self.credit[i] >= p.frame and self.sent[i] < p.bytes_each:
                size = min(p.frame, p.bytes_each - self.sent[i])  # the message's last frame may be short
                self.credit[i] -= size
                self.sent[i] += size
                self.fifo.append([size, i, not p.dequeue and self.marked()])
                self.backlog += size

    def drain(self, t: float) -> None:
        budget = self.p.rate_bps * STEP_S / 8
        while budget > 0 and self.fifo:
            head = self.fifo[0]
            take = min(budget, head[0])
            head[0] -= take
            budget -= take
            self.backlog -= take
            if head[0] <= 0:
                self.fifo.popleft()
                if head[2] or (self.p.dequeue and self.marked()):
                    self.notify(t, head[1])

    def notify(self, t: float, i: int) -> None:
        if t - self.np_last[i] >= CNP_INTERVAL_S:
            self.np_last[i] = t
            self.cnps.append((t + self.p.feedback_s, i))

    def deliver(self, t: float) -> None:
        while self.cnps and self.cnps[0][0] <= t:
            at, i = self.cnps.popleft()
            self.rps[i].on_cnp(at)

    def done(self) -> bool:
        return min(self.sent) >= self.p.bytes_each and not self.fifo


def run(port: Port, seed: int = 1, limit_s: float = 1.0) -> Outcome:
    """The port's incast from every sender's first frame to its last byte out."""
    r = _Run(port, seed)
    t, queue = 0.0, []
    while not r.done() and t < limit_s:
        r.deliver(t)
        r.send(t)
        r.drain(t)
        queue.append(r.backlog)
        t += STEP_S
    return Outcome(t, queue)


def incast(ports: list[Port], seed: int = 1) -> tuple[float, float, float]:
    """Several ports' incasts side by side (the receiver's NIC ports): (seconds until the last one finished,
    median and 90th percentile of the deepest port's backlog over that time)."""
    outs = [run(p, seed + k) for k, p in enumerate(ports)]
    steps = max(len(o.queue) for o in outs)
    deepest = [max(o.queue[i] if i < len(o.queue) else 0.0 for o in outs) for i in range(steps)]
    deepest.sort()
    return (max(o.seconds for o in outs), statistics.median(deepest) if deepest else 0.0,
            deepest[min(len(deepest) - 1, int(0.9 * len(deepest)))] if deepest else 0.0)
