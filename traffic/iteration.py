"""One training iteration as SimAI orders it: compute, then each phase's communication.

A workload's iteration is a list of steps, each the compute every rank of the
job does (in seconds of real time) followed by the communication it then
issues. SimAI's `iterate_hybrid_parallel_Transformer_fwd_in_bckwd` orders a
transformer's layers this way, and `from_simai_rows` follows it:

- forward, layer 0 to N-1: forward compute, then the forward communication,
  blocking (the next layer needs its result);
- backward, layer N-1 to 0: input-gradient compute and its communication,
  blocking; then weight-gradient compute and its (data-parallel)
  communication, *not* blocking: it runs on while the next layers' backward
  compute goes on, and the iteration ends when the last of them is done.

`predict` gives the iteration time from each communication's duration (the
closed forms at the fabric's ideal rate): compute runs in order on the GPU; the
network carries one communication at a time in the order they were issued
(SimAI shares it between concurrent ones; the last to finish ends at the same
time either way, the blocking one may finish earlier under sharing). A
communication inside one server (NVLink, `Step.nvlink_s`) keeps the GPU busy
after the step's compute and never reaches the network. Exposed communication =
iteration - compute - NVLink; GPU utilization = compute / iteration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Step:
    compute_s: float  # every rank's compute before the communication (real seconds: it is not scaled)
    op: Any | None  # traffic.workload.Op issued after it; None: compute only
    overlap: bool = False  # the communication runs on under the following steps (SimAI's weight gradients)
    phase: str = ""  # fwd | ig | wg for SimAI rows, for reports
    layer: str = ""
    # the op's time inside the server (traffic/nvlink.py) when it never reaches the network; the GPU is busy
    # with it as with compute, after the compute, before the next step's
    nvlink_s: float = 0.0

    @property
    def busy_s(self) -> float:
        """The GPU's time in this step before any network communication: compute, then NVLink."""
        return self.compute_s + self.nvlink_s


@dataclass(frozen=True)
class IterationTime:
    """An iteration's wall time, the compute in it and its communication inside the servers (NVLink), predicted
    here or measured (metrics.IterationResult)."""

    seconds: float
    compute_s: float
    nvlink_s: float

    @property
    def exposed_comm_s(self) -> float:
        """The fabric's communication that compute and NVLink did not hide."""
        return max(0.0, self.seconds - self.compute_s - self.nvlink_s)

    @property
    def gpu_utilization(self) -> float:
        return min(1.0, self.compute_s / self.seconds) if self.seconds > 0 else 1.0


def predict(steps: list[Step], comm_seconds: Callable[[Any], float]) -> IterationTime:
    """Iteration time of `steps` when each communication takes `comm_seconds(op)` alone on the fabric."""
    gpu = net = 0.0
    for s in steps:
        gpu += s.busy_s
        if s.op is None:
            continue
        start = max(gpu, net)
        net = start + comm_seconds(s.op)
        if not s.overlap:
            gpu = net
    return IterationTime(max(gpu, net), sum(s.compute_s for s in steps), sum(s.nvlink_s for s in steps))


def scaled(steps: list[Step], scale_op: Callable[[Any], Any]) -> list[Step]:
    """The steps with their communication scaled (sizes / bandwidth scale); compute stays real time."""
    return [replace(s, op=None if s.op is None else scale_op(s.op)) for s in steps]


def transformer_order(rows: list[tuple[str, tuple[float, Any], tuple[float, Any], tuple[float, Any]]]) -> list[Step]:
    """SimAI's fwd-in-bckwd order from per-layer (name, fwd, ig, wg), each phase (compute_s, op or None)."""
    steps = [Step(fwd[0], fwd[1], False, "fwd", name) for name, fwd, _ig, _wg in rows]
    for name, _fwd, ig, wg in reversed(rows):
        steps.append(Step(ig[0], ig[1], False, "ig", name))
        steps.append(Step(wg[0], wg[1], True, "wg", name))
    return steps
