"""Topology builders. Pure Python: no Mininet, no root.

    from topos import build
    topo = build("hpn", preset="mini", hosts_per_segment=8)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from . import clos, hpn, rail
from .errors import InputError
from .fabric import FabricParams, build_fabric
from .model import Link, Node, Topology
from .params import Params, input_error, parse_params

__all__ = ["BUILDERS", "Builder", "InputError", "Link", "Node", "Topology", "build"]


@dataclass(frozen=True)
class Builder:
    name: str
    description: str
    params: type[Params]
    to_fabric: Callable[[Any], FabricParams]
    presets: dict[str, dict[str, Any]]


BUILDERS: dict[str, Builder] = {
    b.name: b
    for b in (
        Builder("hpn", hpn.DESCRIPTION, hpn.HpnParams, hpn.to_fabric, hpn.PRESETS),
        Builder("dcn_plus", clos.DCN_PLUS_DESCRIPTION, clos.DcnPlusParams, clos.dcn_plus_to_fabric,
                clos.DCN_PLUS_PRESETS),
        Builder("spine_leaf", clos.SPINE_LEAF_DESCRIPTION, clos.SpineLeafParams, clos.spine_leaf_to_fabric,
                clos.SPINE_LEAF_PRESETS),
        Builder("fat_tree", clos.FAT_TREE_DESCRIPTION, clos.FatTreeParams, clos.fat_tree_to_fabric,
                clos.FAT_TREE_PRESETS),
        Builder("rail_optimized", rail.DESCRIPTION, rail.RailParams, rail.to_fabric, rail.PRESETS),
    )
}


def get_builder(name: str) -> Builder:
    if name not in BUILDERS:
        raise InputError("unknown topology", f"use one of: {', '.join(BUILDERS)}", field="topology", value=name)
    return BUILDERS[name]


def resolve_params(name: str, preset: str | None = None, params: dict[str, Any] | None = None) -> Params:
    """Preset values overlaid with explicit ones, validated by the builder's model. `params` is a mapping, not
    keywords: a user's parameter called `name` or `preset` is then an unknown parameter, not a clash."""
    b = get_builder(name)
    preset = preset or "mini"
    if preset not in b.presets:
        raise InputError(f"{name}: unknown preset", f"use one of: {', '.join(b.presets)}", field="preset",
                         value=preset)
    return parse_params(b.params, name, {**b.presets[preset], **(params or {})})


def build_from(name: str, preset: str | None, params: dict[str, Any]) -> Topology:
    """The topology of a builder, a preset and parameters as a user gave them (an experiment file, the CLI)."""
    b = get_builder(name)
    p = resolve_params(name, preset, params)
    try:  # a builder's own parameters map onto the common fabric's, whose bounds hold for all
        fabric = b.to_fabric(p)
    except ValidationError as exc:
        raise input_error(exc, FabricParams, name) from None
    return build_fabric(fabric, name, p.model_dump())


def build(name: str, preset: str | None = None, **params: Any) -> Topology:
    """build_from with the parameters as keywords, for code: build("hpn", hosts_per_segment=2)."""
    return build_from(name, preset, params)
