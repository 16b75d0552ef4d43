"""`hpnlab validate`, `hpnlab run`, `hpnlab results list|show`, `hpnlab compare`: experiment files and their
results folders."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from .common import cluster_opt, console, load_cluster_arg
from .web import live_view, metrics_opt, serve_results, web_opts


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--quick", is_flag=True, help="Check it at the reduced size `run --quick` runs.")
@cluster_opt
def validate(file: str, quick: bool, cluster_file: str | None) -> None:
    """Check an experiment file as `run` plans it (topology, names, workload, schedules, transport, the servers
    of --cluster) without running it."""
    from testbed.experiment.failures import campaign_plan
    from testbed.experiment.planning import plan
    from testbed.experiment.spec import load

    for p in plan(load(file), Path(file).parent, quick, load_cluster_arg(cluster_file)):
        dilation = p.exp.time.dilation
        console.print(f"{p.label}: {p.exp.topology.name} ({len(p.topo.hosts)} hosts), routing {p.exp.routing}, "
                      f"{len(p.items)} op(s) at scale {p.exp.qos.scale:g}"
                      + (f", time dilated {dilation:g}x" if dilation != 1 else "")
                      + f", {len(p.events)} failure event(s), transport {p.transport}")
        for why in p.notes:
            console.print(f"  {why}", soft_wrap=True)
        if p.exp.campaign is not None:
            console.print(f"  {campaign_plan(p.exp, p.topo)}", soft_wrap=True)
    console.print(f"[green]{file}: valid[/]")


@click.command("run")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--quick", is_flag=True, help="Reduced size: 1 repetition, 1/4 of the sizes, at most 2 iterations.")
@web_opts()
@metrics_opt
@cluster_opt
def run_cmd(file: str, quick: bool, web: bool, web_port: int, metrics_port: int | None,
            cluster_file: str | None) -> None:
    """Run an experiment file; writes results/<date>-<name>-<hash>/."""
    from testbed.experiment.planning import plan
    from testbed.experiment.runner import run
    from testbed.experiment.spec import load

    cluster = load_cluster_arg(cluster_file)
    plans = plan(load(file), Path(file).parent, quick, cluster)  # a bad file is refused before anything starts
    with live_view(web, web_port, metrics_port) as hub:
        out = run(file, reduced=quick, watch=hub, cluster=cluster, plans=plans)
    console.print((out / "summary.md").read_text())
    console.print(f"results: {out}")


@click.group()
def results() -> None:
    """Results folders of past runs."""


@results.command("list")
def results_list() -> None:
    """Every run in results/, newest last."""
    from testbed.experiment.results import list_runs

    t = Table(title="results")
    for c in ("run", "experiment", "runs"):
        t.add_column(c)
    for r in list_runs():
        t.add_row(r["run"], r["experiment"], "-" if r["runs"] is None else str(r["runs"]))
    console.print(t)


@results.command("show")
@click.argument("run")
@web_opts("Open the run in the web view (topology, summary, plots, timeline) on 127.0.0.1 until Ctrl-C.")
def results_show(run: str, web: bool, web_port: int) -> None:
    """A run's summary (or, with --web, the whole folder in the browser)."""
    from testbed.experiment.results import find, summary

    if web:
        return serve_results(find(run), web_port)
    console.print(summary(run), markup=False)


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
