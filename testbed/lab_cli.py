"""`hpnlab lab list|start|check`: the teaching labs of experiments/labs/."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

console = Console(soft_wrap=True)  # a hint is one line, also in a pipe or a test
WORKDIR = click.option("--workdir", type=click.Path(file_okay=False), default="lab-work", show_default=True,
                       help="Where your answers, pictures and policy live.")


@click.group()
def lab() -> None:
    """Guided, self-checking exercises (guides in experiments/labs/)."""


@lab.command("list")
def lab_list() -> None:
    """The labs, how long each takes, and their guides."""
    from .labs.registry import LABS

    t = Table(title="labs")
    for c in ("#", "lab", "minutes", "guide"):
        t.add_column(c)
    for n, lb in LABS.items():
        t.add_row(str(n), lb.title, str(lb.minutes), str(lb.guide_path.relative_to(Path.cwd())
                                                           if lb.guide_path.is_relative_to(Path.cwd())
                                                           else lb.guide_path))
    console.print(t)


@lab.command("start")
@click.argument("number", type=int)
@WORKDIR
@click.option("--no-cli", is_flag=True, help="Prepare the work folder and check the network starts; no CLI.")
@click.pass_context
def lab_start(ctx, number: int, workdir: str, no_cli: bool) -> None:
    """Prepare your work folder, build the lab's network and open the Mininet CLI."""
    from .cli import up
    from .labs.registry import get, prepare

    lb = get(number)
    for p in prepare(lb, Path(workdir)):
        console.print(f"made {p}")
    console.print(f"[bold]Lab {lb.number}: {lb.title}[/] (~{lb.minutes} min). Guide: {lb.guide_path}")
    console.print("Extra CLI commands: paths A B, fail LINK, restore LINK, queues [SWITCH], flows SWITCH. "
                  f"When done: hpnlab lab check {lb.number}")
    ctx.invoke(up, name=lb.topology, params=(), preset=None, routing="controller", mode=lb.mode, pingall=no_cli,
               fail_links=(), no_cli=no_cli, delay_ms=None, qos=lb.qos, pfc=True, scale=10_000)


@lab.command("check")
@click.argument("number", type=int)
@WORKDIR
@click.option("--results", type=click.Path(file_okay=False), default="results", show_default=True)
def lab_check(number: int, workdir: str, results: str) -> None:
    """What passed and what did not, with a hint for each miss. Exit 1 until everything passes."""
    from .labs.checks import CHECKERS
    from .labs.evidence import Evidence
    from .labs.registry import get

    lb = get(number)
    checks = CHECKERS[number](Evidence(Path(workdir), Path(results)))
    for c in checks:
        console.print(f"[green]PASS[/] {c.name}" if c.ok else f"[red]FAIL[/] {c.name}: {c.hint}")
    ok = sum(c.ok for c in checks)
    console.print(f"lab {lb.number}: {ok} of {len(checks)} checks passed")
    if ok != len(checks):
        raise SystemExit(1)
