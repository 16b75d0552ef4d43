"""The versions of what runs a network here (kernel, OVS, Mininet, the controller runtime, this code): a results
folder records them, and each server of a cluster reports its own through its agent."""

from __future__ import annotations

import importlib.metadata as md
import platform
import subprocess
from pathlib import Path

from testbed.system.capabilities import probe

ROOT = Path(__file__).resolve().parents[2]


def _first_line(cmd: list[str]) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return None


def _pkg(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def versions(caps=None) -> dict:
    """`caps`: this machine's testbed.system.capabilities probe, if made already (it takes a while)."""
    return {"kernel": platform.release(), "python": platform.python_version(),
            "ovs": _first_line(["ovs-vswitchd", "--version"]), "mininet": (caps or probe()).mininet_version,
            "os-ken": _pkg("os-ken"), "ryu": _pkg("ryu"), "pyroute2": _pkg("pyroute2"),
            "git": _first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
            "git_dirty": bool(_first_line(["git", "-C", str(ROOT), "status", "--porcelain"]))}
