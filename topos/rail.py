"""Rail-optimized baseline: one ToR per rail per segment, single plane, spines above.

What most GPU clusters build (NIC r of every host in a segment on the rail-r
switch): no dual-ToR, so a NIC port or ToR failure cuts that rail of the host off.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from .errors import InputError
from .fabric import FabricParams

DESCRIPTION = "rail-optimized: one ToR per rail, single plane, no dual-ToR"


class RailParams(FabricParams):
    aggs_per_plane: int = Field(2, ge=1)
    tor_uplinks: int = Field(2, ge=1)
    dual_tor: bool = False
    dual_plane: bool = False
    rail_optimized: bool = True

    @model_validator(mode="after")
    def _rails(self) -> RailParams:
        if not self.rail_optimized:
            raise InputError("the rail_optimized builder is rail-optimized by definition",
                             "use dcn_plus or spine_leaf for a fabric without rails",
                             field="rail_optimized", value=False)
        return self


PRESETS = {"mini": dict(pods=1, segments_per_pod=2, hosts_per_segment=4, rails=2)}


def to_fabric(p: RailParams) -> FabricParams:
    return p
