"""DCQCN's fluid model (Zhu, Ghobadi, Misra, Padhye: "ECN or Delay: Lessons Learnt from Analysis of DCQCN and
TIMELY", CoNEXT 2016, section 3, after the DCQCN paper of SIGCOMM 2015), integrated for N identical flows into
one bottleneck (pure).

Per flow, rates in frames per second, `p` the RED marking probability of the queue one feedback delay tau*
ago and R_C' the flow's rate then:

    a = 1 - (1 - p)^(tau R_C')              a CNP within one notification interval tau
    b = p / ((1 - p)^-B - 1),  c = b (1 - p)^(F B)            the byte counter's expiries (no counter: 0)
    d = p / ((1 - p)^-(T R_C') - 1),  e = d (1 - p)^(F T R_C')    the rate timer's expiries
    dR_C/dt = -R_C alpha a / (2 tau) + (R_T - R_C) R_C' (b + d) / 2
    dR_T/dt = -(R_T - R_C) a / tau + R_AI R_C' (c + e)
    dalpha/dt = g ((1 - (1 - p)^(tau' R_C')) - alpha) / tau'
    dq/dt = N R_C - C   (q >= 0),   p(q) = 0 to Kmin, Pmax (q - Kmin) / (Kmax - Kmin) to Kmax, 1 past it

with the limits p = 0 (b = c = 1/B, d = e = 1 / (T R_C')) and p = 1 (a = 1, the rest 0). The model has no PFC,
no hyper increase and no line-rate cap besides R_C <= C; the parameters are the reaction point's
(traffic/roce/dcqcn.py) so the three views of the same incast (this, bench/dcqcn_model.py, the emulation) differ
only in what each leaves out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.dcqcn_model import CNP_INTERVAL_S, Port
from traffic.roce.dcqcn import RpParams

STEP_S = 0.1e-6


@dataclass(frozen=True)
class Trace:
    seconds: float  # until every flow sent its bytes and the queue drained
    queue: list[float]  # bytes, every step
    rate: list[float]  # one flow's R_C, bit/s, every step


def _terms(p: float, rc: float, tau: float, b_frames: float, timer: float, f: int) -> tuple[float, ...]:
    """(a, b, c, d, e) of the model for marking probability p and the delayed rate rc (frames/s)."""
    if p <= 0:
        d = 1 / (timer * rc) if rc > 0 else 0.0
        b = 0.0 if math.isinf(b_frames) else 1 / b_frames
        return 0.0, b, b, d, d
    if p >= 1:
        return 1.0, 0.0, 0.0, 0.0, 0.0
    lq = math.log1p(-p)  # (1 - p)^n = exp(n lq), in a form exact for the small p near Kmin

    def expiries(n: float) -> float:  # p / ((1 - p)^-n - 1)
        return p / math.expm1(-n * lq)

    a = -math.expm1(tau * rc * lq)
    b = 0.0 if math.isinf(b_frames) else expiries(b_frames)
    c = b * math.exp(f * b_frames * lq) if b else 0.0
    d = expiries(timer * rc) if rc > 0 else 0.0
    e = d * math.exp(f * timer * rc * lq)
    return a, b, c, d, e


def run(m: Port, rp: RpParams, limit_s: float = 0.1, byte_counter: float = math.inf) -> Trace:
    """The port's senders as the model's N identical flows (its PFC and marking point are not in the model),
    every flow starting at the line rate with alpha 1, as the NICs do; Euler steps of STEP_S. `byte_counter`:
    DCQCN's B in bytes (the reaction point here has none)."""
    to_frames = 1 / (8 * m.frame)
    c = m.rate_bps * to_frames
    rc = rt = c  # frames/s
    alpha, q, sent, t = 1.0, 0.0, 0.0, 0.0
    lag = max(1, round(m.feedback_s / STEP_S))
    past_q, past_rc = [0.0] * lag, [rc] * lag  # ring buffers: the values one feedback delay ago
    queue, rate = [], []
    ai, frames_each = rp.r_ai * to_frames, m.bytes_each / m.frame
    while (sent < frames_each or q > 0) and t < limit_s:
        i = len(queue) % lag
        p, rc_then = m.mark_probability(past_q[i] * m.frame), past_rc[i]
        a, b, cc, d, e = _terms(p, rc_then, CNP_INTERVAL_S, byte_counter / m.frame, rp.t_inc_s, rp.fast_recovery)
        sending = rc if sent < frames_each else 0.0
        d_rc = -rc * alpha * a / (2 * CNP_INTERVAL_S) + (rt - rc) * rc_then * (b + d) / 2
        d_rt = -(rt - rc) * a / CNP_INTERVAL_S + ai * rc_then * (cc + e)
        d_alpha = rp.g * (-math.expm1(rp.t_alpha_s * rc_then * math.log1p(-min(p, 1 - 1e-12))) - alpha) / rp.t_alpha_s
        past_q[i], past_rc[i] = q, rc
        q = max(0.0, q + (m.senders * sending - c) * STEP_S)
        floor = rp.min_bps * to_frames
        rc, rt = min(c, max(floor, rc + d_rc * STEP_S)), min(c, max(floor, rt + d_rt * STEP_S))
        alpha = min(1.0, max(0.0, alpha + d_alpha * STEP_S))
        sent += sending * STEP_S
        queue.append(q * m.frame)
        rate.append(rc / to_frames)
        t += STEP_S
    return Trace(t, queue, rate)


def incast(ports: list[Port], rp: RpParams) -> tuple[float, float, float]:
    """Several ports side by side (the receiver's NIC ports): (seconds until the last one finished, median and
    90th percentile of the deepest port's queue over that time), as bench/dcqcn_model.py's `incast`."""
    traces = [run(m, rp) for m in ports]
    steps = max(len(t.queue) for t in traces)
    deepest = sorted(max(t.queue[i] if i < len(t.queue) else 0.0 for t in traces) for i in range(steps))
    return (max(t.seconds for t in traces), deepest[len(deepest) // 2] if deepest else 0.0,
            deepest[min(len(deepest) - 1, int(0.9 * len(deepest)))] if deepest else 0.0)
