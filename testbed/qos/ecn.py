"""ECN marking thresholds by link speed, as the packet-level simulators configure DCQCN's switches (pure).

HPCC's ns-3 simulator (Li et al., SIGCOMM 2019) and SimAI's ns-3 backend give every switch port RED marking by its
speed: Kmin and Kmax in KB of the fabric, Pmax 0.2 (their KMIN_MAP / KMAX_MAP / PMAX_MAP). The emulation keeps
them in the fabric's bytes: divided by the bytes scale (qos.scale over the time dilation), as every size is. They
are floored at what the emulator's own bursts need (the port's default XOFF, testbed/qos/spec.py: userspace OVS
forwards in batches, and a queue below two batches is a burst, not congestion); a port's XOFF then sits above Kmax
by one batch, so marks act before pauses (what a tuned RoCE fabric does). At the bytes scales of undilated runs
(1/10,000 and smaller) the published values are a fraction of one frame: the floor then gives the shape the
testbed used before it knew them (Kmin a quarter of XOFF, Kmax at XOFF).
"""

from __future__ import annotations

# (Gbit/s, Kmin KB, Kmax KB): HPCC's map for 25 to 100 Gbit/s, SimAI's additions for 200 and 400 Gbit/s
PER_SPEED_KB = ((25, 100, 400), (40, 200, 800), (100, 400, 1600), (200, 600, 2400), (400, 800, 3200))
PMAX = 0.2  # the probability just below Kmax, at every speed in both
KB = 1000  # their maps are in thousands of bytes


def published(rate_gbps: float) -> tuple[int, int]:
    """(Kmin, Kmax) bytes of the fabric for a port of `rate_gbps`: the row of the fastest speed at or below it
    (the slowest row for slower ports; their maps name speeds, not ranges)."""
    row = next((r for r in reversed(PER_SPEED_KB) if r[0] <= rate_gbps), PER_SPEED_KB[0])
    return row[1] * KB, row[2] * KB


def scaled(rate_gbps: float, bytes_scale: float) -> tuple[int, int]:
    """The published (Kmin, Kmax) in the emulation's bytes."""
    kmin, kmax = published(rate_gbps)
    return int(kmin / bytes_scale), int(kmax / bytes_scale)


def thresholds(published_scaled: tuple[int, int], floor: int, xoff: int) -> tuple[int, int]:
    """(Kmin, Kmax) emulated bytes for a lossless queue: the published ones scaled (`scaled`), at least a quarter
    of `floor` and `floor` (the port's burst floor), and at most the queue's `xoff` (marking reaches every packet by
    the time PFC pauses, also where XOFF was given lower)."""
    kmin, kmax = published_scaled
    kmax = min(max(kmax, floor), xoff)
    return min(max(kmin, floor // 4), kmax), kmax
