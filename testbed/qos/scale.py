"""`scale: auto`: the scale that fits a workload's offered load into what this machine forwards faithfully.

The budget is the aggregate host-NIC rate (bits/s of emulated traffic, on
cross-segment paths of three switches) at which `hpnlab calibrate` measured
rate fidelity >= 0.95 with the CPU never running out. It is cached per machine
(RUN_CACHE); without a calibration the DEFAULT_BUDGET measured on the
development machine (2 cores, userspace OVS) is used, and the choice says so.

    offered (real)  = per step, min(senders' NIC ports, receivers' NIC ports) x port rate,
                      the busiest step, summed over jobs running side by side
                      (a ring all-reduce: every rank's NIC; an incast: the receiver's)
    scale           = offered / (budget x SAFETY), rounded up to 1, 2, 2.5 or 5 x 10^k
"""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from topos.model import Topology

DEFAULT_BUDGET_BPS = 128e6  # the lower of two calibrations of the development machine (128, 160 Mbit/s)
SAFETY = 1.0  # the calibration probe already runs agents, the controller and PFC polling, as runs do
NICE = (1, 2, 2.5, 5)
CACHE = Path(os.environ.get("HPNLAB_CACHE", "/var/cache/hpnlab")) / "calibration.json"


@dataclass(frozen=True)
class ScaleChoice:
    scale: float
    offered_real_bps: float
    budget_bps: float
    calibrated: bool  # the budget came from this machine's calibration

    @property
    def offered_emulated_bps(self) -> float:
        return self.offered_real_bps / self.scale

    def why(self) -> str:
        src = "this machine's calibration" if self.calibrated else \
            "the default budget (not calibrated here: run 'hpnlab calibrate')"
        return (f"scale auto = 1/{self.scale:,.0f}: {self.offered_real_bps / 1e12:g} Tbit/s offered -> "
                f"{self.offered_emulated_bps / 1e6:.0f} Mbit/s emulated, within {SAFETY:.0%} of "
                f"{self.budget_bps / 1e6:.0f} Mbit/s from {src}")


def machine_key() -> str:
    """What a calibration is valid for: this host's name, cores and kernel."""
    return f"{platform.node()}/{os.cpu_count()}cpu/{platform.release()}"


def load_budget(path: Path | None = None) -> tuple[float, bool]:
    """(budget bits/s, calibrated?) for this machine."""
    path = path or CACHE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return DEFAULT_BUDGET_BPS, False
    entry = data.get(machine_key()) if isinstance(data, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("budget_bps"), (int, float)):
        return DEFAULT_BUDGET_BPS, False
    return float(entry["budget_bps"]), True


def save_budget(result: dict, path: Path | None = None) -> Path:
    path = path or CACHE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data[machine_key()] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
    return path


def offered_load(topo: Topology, ranks: list[tuple[str, int]] | None = None) -> float:
    """Real bits/s when every port of the given ranks' NICs (default: every host NIC) sends at once."""
    nics = set(ranks) if ranks is not None else {(h.name, n) for h in topo.hosts for n in range(h.nics)}
    return sum(l.rate_gbps * 1e9 for h, n in nics for l in topo.links_of(h) if l.kind == "host-tor" and l.nic == n)


def nice_ceil(x: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k that is >= x (scales people can read and compare)."""
    if x <= 1:
        return 1.0
    exp = math.floor(math.log10(x))
    for k in (exp, exp + 1):
        for m in NICE:
            if m * 10 ** k >= x * (1 - 1e-12):
                return float(m * 10 ** k)
    return float(10 ** (exp + 1))


def choose_scale(offered_real_bps: float, budget_bps: float | None = None) -> ScaleChoice:
    calibrated = budget_bps is not None
    if budget_bps is None:
        budget_bps, calibrated = load_budget()
    return ScaleChoice(nice_ceil(offered_real_bps / (budget_bps * SAFETY)), offered_real_bps, budget_bps, calibrated)
