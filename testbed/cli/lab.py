"""`hpnlab lab list|start|check`: the teaching labs of experiments/labs/."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from .common import hashing_opt
from .up import serve
from .web import web_opts

console = Console(soft_wrap=True)  # a hint is one line, also in a pipe or a test
WORKDIR = click.option("--workdir", type=click.Path(file_okay=False), default="lab-work", show_default=True,
                       help="Where your answers, pictures and policy live.")


@click.group()
def lab() -> None:
    """Guided, self-checking exercises (guides in experiments/labs/)."""


@lab.command("list")
def lab_list() -> None:
    """The labs, how long each takes, and their guides."""
    from testbed.labs.registry import LABS

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
@click.option("--single-plane", is_flag=True, help="Both ToRs of a pair in one plane (lab 2's polarization step).")
@hashing_opt
@web_opts()
def lab_start(number: int, workdir: str, no_cli: bool, single_plane: bool, hashing: str, web: bool,
              web_port: int) -> None:
    """Prepare your work folder, build the lab's network and open the Mininet CLI."""
    from testbed.labs.registry import get, prepare
    from topos import build

    lb = get(number)
    for p in prepare(lb, Path(workdir)):
        console.print(f"made {p}")
    console.print(f"[bold]Lab {lb.number}: {lb.title}[/] (~{lb.minutes} min). Guide: {lb.guide_path}")
    console.print("Extra CLI commands: paths A B, fail LINK, restore LINK, lossy LINK P, degrade LINK GBPS, gray, "
                  "queues [SWITCH], flows SWITCH. "
                  f"When done: hpnlab lab check {lb.number}")
    topo = build(lb.topology, dual_plane=False) if single_plane else build(lb.topology)
    serve(topo, routing="controller", mode=lb.mode, hashing=hashing, pingall=no_cli, no_cli=no_cli, qos=lb.qos,
          web=web, web_port=web_port)


@lab.command("check")
@click.argument("number", type=int)
@WORKDIR
@click.option("--results", type=click.Path(file_okay=False), default="results", show_default=True,
              help="Where the lab's runs are.")
def lab_check(number: int, workdir: str, results: str) -> None:
    """What passed and what did not, with a hint for each miss. Exit 1 until everything passes."""
    from testbed.labs.checks import CHECKERS
    from testbed.labs.evidence import Evidence
    from testbed.labs.registry import get

    lb = get(number)
    checks = CHECKERS[number](Evidence(Path(workdir), Path(results)))
    for c in checks:
        console.print(f"[green]PASS[/] {c.name}" if c.ok else f"[red]FAIL[/] {c.name}: {c.hint}")
    ok = sum(c.ok for c in checks)
    console.print(f"lab {lb.number}: {ok} of {len(checks)} checks passed")
    if ok != len(checks):
        raise SystemExit(1)
