"""Emulation tests: root, Mininet and a running Open vSwitch.

`no_leftovers` snapshots what a run could leave on the machine (OVS bridges,
root-namespace interfaces, named network namespaces, Mininet shells, run
records) and asserts the test left exactly what it found.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testbed.capabilities import ovs_running
from testbed.owner import RUN_DIR

pytestmark = pytest.mark.emu


def pytest_collection_modifyitems(config, items):
    reason = None
    if os.geteuid() != 0:
        reason = "emulation tests need root"
    elif not ovs_running()[0]:
        reason = "Open vSwitch is not running (scripts/bootstrap.sh starts it)"
    for item in items:
        if "tests/emu" in str(item.fspath):
            item.add_marker(pytest.mark.emu)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


def snapshot() -> dict[str, set[str]]:
    def lines(*cmd):
        return set(subprocess.run(cmd, capture_output=True, text=True).stdout.split())

    shells = set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes()
            except OSError:
                continue
            # Mininet's node shells and what a run starts inside hosts or beside them
            if any(m in cmd for m in (b"mininet:", b"traffic.agent", b"traffic.udpstream",
                                      b"controllers.launcher", b"iperf3")):
                shells.add(p.name)
    return {
        "bridges": lines("ovs-vsctl", "list-br"),
        "interfaces": set(os.listdir("/sys/class/net")),
        "netns": lines("ip", "netns", "list"),
        "run processes": shells,
        "run records": set(os.listdir(RUN_DIR)) if RUN_DIR.is_dir() else set(),
    }


@pytest.fixture
def take_snapshot():
    return snapshot


@pytest.fixture
def no_leftovers():
    before = snapshot()
    yield before
    after = snapshot()
    left = {k: sorted(after[k] - before[k]) for k in before if after[k] - before[k]}
    assert not left, f"left behind: {left}"


@pytest.fixture(scope="session")
def quick_results(tmp_path_factory):
    """`hpnlab run --quick` of a shipped experiment, once per session: the lab tests read the same runs."""
    import sys

    root = Path(__file__).resolve().parents[2]
    hpnlab = str(Path(sys.executable).parent / "hpnlab")
    cwd = tmp_path_factory.mktemp("quick-runs")
    done: dict[str, subprocess.CompletedProcess] = {}

    def run(stem: str) -> tuple[subprocess.CompletedProcess, Path]:
        if stem not in done:
            done[stem] = subprocess.run([hpnlab, "run", "--quick", str(root / "experiments" / f"{stem}.yaml")],
                                        cwd=cwd, capture_output=True, text=True, timeout=900)
        return done[stem], cwd

    return run
