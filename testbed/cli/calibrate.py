"""`hpnlab calibrate`: measure once how much traffic this machine forwards faithfully (for `--scale auto`)."""

from __future__ import annotations

import click
from rich.table import Table

from .common import console


@click.command()
@click.option("--seconds", type=float, default=6.0, show_default=True, help="Traffic per point.")
@click.option("--hosts", type=int, default=8, show_default=True,
              help="Probe HPN size (8 or a multiple of 8); runs on fabrics of at least this size use its budget.")
@click.option("--no-save", is_flag=True, help="Measure and print only; keep the cached budget.")
def calibrate(seconds: float, hosts: int, no_save: bool) -> None:
    """Sweep the scale on an HPN (all hosts sending on disjoint paths) and cache the faithful budget."""
    from testbed.experiment.calibration import calibrate as measure
    from testbed.experiment.calibration import hpn_params
    from testbed.system.capabilities import probe

    hpn_params(hosts)  # a bad size is refused before anything starts
    probe().require_root("calibrating (it runs networks)")

    def show(p: dict) -> None:
        verdict = "faithful" if p["faithful"] else "NOT faithful: " + "; ".join(
            p["reasons"] or [f"rate fidelity {p['rate_fidelity']:.3f} < 0.95"])
        console.print(f"scale 1/{p['scale']:,.0f}: {p['offered_bps'] / 1e6:.0f} Mbit/s offered, rate fidelity "
                      f"{p['rate_fidelity']:.3f}, {verdict}" + (" (measuring again)" if p.get("retry") else ""),
                      soft_wrap=True)

    result = measure(hosts=hosts, seconds=seconds, progress=show, save=not no_save)
    t = Table(title=f"calibration — {result['machine']}, HPN of {hosts} hosts")
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
    console.print(f"budget: {result['budget_bps'] / 1e6:.0f} Mbit/s of emulated traffic"
                  + (f", cached in {result['cache']}" if result.get("cache") else " (not saved)"))
