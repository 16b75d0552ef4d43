"""`hpnlab traffic run`: collectives or whole workloads on a fresh network, printed like nccl-tests."""

from __future__ import annotations

import statistics

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from topos.errors import InputError

console = Console()


def _ranks(spec: str, topo) -> list[tuple[str, int]]:
    hosts = [h.name for h in topo.hosts]
    if spec == "all":
        return [(h, r) for r in range(topo.hosts[0].nics) for h in hosts]
    if spec.startswith("rail") and spec[4:].isdigit():
        rail = int(spec[4:])
        if rail >= topo.hosts[0].nics:
            raise InputError("no such rail", f"use rail0..rail{topo.hosts[0].nics - 1}", field="ranks", value=spec)
        return [(h, rail) for h in hosts]
    from traffic.workload import _rank

    ranks = [_rank(r, "ranks") for r in spec.split(",")]
    for h, n in ranks:
        if h not in topo.nodes or n >= topo.nodes[h].nics:
            raise InputError("no such host NIC", "use HOST:NIC of this topology, e.g. h0:0", field="ranks",
                             value=f"{h}:{n}")
    return ranks


def _fmt(bps: float) -> str:
    return f"{bps / 1e6:.2f}"


@click.command("run")
@click.option("--topo", "topo_name", default="hpn", show_default=True)
@click.option("-p", "--param", "params", multiple=True, help="Topology parameter key=value (repeatable).")
@click.option("--preset", default=None)
@click.option("--op", default="allreduce", show_default=True)
@click.option("--algorithm", default=None, help="ring, halving_doubling, hierarchical, pairwise, pipeline, pairs")
@click.option("--size", default="8GB", show_default=True, help="Real size; the emulation moves size/scale.")
@click.option("--ranks", "ranks_spec", default="rail0", show_default=True, help="rail0, all, or h0:0,h1:0,...")
@click.option("--iters", type=int, default=3, show_default=True)
@click.option("--routing", type=click.Choice(["precise", "ecmp", "shortest"]), default="precise", show_default=True)
@click.option("--transport", default="auto", show_default=True)
@click.option("--channels", type=int, default=None, help="Connections per peer (default: ports per NIC).")
@click.option("--scale", type=float, default=10_000, show_default=True)
@click.option("--pfc/--no-pfc", default=True, show_default=True)
@click.option("--workload", "workload_file", default=None, help="A YAML workload (replaces --op/--size).")
@click.option("--simai", "simai_file", default=None, help="A SimAI/AICB workload file (replaces --op/--size).")
def traffic_run(topo_name, params, preset, op, algorithm, size, ranks_spec, iters, routing, transport, channels,
                scale, pfc, workload_file, simai_file) -> None:
    """Replay a collective (or a workload) and report algbw/busbw as nccl-tests does."""
    from testbed.capabilities import probe
    from testbed.cli import parse_kv
    from testbed.network import Network
    from testbed.owner import exit_cleanly_on_signals
    from testbed.qos_spec import QosSpec
    from topos import build
    from traffic.collectives import build_schedule
    from traffic.replay import Replayer, op_schedule
    from traffic.transports import choose, make
    from traffic.workload import Op, load_simai, load_yaml, parse_size

    if iters < 1:
        raise InputError("iters must be at least 1", "e.g. --iters 3", field="iters", value=iters)
    topo = build(topo_name, preset=preset, **parse_kv(params))
    hosts = [h.name for h in topo.hosts]
    rails = topo.hosts[0].nics
    if workload_file or simai_file:
        wl = (load_yaml(workload_file) if workload_file else load_simai(simai_file)).scaled(scale)
        items = [(o, op_schedule(o, hosts, rails, wl.plan)) for o in wl.ops for _ in range(o.repeat)]
        title = f"workload {wl.name} (sizes / {scale:g})"
    else:
        real = parse_size(size)
        emu = max(1, int(real / scale))
        sched = build_schedule(op, _ranks(ranks_spec, topo), emu, algorithm)
        items = [(Op(op, emu, tuple(sched.ranks), sched.algorithm), sched)] * iters
        title = f"{op} {sched.algorithm}, {len(sched.ranks)} ranks, {size} (emulated {emu:,} bytes)"
    kind = choose(transport, probe().rxe_in_netns)
    channels = channels or (2 if topo.params.get("dual_tor") else 1)
    exit_cleanly_on_signals()
    results = []
    skipped = 0
    with Network(topo, routing="controller", mode=routing, qos=QosSpec(scale=scale, pfc={"enabled": pfc})) as net:
        tr = make(kind, net, tos=26 << 2)
        tr.start()
        rp = Replayer(net, tr, channels=channels, precise=routing == "precise")
        try:
            with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                          TimeElapsedColumn(), console=console, transient=True) as prog:
                task = prog.add_task("replaying", total=len(items))
                for o, sched in items:
                    if sched is None:
                        skipped += 1
                    else:
                        results.append((o, rp.run(sched)))
                    prog.advance(task)
        finally:
            rp.close()
            tr.stop()
    t = Table(title=f"{title} — {routing} on {topo_name}, {channels} channel(s), {kind.upper()}")
    for c in ("op", "size (B)", "time (ms)", "algbw (Mbit/s)", "busbw (Mbit/s)", "busbw real (Gbit/s)",
              "of ideal", "bytes ok"):
        t.add_column(c, justify="right")
    for o, r in results:
        t.add_row(o.label or f"{r.op}/{r.algorithm}", f"{r.size:,}", f"{r.seconds * 1000:.0f}", _fmt(r.algbw_bps),
                  _fmt(r.busbw_bps), f"{r.busbw_bps * scale / 1e9:.1f}", f"{r.fraction_of_ideal:.1%}",
                  "yes" if r.bytes_delivered == r.bytes_expected else f"NO {r.bytes_delivered}/{r.bytes_expected}")
    console.print(t)
    if results:
        fr = [r.fraction_of_ideal for _, r in results]
        console.print(f"busbw as a fraction of ideal: mean {statistics.mean(fr):.1%}, min {min(fr):.1%}"
                      + (f"; {skipped} op(s) inside hosts (NVLink), not replayed" if skipped else ""))
