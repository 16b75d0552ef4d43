"""`hpnlab calibrate`: measure once how much traffic this machine forwards faithfully (for `--scale auto`)."""

from __future__ import annotations

import click
from rich.table import Table

from .common import console


@click.command()
@click.option("--seconds", type=float, default=6.0, show_default=True, help="Traffic per point.")
@click.option("--hosts", type=int, default=8, show_default=True,
              help="Probe HPN size (8 or a multiple of 8); runs on fabrics of at least this size use its budget.")
@click.option("--no-save", is_flag=True, help="Measure and print only; keep the cached figures.")
@click.option("--only", type=click.Choice(["budget", "floor", "reaction"]), default=None,
              help="Measure one of the three (the others stay as cached): the budget (minutes), the per-op "
                   "floor (under a minute at 8 hosts) or the PFC agent's reaction (seconds).")
@click.option("--transport", type=click.Choice(["tcp", "roce"]), default="tcp", show_default=True,
              help="The traffic the budget is measured with: each transport has its own (roce's NICs are the "
                   "agents' Python); the floor and the reaction are measured over TCP.")
def calibrate(seconds: float, hosts: int, no_save: bool, only: str | None, transport: str) -> None:
    """Sweep the scale on an HPN (all hosts sending on disjoint paths) and cache the faithful budget; time ops
    of next to no bytes and cache the emulator's own per-op latency (for dilation auto and the verdict); time
    the PFC agent's reaction under load and cache it (the lossless headroom covers it)."""
    from testbed.experiment.calibration import calibrate as measure
    from testbed.qos.calibrated import probe_params
    from testbed.system.capabilities import probe

    probe_params(hosts)  # a bad size is refused before anything starts
    probe().require_root("calibrating (it runs networks)")

    def show(p: dict) -> None:
        verdict = "faithful" if p["faithful"] else "NOT faithful: " + "; ".join(
            p["reasons"] or [f"rate fidelity {p['rate_fidelity']:.3f} < 0.95"])
        console.print(f"scale 1/{p['scale']:,.0f}: {p['offered_bps'] / 1e6:.0f} Mbit/s offered, rate fidelity "
                      f"{p['rate_fidelity']:.3f}, {verdict}" + (" (measuring again)" if p.get("retry") else ""),
                      soft_wrap=True)

    result = measure(hosts=hosts, seconds=seconds, progress=show, save=not no_save, budget=only in (None, "budget"),
                     floor=only in (None, "floor") and transport == "tcp",
                     reaction=only in (None, "reaction") and transport == "tcp", transport=transport)
    saved = f", cached in {result['cache']}" if result.get("cache") else " (not saved)"
    if "floor" in result:
        f = result["floor"]
        probes = "; ".join(f"{p['op']} ({p['steps']} steps{', full frames' if p.get('frames') else ''}) "
                           f"{p['q_s'] * 1000:.1f} ms (median {p['median_s'] * 1000:.1f})" for p in f["points"])
        console.print(f"per-op floor: {f['base_s'] * 1000:.1f} ms + {f['per_step_s'] * 1000:.2f} ms per step, from "
                      f"ops of next to no bytes, + {f['frame_s'] * 1000:.2f} ms per step of full frames (beyond "
                      f"their ideal time, {f['quantile']:.0%} of them under: {probes}){saved}", soft_wrap=True)
    if "reaction" in result:
        r = result["reaction"]
        console.print(f"PFC reaction (kernel events, under an all-reduce and an incast): p99 {r['p99_s'] * 1000:.2f} "
                      f"ms, max {r['max_s'] * 1000:.2f} ms over {r['pauses']:,} pauses; switch queues at most "
                      f"{r['past_xoff_max_bytes']:,} B past XOFF, {r['lossless_drops']} lossless drops{saved}",
                      soft_wrap=True)
    if "reaction_error" in result:
        console.print(f"[yellow]PFC reaction not measured: {result['reaction_error']}[/]", soft_wrap=True)
    if "budget_bps" in result:
        _budget_table(result, hosts, saved)


def _budget_table(result: dict, hosts: int, saved: str) -> None:
    t = Table(title=f"calibration — {result['machine']}, HPN of {hosts} hosts, {result['transport']}")
    for c in ("scale", "offered (Mbit/s)", "rate fidelity", "CPU idle min", "OVS thread max", "faithful"):
        t.add_column(c, justify="right")
    for p in result["points"]:
        f = p["fidelity"]
        t.add_row(f"1/{p['scale']:,.0f}", f"{p['offered_bps'] / 1e6:.0f}", f"{p['rate_fidelity']:.3f}",
                  f"{f['cpu_idle_min']:.0%}" if f["cpu_idle_min"] is not None else "-",
                  f"{f['ovs_thread_max']:.0%}" if f["ovs_thread_max"] is not None else "-",
                  "yes" if p["faithful"] else "no")
    console.print(t)
    if result["budget_bps"] is None:
        console.print("[red]no point was faithful: the budget stays the default[/]")
        raise SystemExit(1)
    console.print(f"budget ({result['transport']}): {result['budget_bps'] / 1e6:.0f} Mbit/s of emulated traffic{saved}")
