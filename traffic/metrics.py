"""nccl-tests' bandwidth definitions, and the ideal a run is read against.

    algbw = size / time
    busbw = algbw x factor   (all-reduce 2(n-1)/n; all-gather, reduce-scatter,
                              all-to-all (n-1)/n; broadcast, send/recv 1)

busbw is what each rank's link must carry, so its physical bound is the rate
a rank can send at: the sum of its NIC ports' (scaled) rates, or one port's
when the transport uses a single connection per peer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .iteration import IterationTime


def busbw_factor(op: str, n: int) -> float:
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if op in ("broadcast", "sendrecv", "incast"):
        return 1.0
    raise ValueError(f"no bus bandwidth factor for {op!r}")


@dataclass(frozen=True)
class OpResult:
    op: str
    algorithm: str
    ranks: int
    size: int  # bytes, emulated
    seconds: float
    ideal_busbw_bps: float
    step_seconds: list[float]
    bytes_delivered: int
    bytes_expected: int

    groups: int = 1  # concurrent collectives of the same shape (e.g. one per rail)

    @property
    def algbw_bps(self) -> float:
        return self.size * 8 / self.seconds if self.seconds > 0 else 0.0

    @property
    def busbw_bps(self) -> float:
        return self.algbw_bps * busbw_factor(self.op, self.ranks // self.groups)

    @property
    def fraction_of_ideal(self) -> float:
        return self.busbw_bps / self.ideal_busbw_bps if self.ideal_busbw_bps else 0.0

    def scaled_back(self, scale: float) -> dict:
        """The same figures in the real fabric's units (sizes and rates x scale, times unchanged)."""
        return {"size": self.size * scale, "algbw_bps": self.algbw_bps * scale, "busbw_bps": self.busbw_bps * scale}


@dataclass(frozen=True)
class IterationResult(IterationTime):
    """One training iteration as replayed: wall time, the compute in it, and its ops."""

    ops: list[OpResult]  # in step order
    issued_s: list[float] = field(default_factory=list)  # when each op was handed to the ranks (its compute done)
    started_at: float | None = None  # epoch wall time the iteration started (after its ranks were handed it)

    @property
    def bytes_ok(self) -> bool:
        return all(o.bytes_delivered == o.bytes_expected for o in self.ops)


def cluster_utilization(iterations: list[dict], gpus: dict[str, int]) -> tuple[float, dict[str, float]]:
    """Crux's cluster GPU utilization from iteration records ({"job", "gpu_utilization"}): each job's mean
    utilization, and their mean weighted by the jobs' GPUs (`gpus`: job -> GPUs; 1 for a job not in it)."""
    per: dict[str, list[float]] = {}
    for it in iterations:
        per.setdefault(it["job"], []).append(it["gpu_utilization"])
    means = {j: sum(u) / len(u) for j, u in sorted(per.items())}
    total = sum(gpus.get(j, 1) for j in means)
    return (sum(gpus.get(j, 1) * u for j, u in means.items()) / total if total else 0.0), means
