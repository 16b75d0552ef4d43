"""`scale: auto`: the scale that fits a workload's offered load into what this machine forwards faithfully.

The budget is the aggregate host-NIC rate (bits/s of emulated traffic, on
cross-segment paths of three switches) at which `hpnlab calibrate` measured
rate fidelity >= 0.95 with the CPU never running out. It is cached per machine
and per probe size (CACHE): what a machine forwards faithfully shrinks as the
fabric grows (more ports for Open vSwitch and the PFC agent to poll, more
agent processes), so a fabric uses the calibration of the largest probe not
bigger than itself, and the choice says which. Without a calibration the
DEFAULT_BUDGET measured on the development machine (2 cores, userspace OVS)
is used, and the choice says so.

    offered (real)  = per step, min(senders' NIC ports, receivers' NIC ports) x port rate,
                      the busiest step, summed over jobs running side by side
                      (a ring all-reduce: every rank's NIC; an incast: the receiver's)
    scale           = offered / (budget x SAFETY x D), rounded up to 1, 2, 2.5 or 5 x 10^k

With time dilation D (traffic/timebase.py) links run at rate / (scale x D): the same budget then carries D
times the bytes, so the bytes scale is D times smaller (ops of more packets, less rounded by the shapers).
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
class Budget:
    bps: float
    calibrated: bool  # measured on this machine (else DEFAULT_BUDGET_BPS)
    at_hosts: int | None = None  # the probe fabric's size it was measured on

    def source(self, hosts: int | None = None) -> str:
        if not self.calibrated:
            return "the default budget (not calibrated here: run 'hpnlab calibrate')"
        text = f"this machine's calibration on {self.at_hosts} hosts"
        if hosts is not None and self.at_hosts is not None and hosts > self.at_hosts:
            # Costs grow with the fabric (ports polled, agents), not only with the load.
            text += f" (this fabric has {hosts}: 'hpnlab calibrate --hosts {hosts}' measures its own)"
        return text


@dataclass(frozen=True)
class ScaleChoice:
    scale: float
    offered_real_bps: float
    budget: Budget
    hosts: int | None = None
    dilation: float = 1.0

    @property
    def offered_emulated_bps(self) -> float:
        """What the machine forwards: the offered load at rate / (scale x D)."""
        return self.offered_real_bps / self.scale / self.dilation

    def why(self) -> str:
        slow = f" with time dilated {self.dilation:g}x" if self.dilation != 1 else ""
        return (f"scale auto = 1/{self.scale:,.0f}{slow}: {self.offered_real_bps / 1e12:g} Tbit/s offered -> "
                f"{self.offered_emulated_bps / 1e6:.0f} Mbit/s emulated, within {SAFETY:.0%} of "
                f"{self.budget.bps / 1e6:.0f} Mbit/s from {self.budget.source(self.hosts)}")


def machine_key() -> str:
    """What a calibration is valid for: this host's name, cores and kernel."""
    return f"{platform.node()}/{os.cpu_count()}cpu/{platform.release()}"


PROBE_HOSTS = 8  # the default calibration's fabric (and that of entries saved before sizes were recorded)


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _by_hosts(data: dict) -> dict[str, dict]:
    """This machine's calibration records by probe size, as saved (an entry from before sizes were
    recorded is the PROBE_HOSTS one)."""
    entry = data.get(machine_key())
    if not isinstance(entry, dict):
        return {}
    return dict(entry.get("by_hosts") or {str(PROBE_HOSTS): entry})


def calibrations(path: Path | None = None) -> dict[int, float]:
    """{probe hosts: budget bits/s} measured on this machine."""
    return {int(hosts): float(result["budget_bps"]) for hosts, result in _by_hosts(_read(path or CACHE)).items()
            if isinstance(result, dict) and isinstance(result.get("budget_bps"), (int, float))
            and str(hosts).isdigit()}


def load_budget(path: Path | None = None, hosts: int | None = None) -> Budget:
    """This machine's budget for a fabric of `hosts`: the calibration on the largest probe not bigger than
    it (else the smallest: a bigger fabric's budget is the conservative one), or the default."""
    known = calibrations(path)
    if not known:
        return Budget(DEFAULT_BUDGET_BPS, False)
    fits = [h for h in known if hosts is None or h <= hosts]
    at = max(fits) if fits else min(known)
    return Budget(known[at], True, at)


def save_budget(result: dict, path: Path | None = None, hosts: int = PROBE_HOSTS) -> Path:
    path = path or CACHE
    data = _read(path)
    by_hosts = _by_hosts(data)  # the other sizes' records stay whole
    by_hosts[str(hosts)] = result
    data[machine_key()] = {"by_hosts": by_hosts}
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


def choose_scale(offered_real_bps: float, budget_bps: float | None = None, hosts: int | None = None,
                 dilation: float = 1.0) -> ScaleChoice:
    budget = Budget(budget_bps, True, hosts) if budget_bps is not None else load_budget(hosts=hosts)
    return ScaleChoice(nice_ceil(offered_real_bps / (budget.bps * SAFETY * dilation)), offered_real_bps, budget,
                       hosts, dilation)
