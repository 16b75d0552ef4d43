"""The cluster tier: runs on s1 of the VMs `make cluster-test` boots, with HPNLAB_CLUSTER naming the run's
cluster.yaml (s1 and s2, joined by a cable only the two VMs see)."""

from __future__ import annotations

import os
import subprocess

import pytest

from testbed.cluster.spec import load_cluster


def pytest_collection_modifyitems(config, items):
    if not os.environ.get("HPNLAB_CLUSTER"):
        for item in items:
            item.add_marker(pytest.mark.skip(reason="the cluster tier runs inside `make cluster-test`'s VMs"))


@pytest.fixture(scope="session")
def cluster():
    return load_cluster(os.environ["HPNLAB_CLUSTER"])


@pytest.fixture(scope="session")
def ssh(cluster):
    def run(server, command: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run(server.ssh_argv(command), capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        if check:
            assert r.returncode == 0, f"{server.name}: {command}: {r.stderr.strip()}"
        return r

    return run
