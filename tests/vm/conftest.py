"""Full-kernel VM tier (`make vm-test` runs these inside the qemu VM).

They need what this project's CI kernel lacks: soft-RoCE between network
namespaces, the OVS kernel datapath, netem and RED. Anywhere else they skip,
saying what is missing.
"""

from __future__ import annotations

import os

import pytest

from testbed.system.capabilities import probe


def pytest_runtest_logreport(report):
    """Each test's outcome as it ends, into HPNLAB_VM_PROGRESS when set (scripts/vm/guest-run.sh): a boot after a
    kernel panic under TCG runs only what is not done. Written through at once: the panic comes without warning."""
    path = os.environ.get("HPNLAB_VM_PROGRESS")
    if not path or not (report.when == "call" or report.failed or report.skipped):
        return
    with open(path, "a") as f:
        f.write(f"{report.outcome} {report.nodeid}\n")
        f.flush()
        os.fsync(f.fileno())


def pytest_collection_modifyitems(config, items):
    caps = probe() if os.geteuid() == 0 else None
    missing = []
    if caps is None:
        missing.append("root")
    else:
        if not caps.rxe_in_netns:
            missing.append("soft-RoCE between namespaces")
        if not caps.ovs_kernel_datapath:
            missing.append("the openvswitch module")
        missing += [q for q in ("netem", "red") if not caps.qdiscs.get(q)]
    for item in items:
        if "tests/vm" in str(item.fspath) and missing:
            item.add_marker(pytest.mark.skip(reason=f"full-kernel VM tier: no {', '.join(missing)} (make vm-test)"))
