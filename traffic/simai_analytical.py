"""`simai-analytical`: an iteration estimate in SimAI-Analytical's terms, our own implementation of what its
documentation says that backend does (pure).

SimAI-Analytical times each collective of a workload file by a bus bandwidth per communication group kind
(TP, DP, EP, PP) and op type (its busbw.yaml; or derived from the NVLink and NIC bandwidths and the NICs and
GPUs per server), walks every layer's forward, input-gradient and weight-gradient phases, and lets a share of
each group's communication hide under compute (its overlap ratios, one per group). Here:

- an op of `size` bytes among the n GPUs of its group takes size x nccl-tests' bus factor(n) / busbw(group,
  op); n is the file's TP, DP or EP size (2 for PP);
- busbw: a group kind whose groups fit one server at the server's NVLink (topos/server.py), every other at
  the network's share per GPU (the host's NIC ports' rate / its GPUs);
- exposed communication = every group's time x (1 - its overlap ratio), with the hidden part at most the
  iteration's compute; by default only DP (the weight gradients) overlaps, fully;
- with PP stages and `ga` micro-batches, the pipeline bubble of 1F1B adds (pp - 1) / ga of the iteration.

Our own closed form (traffic/iteration.py) differs by design: it schedules every op on the emulated ranks in
SimAI's issue order and times it at the busiest rank's NIC, so the two differ where the group mapping, the
overlap or the bubble do; the bench (bench/simai_estimate.py) says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from topos.server import NVLink

from .metrics import busbw_factor
from .workload import Workload, fits_server

OVERLAP = {"tp": 0.0, "dp": 1.0, "ep": 0.0, "pp": 0.0}  # the share of a group's time compute may hide


@dataclass(frozen=True)
class Busbw:
    """Bus bandwidth in bits/s per group kind and op: what SimAI's busbw.yaml holds."""

    nvlink: NVLink
    network_bps: float  # a GPU's share of its server's NIC ports
    in_server: frozenset[str] = frozenset()  # group kinds whose every group fits one server

    def bps(self, group: str, op: str) -> float:
        return self.nvlink.bps(op) if group in self.in_server else self.network_bps


def busbw_of(nvlink: NVLink, nic_bps: float, gpus_per_host: int, plan: dict[str, int]) -> Busbw:
    """The busbw table for servers of `gpus_per_host` GPUs whose NIC ports add up to `nic_bps`, for a file's
    parallelism `plan`: a group runs at NVLink when its span of ranks fits a server (Megatron's order: TP
    consecutive, DP and EP at a stride of TP, PP outermost)."""
    return Busbw(nvlink, nic_bps / gpus_per_host,
                 frozenset(g for g in ("tp", "dp", "ep", "pp") if fits_server(g, plan, gpus_per_host)))


@dataclass(frozen=True)
class Estimate:
    seconds: float  # one iteration
    compute_s: float
    comm_s: dict[str, float] = field(default_factory=dict)  # per group kind, all of it
    exposed_s: float = 0.0
    bubble_s: float = 0.0

    def as_dict(self) -> dict:
        return {"seconds": round(self.seconds, 9), "compute_s": round(self.compute_s, 9),
                "comm_s": {g: round(s, 9) for g, s in self.comm_s.items()}, "exposed_s": round(self.exposed_s, 9),
                "bubble_s": round(self.bubble_s, 9)}


def group_size(group, plan: dict[str, int]) -> int:
    if isinstance(group, tuple):
        return len(group)
    return 2 if group == "pp" else plan.get(group, 1)


def estimate(w: Workload, busbw: Busbw, overlap: dict[str, float] | None = None) -> Estimate:
    """One iteration of a workload at real size (a SimAI file as loaded, before any scaling)."""
    overlap = {**OVERLAP, **(overlap or {})}
    comm: dict[str, float] = {}
    for step in w.iteration:
        o = step.op
        if o is None:
            continue
        kind = o.group if isinstance(o.group, str) else "dp"
        n = group_size(o.group, w.plan)
        if n > 1:
            comm[kind] = comm.get(kind, 0.0) + busbw_factor(o.op, n) * o.size * 8 / busbw.bps(kind, o.op)
    compute = w.compute_s
    hidden = min(compute, sum(t * overlap.get(g, 0.0) for g, t in comm.items()))
    exposed = sum(comm.values()) - hidden
    stage = compute + exposed
    bubble = stage * (w.plan.get("pp", 1) - 1) / w.plan.get("ga", 1)
    return Estimate(stage + bubble, compute, comm, exposed, bubble)
