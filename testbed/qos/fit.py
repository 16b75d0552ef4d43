"""What the kernel can hold, checked before anything is shaped: every queue within its 32-bit FIFO limit, and
PFC's model as the run will have it (`model: auto` takes ingress only where its buffers fit; pure planning)."""

from __future__ import annotations

from topos.errors import InputError
from topos.model import Topology

from .kmmu import MmuPlan, plan_mmu, with_mmu_limits
from .ports import Port, egress_ports, require_queues_fit, resolve
from .spec import QosSpec


def require_shapeable(topo: Topology, spec: QosSpec, kernel_reaction_ms: float | None = None) -> None:
    """What the kernel cannot hold is refused before anything starts. Rates of any size encode (HTB's 64-bit
    attributes); a queue's limit is 32 bits of bytes, and an unscaled fabric's lossless headroom (its ingress for
    the pause's reaction time, `kernel_reaction_ms` when the agent acts on kernel events) can pass it. Scale
    auto fits the load into this machine's budget, far below."""
    if spec.scale == "auto":
        return
    requested = spec.pfc.model
    spec = resolve(spec, topo, kernel_reaction_ms=kernel_reaction_ms)
    planned(egress_ports(topo, spec, netns_of=lambda _h: None, ifname_of=lambda n, i: f"{n}:{i}"), spec, requested)


def planned(ports: list[Port], spec: QosSpec, requested: str) -> tuple[list[Port], QosSpec, MmuPlan | None, str]:
    """The ports and spec PFC's model runs with: for ingress, each switch port's lossless queue as deep as its
    switch's buffer, and the plan. `requested`: the model the spec gave before `resolve`; when it was auto and
    ingress cannot be held here (more ports on a switch than the kernel counts, or a buffer past the kernel's
    32-bit queue limit: an unscaled 8-rail fabric), egress, with why. A run that asked for ingress is refused
    instead, and any run whose queues do not fit."""
    if not (spec.pfc.enabled and spec.pfc.model == "ingress"):
        require_queues_fit(ports, spec)
        return ports, spec, None, ""
    try:
        mmu = plan_mmu(ports, spec)
        limited = with_mmu_limits(ports, mmu)
        require_queues_fit(limited, spec)
        return limited, spec, mmu, ""
    except InputError as exc:
        if requested != "auto" or exc.field not in ("qos.scale", "qos.pfc.model"):
            raise
        egress = spec.model_copy(update={"pfc": spec.pfc.model_copy(update={"model": "egress"})})
        require_queues_fit(ports, egress)
        return ports, egress, None, f"PFC model auto takes egress: ingress cannot be held here ({exc.what})"
