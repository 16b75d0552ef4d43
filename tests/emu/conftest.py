"""Emulation tests: root, Mininet and a running Open vSwitch.

`no_leftovers` snapshots what a run could leave on the machine (OVS bridges,
the testbed's BPF programs and TCP congestion controls, root-namespace
interfaces, named network namespaces, Mininet shells, run records) and asserts
the test left exactly what it found.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from testbed.system.capabilities import ovs_running
from testbed.system.ownership import RUN_DIR

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
        "bpf programs": _testbed_programs(),
        "congestion controls": set(Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()),
        "interfaces": set(os.listdir("/sys/class/net")),
        "netns": lines("ip", "netns", "list"),
        "run processes": shells,
        "run records": set(os.listdir(RUN_DIR)) if RUN_DIR.is_dir() else set(),
    }


def _testbed_programs() -> set[str]:
    """The testbed's BPF programs loaded now (testbed/qos/bpf: queues, ECN marking, a lossy link, DCTCP), by id."""
    import json

    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
    return {f"{p['id']}:{p.get('name')}" for p in json.loads(out or "[]")
            if p.get("name") in ("on_enqueue", "on_dequeue", "on_reset", "on_destroy", "mark_ecn", "lose_ab",
                                 "lose_ba") or p.get("name", "").startswith("hpn_")}


@pytest.fixture
def take_snapshot():
    return snapshot


@pytest.fixture(name="leftovers")
def leftovers_fixture():
    """leftovers(before, take): what a snapshot has beyond `before`, BPF programs given the kernel's grace."""
    return leftovers


@pytest.fixture
def no_leftovers():
    before = snapshot()
    yield before
    left = leftovers(before)
    assert not left, f"left behind: {left}"


def leftovers(before: dict[str, set[str]], take=snapshot) -> dict[str, list[str]]:
    """What `take()` has that `before` had not. BPF programs whose owner closed them (or died) are freed by the
    kernel after a grace period (0.5 s here for DCTCP's struct_ops): those alone are looked at again for up
    to 5 s before they count."""
    import time

    deadline = time.monotonic() + 5
    while True:
        after = take()
        left = {k: sorted(after[k] - before[k]) for k in before if after[k] - before[k]}
        if set(left) != {"bpf programs"} or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


@pytest.fixture(scope="module")
def shared_network(request):
    """A network that several tests of a module only read, or change and put back: tests ask for it with
    `@pytest.mark.parametrize("shared_network", [KEY], indirect=True)`, KEY naming a factory in the module's
    NETWORKS. pytest runs the tests of one KEY together and stops that network before the next KEY's starts, so
    one is up at a time (hpnlab runs one network per machine). What its run leaves is checked once it stops."""
    before = snapshot()
    with request.module.NETWORKS[request.param]() as net:
        yield net
    left = leftovers(before)
    assert not left, f"left behind by the shared network {request.param!r}: {left}"


@pytest.fixture
def net(shared_network):
    """The shared network, put back after the test as the next test expects it: every link the test set down is
    up again, every precise flow it declared withdrawn and unpinned, and the controller routes every switch."""
    yield shared_network
    restore(shared_network)


def restore(net) -> None:
    for name in sorted(net.down):
        net.set_link(name, up=True)
    for flow in list(net.steered.values()):
        net.unsteer(flow)
    if net.controller is not None:
        import time

        net.controller.withdraw()
        # the controller hears a link come back from its switch's port status, a moment after `set_link`
        deadline = time.monotonic() + 30
        while (down := [lk["name"] for lk in net.controller.get("/links") if not lk["up"]]) \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not down, f"the controller still has {down} down 30 s after they came up"
        health = net.controller.wait_ready(timeout=30)
        assert not net.controller.get("/flows"), health


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


STEAL_LIMIT = 0.05


class CpuWindow:
    """CPU time the hypervisor took from this machine (steal) since the test began.

    Rates here are CPU-bound emulation. On a VM whose host throttles it (steal time),
    a rate below its threshold says nothing about the code, so a rate check taken
    in such a window is skipped with the figure, while every exact check (bytes,
    drops, ports) still runs.
    """

    def __init__(self):
        self.start = self._stat()

    @staticmethod
    def _stat() -> list[int]:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]

    def steal_share(self) -> float:
        now = self._stat()
        delta = [b - a for a, b in zip(self.start, now, strict=True)]
        total = sum(delta[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
        return delta[7] / total if total else 0.0

    def rates_are_meaningful(self) -> None:
        share = self.steal_share()
        if share > STEAL_LIMIT:
            pytest.skip(f"the hypervisor took {share:.0%} of the CPU (steal) during this measurement; "
                        f"rate thresholds need < {STEAL_LIMIT:.0%} (exact checks above passed)")


@pytest.fixture
def cpu_window():
    return CpuWindow()
