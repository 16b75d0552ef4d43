"""This machine's calibration as `hpnlab calibrate` saved it (testbed/experiment/calibration.py measures it), read
back for `scale: auto` and `dilation: auto` (testbed/qos/scale.py): per machine (`machine_key`), per probe fabric
size (`probe_params`) and per transport (`budget_key`). The file is the user's to keep or delete: a record edited
into nonsense is left out, never trusted."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

from topos.errors import InputError
from topos.inputs import write_file

CACHE = Path(os.environ.get("HPNLAB_CACHE", "/var/cache/hpnlab")) / "calibration.json"


def machine_key() -> str:
    """What a calibration is valid for: this host's name, cores and kernel."""
    return f"{platform.node()}/{os.cpu_count()}cpu/{platform.release()}"


PROBE_HOSTS = 8  # the default calibration's fabric (and that of entries saved before sizes were recorded)


def probe_params(hosts: int) -> dict:
    """HPN of `hosts` hosts as the calibration and the scale benchmark size it: the default (8 hosts, two
    segments of 4) or segments of 8 hosts, 2 rails, one pod."""
    if hosts < PROBE_HOSTS or hosts % PROBE_HOSTS:
        raise InputError("the probe's size must be 8 or a multiple of 8 hosts", "use --hosts 8, 16, 32, 64 or 128",
                         field="hosts", value=hosts)
    return {} if hosts == PROBE_HOSTS else {"segments_per_pod": hosts // 8, "hosts_per_segment": 8}


def budget_key(transport: str) -> str:
    """Where a transport's budget is kept in the calibration: roce's own, or TCP's (rdma's NICs are the kernel's
    too)."""
    return "roce_budget_bps" if transport == "roce" else "budget_bps"


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


def calibrations(path: Path | None = None, transport: str = "tcp") -> dict[int, float]:
    """{probe hosts: budget bits/s} measured on this machine for `transport` (budget_key)."""
    key = budget_key(transport)
    return {int(hosts): float(result[key]) for hosts, result in _by_hosts(_read(path or CACHE)).items()
            if isinstance(result, dict) and isinstance(result.get(key), (int, float)) and str(hosts).isdigit()}


def floors(path: Path | None = None) -> dict[int, tuple[float, float, float]]:
    """{probe hosts: (base, per step, full frames per step) seconds} of the per-op floors measured on this
    machine (a floor saved before the frames were measured adds none; one edited into nonsense is left out)."""
    out = {}
    for hosts, result in _by_hosts(_read(path or CACHE)).items():
        f = result.get("floor") if isinstance(result, dict) else None
        if not (str(hosts).isdigit() and isinstance(f, dict) and "base_s" in f and "per_step_s" in f):
            continue
        figures = tuple(f.get(k, 0.0) for k in ("base_s", "per_step_s", "frame_s"))
        if all(isinstance(x, (int, float)) and x >= 0 for x in figures):
            out[int(hosts)] = tuple(float(x) for x in figures)
    return out


def reactions(path: Path | None = None) -> dict[int, dict]:
    """{probe hosts: Reaction's figures} of the PFC reactions measured on this machine (one edited into nonsense
    is left out)."""
    out = {}
    for hosts, result in _by_hosts(_read(path or CACHE)).items():
        r = result.get("reaction") if isinstance(result, dict) else None
        if not (str(hosts).isdigit() and isinstance(r, dict)):
            continue
        figures = {k: r.get(k) for k in ("max_s", "p99_s", "needed_s") if isinstance(r.get(k), (int, float))}
        if figures.get("max_s", 0) > 0 and all(v >= 0 for v in figures.values()):
            out[int(hosts)] = figures
    return out


def probe_for(known: dict, hosts: int | None) -> int:
    """The calibration a fabric of `hosts` uses: the largest probe not bigger than it (else the smallest: a
    bigger fabric's figures are the conservative ones)."""
    fits = [h for h in known if hosts is None or h <= hosts]
    return max(fits) if fits else min(known)


def save_budget(result: dict, path: Path | None = None, hosts: int = PROBE_HOSTS) -> Path:
    """Keep a calibration of a fabric of `hosts`: its budget (`budget_bps`, `points`), its per-op floor (`floor`)
    and/or its PFC reaction (`reaction`); what `result` does not measure stays as it was."""
    path = path or CACHE
    data = _read(path)
    by_hosts = _by_hosts(data)  # the other sizes' records stay whole
    old = by_hosts.get(str(hosts))
    by_hosts[str(hosts)] = {**(old if isinstance(old, dict) else {}), **result}
    data[machine_key()] = {"by_hosts": by_hosts}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    write_file(tmp, json.dumps(data, indent=1), "calibration")
    tmp.replace(path)
    return path
