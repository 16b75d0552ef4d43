"""`hpnlab validate`, `hpnlab run`, `hpnlab results list|show`, `hpnlab compare`: experiment files and their
results folders."""

from __future__ import annotations

import click
from rich.table import Table

from .common import console


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
def validate(file: str) -> None:
    """Check an experiment file (and its names against the topology) without running it."""
    from testbed.experiment.spec import check_against, load

    exp = load(file)
    for label, v in exp.expand():
        check_against(v, v.topology.build())
        console.print(f"{label}: {v.topology.name}, routing {v.routing}, {len(v.failures)} scheduled failure(s)")
    console.print(f"[green]{file}: valid[/]")


@click.command("run")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--quick", is_flag=True, help="Reduced size: 1 repetition, 1/4 of the sizes, at most 2 iterations.")
def run_cmd(file: str, quick: bool) -> None:
    """Run an experiment file; writes results/<date>-<name>-<hash>/."""
    from testbed.experiment.runner import run

    out = run(file, reduced=quick)
    console.print((out / "summary.md").read_text())
    console.print(f"results: {out}")


@click.group()
def results() -> None:
    """Results folders of past runs."""


@results.command("list")
def results_list() -> None:
    from testbed.experiment.results import list_runs

    t = Table(title="results")
    for c in ("run", "experiment", "runs"):
        t.add_column(c)
    for r in list_runs():
        t.add_row(r["run"], r["experiment"], str(r["runs"]))
    console.print(t)


@results.command("show")
@click.argument("run")
def results_show(run: str) -> None:
    from testbed.experiment.results import find

    console.print((find(run) / "summary.md").read_text())


@click.command()
@click.argument("run_a")
@click.argument("run_b")
def compare(run_a: str, run_b: str) -> None:
    """Two runs side by side (busbw per variant) and a plot of both."""
    from testbed.experiment.results import compare as do_compare

    rows, png = do_compare(run_a, run_b)
    t = Table(title=f"{run_a} vs {run_b}")
    for c in ("variant", "A busbw (Mbit/s)", "A of ideal", "B busbw (Mbit/s)", "B of ideal", "B / A"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(*r)
    console.print(t)
    console.print(f"plot: {png}")
