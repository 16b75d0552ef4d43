"""`hpnlab traffic run`: a collective (or a workload) as a one-job experiment, printed like nccl-tests."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from testbed.qos.spec import CCS
from topos.errors import InputError

if TYPE_CHECKING:
    from testbed.schema.results import Iteration, Run

from .common import DILATION, SCALE, cluster_opt, console, hashing_opt, load_cluster_arg, parse_kv

STEP_TIMEOUT_S = 300.0  # one command, no failures scheduled: a slow step is waited for, not called halted


@click.group()
def traffic() -> None:
    """Collective traffic over the emulated fabric."""


def _fmt(bps: float) -> str:
    return f"{bps / 1e6:.2f}"


@traffic.command("run")
@click.option("--topo", "topo_name", default="hpn", show_default=True, help="Topology builder (hpnlab topo list).")
@click.option("-p", "--param", "params", multiple=True, help="Topology parameter key=value (repeatable).")
@click.option("--preset", default=None, help="A preset of the builder (default: mini).")
@click.option("--op", default="allreduce", show_default=True,
              help="allreduce, allgather, reducescatter, alltoall, broadcast, sendrecv or incast.")
@click.option("--algorithm", default=None, help="ring, halving_doubling, hierarchical, pairwise, pipeline, pairs")
@click.option("--size", default="8GB", show_default=True, help="Real size; the emulation moves size/scale.")
@click.option("--sizes", default=None, help="A sweep instead of --size, as nccl-tests' -b/-e/-f: MIN:MAX:xFACTOR "
              "or MIN:MAX:+STEP, e.g. 1MB:1GB:x2; each size --iters times.")
@click.option("--ranks", "ranks_spec", default="rail0", show_default=True, help="rail0, all, or h0:0,h1:0,...")
@click.option("--iters", type=int, default=None, help="Times each size runs (default 3); with --simai or "
              "--workload: training iterations, each with its compute (default 1).")
@click.option("--routing", type=click.Choice(["precise", "precise-host", "ecmp", "shortest"]), default="precise",
              show_default=True, help="precise: controller-placed exact-match rules; precise-host: hosts pick "
              "source ports the asic hash takes onto disjoint paths (needs --hashing asic).")
@hashing_opt
@click.option("--transport", default="auto", show_default=True,
              help="tcp, rdma (soft-RoCE where the kernel has it) or auto (rdma where it works).")
@click.option("--channels", type=int, default=None, help="Connections per peer (default: ports per NIC).")
@click.option("--connection-choice", type=click.Choice(["channel", "least-outstanding"]), default="channel",
              show_default=True, help="least-outstanding: each chunk on the peer's connection with the fewest "
              "unacknowledged bytes.")
@click.option("--scale", type=SCALE, default="auto", show_default=True,
              help="Emulated rate = real / scale; auto fits the ranks' load into this machine's budget.")
@click.option("--dilation", type=DILATION, default=None,
              help="Time dilation D: the emulation runs D times slower than the fabric (links at real / (scale x "
              "D)), so its own latencies shrink by D; every time reported is the fabric's. auto (the default): "
              "the least D that makes this machine's per-op latency 5% of every op's ideal time, within --max-wall.")
@click.option("--max-wall", "max_wall", type=click.FloatRange(min=0, min_open=True), default=None,
              help="With --dilation auto: the most wall time (s) the traffic may take (default 600).")
@click.option("--pfc/--no-pfc", default=True, show_default=True, help="Pause upstream when a lossless queue fills.")
@click.option("--cc", type=click.Choice(CCS), default="none", show_default=True,
              help="Congestion control at the hosts (tcp transport); any but none turns ECN marking on at the "
                   "switches.")
@click.option("--workload", "workload_file", default=None, help="A YAML workload (replaces --op/--size).")
@click.option("--simai", "simai_file", default=None, help="A SimAI/AICB workload file (replaces --op/--size).")
@click.option("--chakra", "chakra_prefix", default=None,
              help="Chakra execution traces PREFIX.0.et, PREFIX.1.et, ... (replaces --op/--size).")
@click.option("--format", "fmt", type=click.Choice(["table", "nccl", "json"]), default="table", show_default=True,
              help="nccl: nccl-tests' output (header, a row per size, '# Avg bus bandwidth'); json: the run's record.")
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@cluster_opt
def traffic_run(topo_name, params, preset, op, algorithm, size, sizes, ranks_spec, iters, routing, hashing, transport,
                channels, connection_choice, scale, dilation, max_wall, pfc, cc, workload_file, simai_file,
                chakra_prefix, fmt, as_json, cluster_file) -> None:
    """Replay a collective (or a workload) and report algbw/busbw as nccl-tests does."""
    from testbed.experiment.planning import plan_variant
    from testbed.experiment.runner import execute
    from traffic.report import nccl_tests

    fmt = "json" if as_json else fmt
    cluster = load_cluster_arg(cluster_file)
    if iters is not None and iters < 1:
        raise InputError("iters must be at least 1", "e.g. --iters 3", field="iters", value=iters)
    files = {k: v for k, v in (("workload", workload_file), ("simai", simai_file), ("chakra", chakra_prefix)) if v}
    base, workload = _workload(files, op, size, sizes, algorithm, ranks_spec, iters)
    exp = _experiment(f"traffic-{op}", topo_name, preset, params, routing, hashing, transport, channels,
                      connection_choice, scale, pfc, cc, dilation, max_wall, workload)
    try:
        p = plan_variant(routing, exp, base, cluster)
    except InputError as e:  # the option's own name in the error
        if e.field != "workload.collective.ranks":
            raise
        raise InputError(e.what, e.fix, field="ranks", value=e.value) from None
    job = p.jobs[0]
    replayed = [sched for _o, sched in job.items if sched is not None]
    if "collective" in workload:
        s = replayed[0]
        title = (f"{op} {s.algorithm}, {len(s.ranks)} ranks, " + (f"sizes {sizes}" if sizes else
                                                                 f"{size} (emulated {s.size:,} bytes)"))
    else:
        title = f"workload {Path(next(iter(files.values()))).name}"
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True, disable=fmt != "table") as prog:
        task = prog.add_task("replaying", total=len(replayed))
        rec = execute(p, None, progress=lambda: prog.advance(task), cluster=cluster)
    if fmt != "table":  # plain stdout for scripts: no colour, no wrapping
        click.echo(nccl_tests([o.model_dump() for o in rec.ops], rec.scale, f"{title}, {routing} on {topo_name}")
                   if fmt == "nccl" else json.dumps(rec.dump(), default=str), nl=fmt == "json")
        raise SystemExit(1 if rec.halted else 0)
    for why in p.notes:
        console.print(why, soft_wrap=True)
    _print_record(rec, f"{title} — {routing} on {topo_name}", p.exp.time.dilation, len(job.items) - len(replayed))
    if rec.halted:
        console.print(f"[red]halted at {rec.halted.at} s in {rec.halted.op}: {rec.halted.why}[/]")
        raise SystemExit(1)


def _workload(files: dict[str, str], op, size, sizes, algorithm, ranks_spec, iters) -> tuple[Path, dict]:
    """Where workload files are read from, and the workload: a file named on the command line (--workload,
    --simai or --chakra), or the collective the options describe."""
    from traffic.workload import parse_size, size_sweep

    if len(files) > 1:
        raise InputError("give one of --workload, --simai, --chakra", "drop the others", field=sorted(files)[1],
                         value=files[sorted(files)[1]])
    if files:
        ((opt, given),) = files.items()
        return _workload_arg(opt, given, iters or 1)
    return Path.cwd(), {"collective": {"op": op, "size": size_sweep(sizes) if sizes else parse_size(size, "size"),
                                       "algorithm": algorithm, "ranks": ranks_spec, "iters": iters or 3}}


def _experiment(name, topo_name, preset, params, routing, hashing, transport, channels, connection_choice, scale,
                pfc, cc, dilation, max_wall, workload):
    """The one-job experiment the options describe (validated as an experiment file is)."""
    from testbed.experiment.spec import from_dict

    return from_dict({"name": name, "topology": {"name": topo_name, "preset": preset, "params": parse_kv(params)},
                      "routing": routing, "hashing": hashing, "transport": transport, "channels": channels,
                      "connection_choice": connection_choice,
                      "qos": {"scale": scale, "pfc": {"enabled": pfc}, "cc": cc},
                      "time": {"max_wall_s": max_wall, **({} if dilation is None else {"dilation": dilation})},
                      "workload": workload,
                      "step_timeout_s": STEP_TIMEOUT_S})


def _print_record(rec: Run, title: str, dilation: float, skipped: int) -> None:
    """The run as tables: its ops as nccl-tests reports them, its training iterations, and the verdict."""
    if rec.cluster:
        from testbed.experiment.results import cluster_line

        console.print(cluster_line(rec.cluster), soft_wrap=True)
    scale = rec.scale
    t = Table(title=f"{title}, {rec.channels} channel(s), {rec.transport.upper()}, scale 1/{scale:,.0f}"
                    + (f", time dilated {dilation:g}x" if dilation > 1 else ""))
    for c in ("op", "size (B)", "time (ms)", "algbw (Mbit/s)", "busbw (Mbit/s)", "busbw real (Gbit/s)",
              "of ideal", "bytes ok"):
        t.add_column(c, justify="right")
    for o in rec.ops:
        t.add_row(o.label, f"{o.size:,}", f"{o.seconds * 1000:.0f}", _fmt(o.algbw_bps),
                  _fmt(o.busbw_bps), f"{o.busbw_bps * scale / 1e9:.1f}", f"{o.fraction_of_ideal:.1%}",
                  "yes" if o.bytes_ok
                  else f"NO {o.bytes_delivered}/{o.bytes_expected} (closed form {o.bytes_closed_form})")
    console.print(t)
    if rec.ops:
        fr = [o.fraction_of_ideal for o in rec.ops]
        console.print(f"busbw as a fraction of ideal: mean {statistics.mean(fr):.1%}, min {min(fr):.1%}"
                      + (f"; {skipped} op(s) inside hosts (NVLink), not replayed" if skipped else ""))
    if rec.iterations:
        console.print(_iteration_table(rec.iterations))
    fid = rec.fidelity
    colour = "green" if fid.faithful else "yellow"
    load_bound = any(r.startswith(("CPU-bound", "offered load")) for r in fid.reasons)
    console.print(f"[{colour}]{fid.line()}[/]" + (" (raise --scale to lower the load)" if load_bound else ""),
                  soft_wrap=True)


def _workload_arg(opt: str, given: str, iterations: int) -> tuple[Path, dict]:
    """The folder a workload file named on the command line is read from, and the workload spec for it: any path
    the user names (they chose the file; an experiment file's own references stay inside its folder). A Chakra
    prefix names the files PREFIX.RANK.et."""
    from traffic.chakra import first_file

    f = Path(given).expanduser()
    if not (first_file(f) if opt == "chakra" else f).is_file():
        raise InputError("workload file not found", "give the prefix of PREFIX.0.et, PREFIX.1.et, ..." if
                         opt == "chakra" else "give the path of an existing file", field=opt, value=given)
    f = f.parent.resolve() / f.name
    return f.parent, {"file" if opt == "workload" else opt: f.name, "iterations": iterations}


def _iteration_table(iterations: list[Iteration]) -> Table:
    """A training job's iterations beside their prediction (traffic/iteration.py at the fabric's ideal rate)."""
    t = Table(title="training iterations (compute as timed waits; predicted: the closed forms at the ideal rate)")
    for c in ("iteration", "time (ms)", "predicted (ms)", "x predicted", "compute (ms)", "NVLink (ms)",
              "exposed comm (ms)",
              "GPU utilization", "predicted utilization", "bytes ok"):
        t.add_column(c, justify="right")
    for i in iterations:
        ratio = i.seconds / i.predicted_s if i.predicted_s else float("nan")
        t.add_row(str(i.iteration), f"{i.seconds * 1000:.1f}", f"{i.predicted_s * 1000:.1f}",
                  f"{ratio:.2f}", f"{i.compute_s * 1000:.1f}", f"{i.nvlink_s * 1000:.1f}",
                  f"{i.exposed_comm_s * 1000:.1f}",
                  f"{i.gpu_utilization:.1%}", f"{i.predicted_gpu_utilization:.1%}",
                  "yes" if i.bytes_ok else "NO")
    return t
