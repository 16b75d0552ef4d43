"""`hpnlab topo list|show|export`: topologies without root."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from topos import BUILDERS
from topos.errors import InputError
from topos.inputs import write_file

from .common import console, err_console, preset_opt, topology_from_args
from .tables import figures_table, invariants_table


@click.group()
def topo() -> None:
    """Build, show and export topologies (no root needed)."""


@topo.command("list")
def topo_list() -> None:
    """Builders and their presets."""
    t = Table(title="topology builders")
    for c in ("name", "presets", "description"):
        t.add_column(c)
    for b in BUILDERS.values():
        t.add_row(b.name, ", ".join(b.presets), b.description)
    console.print(t)


@topo.command("show")
@click.argument("name")
@click.argument("params", nargs=-1)
@preset_opt
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help="Where to write the picture (default results/topo/NAME-PRESET.png).")
@click.option("--no-png", is_flag=True, help="Skip the picture.")
def topo_show(name: str, params: tuple[str, ...], preset: str | None, png: str | None, no_png: bool) -> None:
    """Counts, ratios and invariants of a topology, and a picture of it. PARAMS are key=value."""
    if png is not None and not png.endswith(".png"):
        raise InputError("the picture is a PNG", "give a file name ending in .png", field="--png", value=png)
    tp = topology_from_args(name, preset, params)
    if not no_png and png is None:  # the default folder is made; a folder the user names must exist
        png = str(Path("results/topo") / f"{name}-{preset or 'mini'}.png")
        Path(png).parent.mkdir(parents=True, exist_ok=True)
    console.print(figures_table(tp))
    console.print(invariants_table(tp))
    if not no_png:
        from topos.draw import draw

        console.print(f"picture: {draw(tp, png)}")


@topo.command("export")
@click.argument("name")
@click.argument("params", nargs=-1)
@preset_opt
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="-", help="File (default stdout).")
@click.option("--format", "fmt", type=click.Choice(["json", "graphml", "simai"]), default="json",
              help="json: what the controller reads; graphml: from networkx; simai: SimAI's topology file.")
def topo_export(name: str, params: tuple[str, ...], preset: str | None, output: str, fmt: str) -> None:
    """Write a topology as JSON (what the controller reads), GraphML (networkx) or SimAI's topology file (GPUs,
    NVSwitches, switches, links with rate and latency; an experiment reads it back with topology: {file: F,
    format: simai})."""
    tp = topology_from_args(name, preset, params)
    if fmt == "json":
        text = tp.to_json()
    elif fmt == "simai":
        from topos.simai_topo import export

        text = export(tp).rstrip("\n")
    else:
        import io

        import networkx as nx

        buf = io.BytesIO()
        nx.write_graphml(tp.to_networkx(), buf)
        text = buf.getvalue().decode()
    if output == "-":
        click.echo(text)
    else:
        write_file(output, text, "--output")
        err_console.print(f"wrote {output}")
