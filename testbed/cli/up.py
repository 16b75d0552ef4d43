"""`hpnlab up` (a network to work in: checks, failures, the Mininet CLI) and `hpnlab clean`."""

from __future__ import annotations

import time
from contextlib import contextmanager

import click

from .common import SCALE, cluster_opt, console, hashing_opt, load_cluster_arg, preset_opt, topology_from_args
from .tables import figures_table, placement_table
from .web import live_view, metrics_opt, web_opts


def serve(tp, *, routing: str = "static", mode: str = "ecmp", hashing: str = "ovs", pingall: bool = False,
          fail_links=(), no_cli: bool = False, delay_ms: float | None = None, qos: bool = False, pfc: bool = True,
          scale: float | str = "auto", controller_runtime: str = "os-ken", web: bool = False,
          web_port: int = 0, cluster=None, metrics_port: int | None = None) -> None:
    """Start `tp`, fail the given links, ping all pairs if asked, then hand the network to the CLI (and, with
    `web`, show it live in the browser meanwhile)."""
    from testbed.experiment.watch import Watch
    from testbed.net import Network
    from testbed.qos import QosSpec
    from testbed.system.signals import exit_cleanly_on_signals

    for link in fail_links:
        tp.find_link(link)  # a bad name is refused before anything starts
    exit_cleanly_on_signals()
    qos_spec = QosSpec(scale=scale, pfc={"enabled": pfc}) if qos else None
    with live_view(web, web_port, metrics_port) as hub, starting() as progress, \
            Network(tp, routing=routing, mode=mode, hashing=hashing, delay_ms=delay_ms, log_dir="results/logs",
                    qos=qos_spec, controller_runtime=controller_runtime, progress=progress, cluster=cluster) as net:
        progress.done()
        watch = hub or Watch()
        watch.network_up(net, "")
        try:
            _session(net, fail_links, pingall, no_cli)
        finally:
            watch.network_down(net)


class _Stages:
    """Each start-up stage on one line that the next replaces, with the time so far (a line per stage when the
    output is not a terminal)."""

    def __init__(self, prog, task):
        self.prog, self.task, self.t0, self.stage = prog, task, time.monotonic(), None

    def __call__(self, stage: str) -> None:
        self.stage = stage
        self.prog.update(self.task, description=stage)
        if not console.is_terminal:
            console.print(f"{stage}…", highlight=False)

    def done(self) -> None:
        self.prog.stop()


@contextmanager
def starting():
    """Progress of a network's start, stage by stage (a 128-host HPN takes minutes)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True) as prog:
        stages = _Stages(prog, prog.add_task("starting the network", total=None))
        try:
            yield stages
        except BaseException:
            prog.stop()
            if stages.stage is not None:
                console.print(f"[red]stopped while {stages.stage}[/] ({time.monotonic() - stages.t0:.0f} s)")
            raise


def _session(net, fail_links, pingall: bool, no_cli: bool) -> None:
    """What `hpnlab up` does with a running network: report it, fail links, ping, open the CLI."""
    tp, routing, mode = net.topo, net.routing, net.mode
    console.print(figures_table(tp))
    console.print(f"network up in {net.timings['start_s']:.1f} s "
                  f"({len(tp.switches)} OVS switches, datapath {net.caps.datapath}, {routing} routing, "
                  f"mode {mode}, hashing {net.hashing}, run {net.owner.run_id})")
    if net.scale_choice is not None:
        console.print(net.scale_choice.why(), soft_wrap=True)
    if net.cluster is not None:
        console.print(placement_table(net.cluster.placement, tp))
    if net.controller is not None:
        console.print(f"controller REST API: {net.controller.base}, token in {net.controller_token_file} "
                      f"(log: {net.controller_log})", soft_wrap=True)
    for link in fail_links:
        net.set_link(link, up=False)
        console.print(f"failed {link}")
    if pingall:
        r = net.pingall()
        colour = "green" if not r.failures else "red"
        console.print(f"[{colour}]pingall: {r.received}/{r.sent} replies, {100 * r.loss:.1f}% loss[/]")
        for src, ip in r.failures[:10]:
            console.print(f"  no reply {src} -> {ip}")
        if r.failures and no_cli:
            raise SystemExit(1)
    if not no_cli:
        from .shell import TestbedCLI

        TestbedCLI(net)


@click.command()
@click.argument("name")
@click.argument("params", nargs=-1)
@preset_opt
@click.option("--routing", type=click.Choice(["static", "controller"]), default="static",
              help="static: rules computed and installed by hpnlab; controller: the OpenFlow controller app.")
@click.option("--mode", type=click.Choice(["ecmp", "precise", "shortest"]), default="ecmp",
              help="Routing mode (precise needs --routing controller).")
@hashing_opt
@click.option("--pingall", is_flag=True, help="Ping every host NIC from every host and report.")
@click.option("--fail", "fail_links", multiple=True, help="Take this link down after start (repeatable).")
@click.option("--no-cli", is_flag=True, help="Do not open the Mininet CLI (exit after the checks).")
@click.option("--delay-ms", type=float, default=None, help="Per-link delay (needs netem).")
@click.option("--qos/--no-qos", default=False, help="Shape links (HTB, priority classes) at rate/scale.")
@click.option("--pfc/--no-pfc", default=True, help="With --qos: PFC-like lossless class.")
@click.option("--scale", type=SCALE, default="auto", show_default=True,
              help="With --qos: emulated rate = topology rate / scale (auto: fits every host NIC's load into "
                   "this machine's budget).")
@click.option("--controller-runtime", type=click.Choice(["os-ken", "ryu-manager"]), default="os-ken",
              show_default=True, help="With --routing controller: the same app under os-ken (the project's launcher) "
              "or Ryu's own ryu-manager (from .venv-ryu).")
@web_opts()
@metrics_opt
@cluster_opt
def up(name, params, preset, routing, mode, hashing, pingall, fail_links, no_cli, delay_ms, qos, pfc, scale,
       controller_runtime, web, web_port, metrics_port, cluster_file) -> None:
    """Start a topology in Mininet + OVS, route it, and open the Mininet CLI."""
    cluster = load_cluster_arg(cluster_file)
    serve(topology_from_args(name, preset, params), routing=routing, mode=mode, hashing=hashing, pingall=pingall,
          fail_links=fail_links, no_cli=no_cli, delay_ms=delay_ms, qos=qos, pfc=pfc, scale=scale,
          controller_runtime=controller_runtime, web=web, web_port=web_port, cluster=cluster,
          metrics_port=metrics_port)


@click.command()
@click.option("--force", is_flag=True, help="Also undo runs whose owner process is still alive.")
@cluster_opt
def clean(force: bool, cluster_file: str | None) -> None:
    """Remove what crashed hpnlab runs left behind (only what hpnlab created); with --cluster, on every server."""
    from testbed.system.capabilities import probe
    from testbed.system.ownership import clean as do_clean

    cluster = load_cluster_arg(cluster_file)
    probe().require_root("cleaning up")
    removed, skipped = do_clean(force=force)
    for r in removed:
        console.print(f"removed {r}")
    for s in skipped:
        console.print(f"[yellow]left running:[/] {s}")
    if not removed:
        console.print("nothing to clean")
    if cluster is not None:
        from testbed.cluster.servers import on_each_server
        from testbed.net.controller import ROOT

        failed = False
        for server, (rc, out) in on_each_server(cluster, str(ROOT), ["clean", *(["--force"] if force else [])]).items():
            console.print(f"[bold]{server}[/]: " + (out or "no output"), highlight=False)
            failed |= rc != 0
        if failed:
            raise SystemExit(1)
