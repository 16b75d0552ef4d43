"""A collective inside one server, timed at the server's NVLink (topos/server.py): pure.

nccl-tests' definition read backwards: bus bandwidth = size / time x the op's bus factor, so an op of `size`
bytes among n GPUs takes size x factor / busbw, plus the op's fixed cost. The agents wait this long (in the
fabric's time, dilated like compute) where the op would run; nothing crosses the emulated network.
"""

from __future__ import annotations

from topos.server import NVLink

from .metrics import busbw_factor


def nvlink_seconds(op: str, size: int, gpus: int, link: NVLink) -> float:
    """Seconds of `op` over `size` real bytes among `gpus` GPUs of one server (0 for a group of one)."""
    if gpus <= 1 or size <= 0:
        return 0.0
    return link.latency_s + busbw_factor(op, gpus) * size * 8 / link.bps(op)
