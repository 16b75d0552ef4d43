"""Alibaba HPN: dual-plane, dual-ToR, rail-optimized segments (SIGCOMM'24).

A host's NIC r has two ports: port 0 to the rail-r ToR-A (plane 0), port 1 to
the rail-r ToR-B (plane 1). ToRs uplink only to their own plane's aggregation
switches, so once a flow enters a ToR uplink its path is fixed. An optional core
tier joins pods with a given oversubscription.
"""

from __future__ import annotations

from .fabric import FabricParams

DESCRIPTION = "HPN: dual-plane, dual-ToR, rail-optimized segments, optional core"


class HpnParams(FabricParams):
    """HPN is the fabric's defaults: rail-optimized, dual-ToR, dual-plane."""


PRESETS = {
    # The default emulated size: small enough for 2 cores, big enough to show
    # planes, rails and cross-segment paths.
    "mini": dict(pods=1, segments_per_pod=2, hosts_per_segment=4, rails=2, aggs_per_plane=4, tor_uplinks=4),
    # Two pods joined by a per-plane core tier at 2:1.
    "mini-core": dict(pods=2, segments_per_pod=2, hosts_per_segment=2, rails=2, aggs_per_plane=2, tor_uplinks=2,
                      core_oversubscription=2),
    # The paper's pod: 8 rails of 2x200G NICs, 128 active + 8 backup hosts per
    # segment, ToR 136x200G down + 60x400G up, 60 aggregation switches per
    # plane, 15 segments, 15:1 aggregation-to-core.
    "paper": dict(pods=1, segments_per_pod=15, hosts_per_segment=128, backup_hosts_per_segment=8, rails=8,
                  gpus_per_host=8, aggs_per_plane=60, tor_uplinks=60, port_gbps=200, uplink_gbps=400,
                  core_oversubscription=15),
}


def to_fabric(p: HpnParams) -> FabricParams:
    return p
