"""The server inside a host: its GPUs' generation and the NVLink between them (pure).

A collective among the GPUs of one server runs over NVLink through the server's NVSwitches and never touches
the fabric; traffic/nvlink.py times it. A GPU's NVLink bus bandwidth is taken as NCCL's topology model takes
it: the GPU's NVLink count times NCCL's per-link figure for its architecture (SM80 20.0 GB/s, SM90 20.6 GB/s,
SM100 40.1 GB/s). The counts are the products' (A100 12, A800 8, H100 18, H800 8, B200 18). An op's fixed cost
is NCCL's tuning model's base latency of its ring algorithm with the Simple protocol (8.4 us): the protocol
NCCL picks for the megabytes that training moves.

The three parameters sit on every builder (ServerParams), so any topology can say what its servers hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from .params import Params

NVLINK_OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "sendrecv")
NCCL_RING_BASE_LATENCY_US = 8.4


@dataclass(frozen=True)
class Gpu:
    name: str
    nvlinks: int  # NVLink links per GPU
    link_gbytes: float  # NCCL's per-link bandwidth for the architecture, GB/s

    @property
    def nvlink_gbps(self) -> float:
        """Bus bandwidth over NVLink, Gbit/s."""
        return self.nvlinks * self.link_gbytes * 8


GPUS = {g.name: g for g in (Gpu("A100", 12, 20.0), Gpu("A800", 8, 20.0), Gpu("H100", 18, 20.6),
                            Gpu("H800", 8, 20.6), Gpu("B200", 18, 40.1))}
GpuName = Literal["A100", "A800", "H100", "H800", "B200"]
Gbps = Annotated[float, Field(gt=0, le=1e6)]
DEFAULT_GPU = "H100"  # SimAI's analytical examples give NVLink 360 GB/s: an H100's 18 links (370.8 GB/s)


class ServerParams(Params):
    gpu: GpuName = Field(DEFAULT_GPU, description="the GPUs' generation, which sets their NVLink bus bandwidth: "
                         "A100 240 GB/s, A800 160, H100 370.8, H800 164.8, B200 721.8 (NVLink count x NCCL's "
                         "per-link figure)")
    nvlink_gbps: dict[Literal[NVLINK_OPS], Gbps] | Gbps | None = Field(
        None, description="NVLink bus bandwidth in Gbit/s instead of the gpu's: one figure, or one per op "
                          "(e.g. {allreduce: 2400, alltoall: 1840}; ops not named keep the gpu's)")
    nvlink_latency_us: float = Field(NCCL_RING_BASE_LATENCY_US, ge=0, le=1e5,
                                     description="an NVLink collective's fixed cost (NCCL's ring base latency)")


@dataclass(frozen=True)
class NVLink:
    """What a server's NVLink gives a collective: bus bandwidth per op and a fixed cost per op."""

    gpu: str
    busbw_bps: dict[str, float]  # per op
    latency_s: float

    def bps(self, op: str) -> float:
        return self.busbw_bps.get(op, self.busbw_bps["allreduce"])


def nvlink_of(params: dict[str, Any]) -> NVLink:
    """The NVLink of a topology's servers, from its builder's parameters (Topology.params)."""
    gpu = GPUS[params.get("gpu") or DEFAULT_GPU]
    given = params.get("nvlink_gbps")
    per_op = {op: gpu.nvlink_gbps for op in NVLINK_OPS}
    if isinstance(given, dict):
        per_op.update(given)
    elif given is not None:
        per_op = dict.fromkeys(NVLINK_OPS, float(given))
    latency = params.get("nvlink_latency_us", NCCL_RING_BASE_LATENCY_US)
    return NVLink(gpu.name, {op: g * 1e9 for op, g in per_op.items()}, latency * 1e-6)
