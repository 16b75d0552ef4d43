"""Baselines built as Clos fabrics: DCN+ (3-tier, single plane), spine-leaf, fat-tree(k)."""

from __future__ import annotations

from pydantic import Field, model_validator

from .errors import InputError
from .fabric import FabricParams
from .server import ServerParams

# -- DCN+ ------------------------------------------------------------------

DCN_PLUS_DESCRIPTION = "DCN+: 3-tier Clos, single plane, all NICs of a host on one (dual-)ToR"


class DcnPlusParams(FabricParams):
    """Alibaba's pre-HPN fabric: not rail-optimized, one plane, dual-ToR by default."""

    pods: int = Field(2, ge=1)
    segments_per_pod: int = Field(1, ge=1)
    aggs_per_plane: int = Field(2, ge=1)
    tor_uplinks: int = Field(2, ge=1)
    rail_optimized: bool = False
    dual_plane: bool = False
    core: bool | None = True

    @model_validator(mode="after")
    def _single_plane(self) -> DcnPlusParams:
        if self.dual_plane:
            raise InputError("DCN+ has a single plane", "use the hpn builder for dual-plane",
                             field="dual_plane", value=True)
        return self


DCN_PLUS_PRESETS = {
    "mini": dict(pods=2, segments_per_pod=1, hosts_per_segment=4, rails=2, aggs_per_plane=2, tor_uplinks=4,
                 core_oversubscription=2),
    "mini-single-tor": dict(pods=2, segments_per_pod=1, hosts_per_segment=4, rails=2, aggs_per_plane=2,
                            tor_uplinks=4, core_oversubscription=2, dual_tor=False),
}


def dcn_plus_to_fabric(p: DcnPlusParams) -> FabricParams:
    return p


# -- spine-leaf ------------------------------------------------------------

SPINE_LEAF_DESCRIPTION = "spine-leaf: 2-tier Clos, one leaf per rack"


class SpineLeafParams(ServerParams):
    leaves: int = Field(4, ge=1, description="leaf switches")
    hosts_per_leaf: int = Field(2, ge=1, description="hosts under each leaf")
    spines: int = Field(2, ge=1, description="spine switches")
    uplinks_per_leaf: int | None = Field(None, ge=1, description="default: one per spine")
    nics: int = Field(1, ge=1, description="NICs per host, all on its leaf")
    port_gbps: float = Field(200.0, gt=0, description="host port rate")
    uplink_gbps: float = Field(400.0, gt=0, description="leaf-spine rate")
    switch_capacity_gbps: float = Field(51200.0, gt=0, description="a switch's switching capacity")


SPINE_LEAF_PRESETS = {"mini": {}}


def spine_leaf_to_fabric(p: SpineLeafParams) -> FabricParams:
    return FabricParams(
        pods=1, segments_per_pod=p.leaves, hosts_per_segment=p.hosts_per_leaf, rails=p.nics,
        rail_optimized=False, dual_tor=False, dual_plane=False, aggs_per_plane=p.spines,
        tor_uplinks=p.uplinks_per_leaf or p.spines, core=False, port_gbps=p.port_gbps, uplink_gbps=p.uplink_gbps,
        tor_capacity_gbps=p.switch_capacity_gbps, agg_capacity_gbps=p.switch_capacity_gbps)


# -- fat-tree(k) -----------------------------------------------------------

FAT_TREE_DESCRIPTION = "fat-tree(k): k pods of k/2 edge + k/2 aggregation, (k/2)^2 cores, k^3/4 hosts"


class FatTreeParams(ServerParams):
    k: int = Field(4, ge=2, le=64, description="ports per switch (even): k pods, k^3/4 hosts")
    port_gbps: float = Field(100.0, gt=0, description="every link's rate")

    @model_validator(mode="after")
    def _even(self) -> FatTreeParams:
        if self.k % 2:
            raise InputError("fat-tree needs an even port count k", f"use k={self.k + 1}", field="k", value=self.k)
        return self


FAT_TREE_PRESETS = {"mini": dict(k=4)}


def fat_tree_to_fabric(p: FatTreeParams) -> FabricParams:
    h = p.k // 2
    return FabricParams(
        pods=p.k, segments_per_pod=h, hosts_per_segment=h, rails=1, rail_optimized=False, dual_tor=False,
        dual_plane=False, aggs_per_plane=h, tor_uplinks=h, core=True, core_oversubscription=1,
        port_gbps=p.port_gbps, uplink_gbps=p.port_gbps, tor_capacity_gbps=p.k * p.port_gbps,
        agg_capacity_gbps=p.k * p.port_gbps)
