"""What `auto` fits onto this machine's CPU: how much emulated traffic a fabric of this size can carry, and
how that load is split between the bytes scale and time dilation.

Both `auto`s together set the product scale x D: the emulated load is the offered load over it, and it must
fit the budget (testbed/qos/scale.py). How the product is split matters:

- The scale sets the bytes of each step. Frames are not scaled down with the bytes, so a step of a few frames
  is latency, not bandwidth: on a 16-host x 8-rail HPN a 128-GPU job's data-parallel ops carried 3 KB per step
  and connection at the scale auto chose (1/200,000 at D = 2.5) and ran at 4-7% of their ideal rate (the
  iteration 2.15x its prediction). So the scale stops where the ops that carry the traffic keep
  MIN_STEP_FRAMES full frames per step and connection, and D takes the rest (wall time, within its cap).
- The budget shrinks with the host ports sending at once. What a frame costs grows as each port's rate
  falls (frames arrive one at a time: a pass of userspace Open vSwitch's one thread, an agent's wake-up, a
  qdisc's timer each), so the figure is emulated load x sending host ports. Measured here (CPU idle at its
  lowest, the verdict's bound being 5%): a 64-host ring all-reduce on 128 ports at 128 Mbit/s, 16%; a 128-GPU
  job on 16 hosts x 8 rails (256 ports) at 128, 51 and 26 Mbit/s, 2%, 16% and 21%; a 128-host ring all-reduce
  on 256 ports at 85 Mbit/s, 4% and 7% in two runs. Idle stayed at 16% or more up to about 16 Gbit/s x ports
  (PORT_LOAD_BPS), so that is what the budget is held to; the 8-host probe's 32 ports stay under it at the
  calibrated budget. (The fabric's switch ports, a first guess, did not order these runs: the two on 512
  switch ports had 16% and 2%.)
"""

from __future__ import annotations

from dataclasses import replace

from traffic.timebase import MAX_DILATION

from .scale import FINE, NICE, Budget, DilationChoice, nice_ceil, nice_floor

MIN_STEP_FRAMES = 8  # full frames per step and connection the ops that carry the traffic keep at least
MSS = 1448  # TCP payload of a full frame
CARRIERS = 0.1  # an op carries the traffic when its ideal time is at least this share of the longest op's


def max_scale(steps: list[tuple[float, int]]) -> float | None:
    """The largest readable scale (1, 2, 2.5 or 5 x 10^k) at which the ops that carry the traffic keep
    MIN_STEP_FRAMES full frames per step and connection. `steps`: per op, its ideal time and its smallest
    step's bytes per connection at real size. None: no op has steps with bytes."""
    carriers = [(t, b) for t, b in steps if b > 0]
    if not carriers:
        return None
    longest = max(t for t, _b in carriers)
    least = min(b for t, b in carriers if t >= CARRIERS * longest)
    return nice_floor(least / (MIN_STEP_FRAMES * MSS), NICE)


def fit(choice: DilationChoice, offered_bps: float, budget: Budget, scale: float) -> DilationChoice:
    """D raised, within the wall-time cap, until the offered load at `scale` (the largest that keeps the
    frames, or the one given) fits the budget; the reason kept for `why`."""
    need = offered_bps / (budget.bps * scale)
    if need <= choice.dilation:
        return choice
    costly = choice.costly_s
    cap = max(choice.dilation, nice_floor(choice.max_wall_s / costly, FINE)) if costly > 0 else MAX_DILATION
    d = min(nice_ceil(need, FINE), cap, MAX_DILATION)
    said = (f"{offered_bps / 1e12:g} Tbit/s offered at scale 1/{scale:,.0f} needs {need:,.0f}x to fit "
            f"{budget.bps / 1e6:.0f} Mbit/s of emulated traffic")
    if d < need:
        said += f" (capped by the wall time: the scale rises instead, with fewer than {MIN_STEP_FRAMES} frames a step)"
    return replace(choice, dilation=d, cpu=said)
