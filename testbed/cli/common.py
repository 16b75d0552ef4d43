"""What every command module shares: the consoles, topology arguments, the one-line error handling."""

from __future__ import annotations

import click
from rich.console import Console

from controllers.hashing import MODELS as HASH_MODELS
from topos import build
from topos.errors import InputError

console = Console()
err_console = Console(stderr=True)

preset_opt = click.option("--preset", default=None, help="Named parameter set (default: mini).")
cluster_opt = click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False), default=None,
                           help="Spread the network over the servers in this cluster.yaml (README: Running on "
                                "several servers).")


def load_cluster_arg(path: str | None):
    """The cluster spec of a --cluster option (None: this machine alone); a bad file is a one-line error."""
    if path is None:
        return None
    from testbed.cluster.spec import load_cluster

    return load_cluster(path)


def parse_kv(pairs: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for p in pairs:
        if "=" not in p:
            raise InputError("a topology parameter must be key=value", "write it like hosts_per_segment=8",
                             field="param", value=p)
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def topology_from_args(name: str, preset: str | None, params: tuple[str, ...]):
    return build(name, preset=preset, **parse_kv(params))


class ScaleType(click.ParamType):
    """`auto` or a number >= 1 (emulated rate = topology rate / scale)."""

    name = "auto|N"

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, float):
            return value
        try:
            scale = float(value)
        except ValueError:
            scale = 0.0
        if not 1 <= scale < float("inf"):
            raise InputError("scale must be auto or a number >= 1", "e.g. --scale auto or --scale 20000",
                             field="scale", value=value)
        return scale


SCALE = ScaleType()


def hashing_opt(f):
    """--hashing, shared by the commands that start a network."""
    return click.option("--hashing", type=click.Choice(HASH_MODELS), default="ovs", show_default=True,
                        help="How switches pick among ECMP next hops: ovs (select groups), asic (one hash and "
                             "seed on every switch, as commodity ASICs), asic-seeded (a seed per switch).")(f)
