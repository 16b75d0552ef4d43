"""The versions of what runs a network here (kernel, OVS, Mininet, the controller runtime, this code): a results
folder records them, and each server of a cluster reports its own through its agent."""

from __future__ import annotations

import importlib.metadata as md
import os
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


def git_revision() -> tuple[str | None, bool]:
    """This checkout's short commit (None outside git) and whether it has changes git sees."""
    return (_first_line(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]),
            bool(_first_line(["git", "-C", str(ROOT), "status", "--porcelain"])))


def revision_text(commit: str | None, dirty: bool) -> str:
    """A revision as a stamp says it: `abc1234`, `abc1234 with local changes`, or unknown."""
    return f"{commit or 'unknown'}{' with local changes' if dirty else ''}"


def machine_summary() -> str:
    """This machine in one line, for stamping a measurement: host name, cores, CPU model, kernel."""
    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{platform.node() or 'this machine'}: {os.cpu_count()} cores, {cpu}, kernel {platform.release()}"


def versions(caps=None) -> dict:
    """`caps`: this machine's testbed.system.capabilities probe, if made already (it takes a while)."""
    git, dirty = git_revision()
    return {"kernel": platform.release(), "python": platform.python_version(),
            "ovs": _first_line(["ovs-vswitchd", "--version"]), "mininet": (caps or probe()).mininet_version,
            "os-ken": _pkg("os-ken"), "ryu": _pkg("ryu"), "pyroute2": _pkg("pyroute2"),
            "git": git, "git_dirty": dirty}
