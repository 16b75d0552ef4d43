"""The `hpnlab` command line."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from topos import BUILDERS, build
from topos.errors import InputError

console = Console()
err_console = Console(stderr=True)


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
def cli(verbose: int) -> None:
    """hpnlab: emulate AI-training datacenter networks (HPN and baselines) on Mininet + OVS."""
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")


# -- doctor ------------------------------------------------------------------
def _yes(v) -> str:
    return {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]not checked[/]"}[v]


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the probe as JSON.")
def doctor(as_json: bool) -> None:
    """What this kernel and machine can do, and what the testbed will use."""
    from .capabilities import probe

    caps = probe()
    if as_json:
        click.echo(json.dumps(caps.to_dict(), indent=1))
        return
    t = Table(title=f"hpnlab doctor — kernel {caps.kernel}")
    t.add_column("capability")
    t.add_column("available")
    t.add_column("what the testbed does")
    t.add_row("root", _yes(caps.root), "needed for up/run" if not caps.root else "")
    t.add_row("Open vSwitch running", _yes(caps.ovs_running), caps.ovs_version or "start: scripts/bootstrap.sh")
    t.add_row("OVS kernel datapath", _yes(caps.ovs_kernel_datapath), f"uses datapath '{caps.datapath}'")
    if caps.datapath == "user" and caps.ovs_send_buffer is not None:
        from .network import OVS_SEND_BUFFER_NEEDED

        ok = caps.ovs_send_buffer >= OVS_SEND_BUFFER_NEEDED
        t.add_row("OVS packet socket send buffer", _yes(ok), f"{caps.ovs_send_buffer:,} bytes" +
                  ("" if ok else " (queues drop silently: run scripts/bootstrap.sh)"))
    for q, ok in caps.qdiscs.items():
        t.add_row(f"qdisc {q}", _yes(ok), "" if ok else "not available here (the VM has it)")
    t.add_row("tc ingress", _yes(caps.ingress), "")
    t.add_row("bonding", _yes(caps.bonding), "dual-ToR by multipath routes" if not caps.bonding else "")
    t.add_row("rdma_rxe (soft-RoCE)", _yes(caps.rdma_rxe), "")
    t.add_row("rxe inside network namespaces", _yes(caps.rxe_in_netns),
              "transport rdma" if caps.rxe_in_netns else "transport tcp (rdma needs the VM)")
    t.add_row("/dev/kvm", _yes(caps.kvm_device), "hardware virt" if caps.kvm_hw_virt else "TCG for the VM tier")
    t.add_row("Mininet", _yes(caps.mininet_version is not None), caps.mininet_version or "")
    console.print(t)
    for n in caps.notes:
        console.print(f"• {n}")


# -- topo ----------------------------------------------------------------------
@cli.group()
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


def _figures_table(tp) -> Table:
    c = tp.counts()
    f = tp.figures
    t = Table(title=f"{tp.kind} — counts and figures")
    t.add_column("item")
    t.add_column("value", justify="right")
    rows = [("hosts", c["hosts"]), ("ToRs", c["tors"]), ("aggregation switches", c["aggs"]),
            ("core switches", c["cores"])]
    rows += [(k, v) for k, v in c.items() if k.startswith("links")]
    rows += [("planes", f["planes"]), ("GPUs per host", f["gpus_per_host"]),
             ("GPUs per segment", f"{f['gpus_per_segment']:,}"), ("GPUs per pod", f"{f['gpus_per_pod']:,}"),
             ("GPUs total", f"{f['gpus_total']:,}"), ("ports per ToR", f["tor_ports"]),
             ("ports per aggregation switch", f["agg_ports"]),
             ("ToR oversubscription (down:up)", f"{f['tor_oversubscription']:.3f}:1")]
    if f["agg_oversubscription"] is not None:
        rows.append(("aggregation-to-core oversubscription", f"{f['agg_oversubscription']:.3f}:1"))
    elif "core_oversubscription" in tp.params:
        rows.append(("aggregation-to-core oversubscription",
                     f"no core tier (1 pod); set {tp.params['core_oversubscription']:g}:1"))
    for k, v in rows:
        t.add_row(k, str(v))
    return t


def _invariants_table(tp) -> Table:
    p = tp.params
    t = Table(title="invariants (checked on build)")
    t.add_column("invariant")
    t.add_column("result")
    nics = sum(h.nics for h in tp.hosts)
    t.add_row("switch, link and port counts match the closed forms", "[green]ok[/]")
    if p.get("dual_tor", False):
        t.add_row(f"each NIC's two ports on two different ToRs ({nics} NICs)", "[green]ok[/]")
    if p.get("dual_plane", False):
        t.add_row("…and those ToRs are in different planes", "[green]ok[/]")
        t.add_row("plane-p ToRs link only to plane-p aggregation switches", "[green]ok[/]")
    if p.get("rail_optimized", False):
        t.add_row("NIC r lands on rail-r ToRs only", "[green]ok[/]")
    return t


preset_opt = click.option("--preset", default=None, help="Named parameter set (default: mini).")


@topo.command("show")
@click.argument("name")
@click.argument("params", nargs=-1)
@preset_opt
@click.option("--png", type=click.Path(dir_okay=False), default=None,
              help="Where to write the picture (default results/topo/NAME-PRESET.png).")
@click.option("--no-png", is_flag=True, help="Skip the picture.")
def topo_show(name: str, params: tuple[str, ...], preset: str | None, png: str | None, no_png: bool) -> None:
    """Counts, ratios and invariants of a topology, and a picture of it. PARAMS are key=value."""
    tp = topology_from_args(name, preset, params)
    console.print(_figures_table(tp))
    console.print(_invariants_table(tp))
    if not no_png:
        from topos.draw import draw

        out = draw(tp, png or Path("results/topo") / f"{name}-{preset or 'mini'}.png")
        console.print(f"picture: {out}")


@topo.command("export")
@click.argument("name")
@click.argument("params", nargs=-1)
@preset_opt
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="-", help="File (default stdout).")
@click.option("--format", "fmt", type=click.Choice(["json", "graphml"]), default="json")
def topo_export(name: str, params: tuple[str, ...], preset: str | None, output: str, fmt: str) -> None:
    """Write a topology as JSON (what the controller reads) or GraphML (networkx)."""
    tp = topology_from_args(name, preset, params)
    if fmt == "json":
        text = tp.to_json()
    else:
        import io

        import networkx as nx

        g = tp.to_networkx()
        buf = io.BytesIO()
        nx.write_graphml(g, buf)
        text = buf.getvalue().decode()
    if output == "-":
        click.echo(text)
    else:
        Path(output).write_text(text)
        err_console.print(f"wrote {output}")


# -- up / clean ------------------------------------------------------------------
@cli.command()
@click.argument("name")
@click.argument("params", nargs=-1)
@preset_opt
@click.option("--routing", type=click.Choice(["static", "controller"]), default="static",
              help="static: rules computed and installed by hpnlab; controller: the OpenFlow controller app.")
@click.option("--mode", type=click.Choice(["ecmp", "precise", "shortest"]), default="ecmp",
              help="Routing mode (precise needs --routing controller).")
@click.option("--pingall", is_flag=True, help="Ping every host NIC from every host and report.")
@click.option("--fail", "fail_links", multiple=True, help="Take this link down after start (repeatable).")
@click.option("--no-cli", is_flag=True, help="Do not open the Mininet CLI (exit after the checks).")
@click.option("--delay-ms", type=float, default=None, help="Per-link delay (needs netem).")
@click.option("--qos/--no-qos", default=False, help="Shape links (HTB, priority classes) at rate/scale.")
@click.option("--pfc/--no-pfc", default=True, help="With --qos: PFC-like lossless class.")
@click.option("--scale", type=float, default=10_000, help="With --qos: emulated rate = topology rate / scale.")
def up(name, params, preset, routing, mode, pingall, fail_links, no_cli, delay_ms, qos, pfc, scale) -> None:
    """Start a topology in Mininet + OVS, route it, and open the Mininet CLI."""
    from .network import Network
    from .owner import exit_cleanly_on_signals

    tp = topology_from_args(name, preset, params)
    for link in fail_links:
        tp.find_link(link)  # a bad name is refused before anything starts
    exit_cleanly_on_signals()
    from .qos_spec import QosSpec

    qos_spec = QosSpec(scale=scale, pfc={"enabled": pfc}) if qos else None
    with Network(tp, routing=routing, mode=mode, delay_ms=delay_ms, log_dir="results/logs", qos=qos_spec) as net:
        console.print(_figures_table(tp))
        console.print(f"network up in {net.timings['start_s']:.1f} s "
                      f"({len(tp.switches)} OVS switches, datapath {net.caps.datapath}, {routing} routing, "
                      f"mode {mode}, run {net.owner.run_id})")
        if net.controller is not None:
            console.print(f"controller REST API: {net.controller.base} (log: {net.controller_log})")
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
            from .mncli import TestbedCLI

            TestbedCLI(net)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
def validate(file: str) -> None:
    """Check an experiment file (and its names against the topology) without running it."""
    from .spec import check_against, load

    exp = load(file)
    for label, v in exp.expand():
        check_against(v, v.topology.build())
        console.print(f"{label}: {v.topology.name}, routing {v.routing}, {len(v.failures)} scheduled failure(s)")
    console.print(f"[green]{file}: valid[/]")


@cli.command("run")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--quick", is_flag=True, help="Reduced size: 1 repetition, 1/4 of the sizes, at most 2 iterations.")
def run_cmd(file: str, quick: bool) -> None:
    """Run an experiment file; writes results/<date>-<name>-<hash>/."""
    from .runner import run

    out = run(file, reduced=quick)
    console.print((out / "summary.md").read_text())
    console.print(f"results: {out}")


@cli.group()
def results() -> None:
    """Results folders of past runs."""


@results.command("list")
def results_list() -> None:
    from .results import list_runs

    t = Table(title="results")
    for c in ("run", "experiment", "runs"):
        t.add_column(c)
    for r in list_runs():
        t.add_row(r["run"], r["experiment"], str(r["runs"]))
    console.print(t)


@results.command("show")
@click.argument("run")
def results_show(run: str) -> None:
    from .results import find

    console.print((find(run) / "summary.md").read_text())


@cli.command()
@click.argument("run_a")
@click.argument("run_b")
def compare(run_a: str, run_b: str) -> None:
    """Two runs side by side (busbw per variant) and a plot of both."""
    from .results import compare as do_compare

    rows, png = do_compare(run_a, run_b)
    t = Table(title=f"{run_a} vs {run_b}")
    for c in ("variant", "A busbw (Mbit/s)", "A of ideal", "B busbw (Mbit/s)", "B of ideal", "B / A"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(*r)
    console.print(t)
    console.print(f"plot: {png}")


@cli.group()
def traffic() -> None:
    """Collective traffic over the emulated fabric."""


def _register_traffic() -> None:
    from .lab_cli import lab
    from .traffic_cli import traffic_run

    traffic.add_command(traffic_run)
    cli.add_command(lab)


_register_traffic()


@cli.group()
def qos() -> None:
    """Queues, rates and PFC state of the running network."""


def qos_table(rows: list[dict], title: str) -> Table:
    t = Table(title=title)
    for c in ("port", "class", "rate", "sent", "backlog", "drops", "pause"):
        t.add_column(c, justify="left" if c in ("port", "class", "pause") else "right")
    for r in rows:
        pause = ("[red]PAUSED[/] " if r["paused"] else "") + (f"{r['pause_events']} events" if r["pause_events"]
                                                              else "")
        t.add_row(f"{r['port']} ({r['ifname']})", r["class"], f"{r['rate_bps'] / 1e6:g} Mbit/s",
                  f"{r['sent_bytes']:,}", f"{r['backlog']:,}", f"{r['drops']:,}", pause)
    return t


@qos.command("show")
@click.argument("node", required=False)
@click.option("--run", "run_id", default=None, help="Run id (default: the running one).")
@click.option("--busy", is_flag=True, help="Only classes that sent, queued or dropped something.")
def qos_show(node: str | None, run_id: str | None, busy: bool) -> None:
    """Each port's classes, rates, backlogs, drops and pause state (optionally of one NODE)."""
    from .capabilities import probe
    from .qos_show import snapshot

    probe().require_root("reading queues inside the hosts' namespaces")
    rows = snapshot(run_id, node)
    if not rows:
        raise InputError("no running network with QoS", "start one with 'hpnlab up hpn --qos' (or an experiment)",
                         field="run", value=run_id or "none")
    if busy:
        rows = [r for r in rows if r["sent_bytes"] or r["backlog"] or r["drops"] or r["pause_events"]]
    console.print(qos_table(rows, f"qos — {len({r['port'] for r in rows})} ports"))


@cli.command()
@click.option("--topology", "topology_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Topology JSON from 'hpnlab topo export'.")
@click.option("--mode", type=click.Choice(["ecmp", "precise", "shortest"]), default="ecmp")
@click.option("--of-port", type=int, default=6653, help="OpenFlow port on 127.0.0.1.")
@click.option("--rest-port", type=int, default=8080, help="REST API port on 127.0.0.1.")
def controller(topology_file: str, mode: str, of_port: int, rest_port: int) -> None:
    """Run the OpenFlow controller app (os-ken, or Ryu) in the foreground, on loopback."""
    from controllers.launcher import run
    from topos.model import Topology

    try:
        Topology.from_json(Path(topology_file).read_text())
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a topology JSON ({exc})", "write one with 'hpnlab topo export NAME -o FILE'",
                         field="topology", value=topology_file) from None
    run(topology_file, mode, of_port, rest_port)


@cli.command()
@click.option("--force", is_flag=True, help="Also undo runs whose owner process is still alive.")
def clean(force: bool) -> None:
    """Remove what crashed hpnlab runs left behind (only what hpnlab created)."""
    from .capabilities import probe
    from .owner import clean as do_clean

    probe().require_root("cleaning up")
    removed, skipped = do_clean(force=force)
    for r in removed:
        console.print(f"removed {r}")
    for s in skipped:
        console.print(f"[yellow]left running:[/] {s}")
    if not removed:
        console.print("nothing to clean")


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except InputError as exc:
        err_console.print(f"hpnlab: error: {exc.line()}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
