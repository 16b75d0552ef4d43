"""What every command module shares: the consoles, topology arguments, the one-line error handling."""

from __future__ import annotations

import math

import click
from rich.console import Console

from controllers.hashing import MODELS as HASH_MODELS
from topos import build_from
from topos.errors import InputError
from traffic.timebase import MAX_DILATION

console = Console()
err_console = Console(stderr=True)

preset_opt = click.option("--preset", default=None, help="Named parameter set (default: mini).")
cluster_opt = click.option("--cluster", "cluster_file", type=click.Path(dir_okay=False), default=None,
                           help="Spread the network over the servers in this cluster.yaml (docs: "
                                "how-to/cluster.md).")


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
    return build_from(name, preset, parse_kv(params))


class AutoOrNumber(click.ParamType):
    """`auto` or a number from 1 to `upper` (a scale, a time dilation)."""

    name = "auto|N"

    def __init__(self, field: str, example: str, upper: float = math.inf):
        self.field, self.example, self.upper = field, example, upper

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, float):
            return value
        try:
            x = float(value)
        except ValueError:
            x = 0.0
        if not 1 <= x <= self.upper or math.isinf(x):
            most = f" and at most {self.upper:,.0f}" if self.upper < math.inf else ""
            raise InputError(f"{self.field} must be auto or a number >= 1{most}",
                             f"e.g. --{self.field} auto or --{self.field} {self.example}", field=self.field,
                             value=value)
        return x


SCALE = AutoOrNumber("scale", "20000")
DILATION = AutoOrNumber("dilation", "100", MAX_DILATION)


def hashing_opt(f):
    """--hashing, shared by the commands that start a network."""
    return click.option("--hashing", type=click.Choice(HASH_MODELS), default="ovs", show_default=True,
                        help="How switches pick among ECMP next hops: ovs (select groups), asic (one hash and "
                             "seed on every switch, as commodity ASICs), asic-seeded (a seed per switch).")(f)
