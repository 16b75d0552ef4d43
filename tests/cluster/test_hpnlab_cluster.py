"""`hpnlab up --cluster`: hpnlab's own network spread over the tier's two VMs by its placement, with the server
agent owning what is made on s2. A crossing uplink fails and every host still reaches every other; after the
run neither server keeps a bridge, an interface, a run record or a process of it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from testbed.cluster.placement import place
from topos import build

HPNLAB = str(Path(sys.executable).parent / "hpnlab")
# a small HPN, so that the VMs' emulated CPUs build it in minutes: 2 segments of 2 single-rail hosts, 2
# aggregation switches per plane, 2 uplinks per ToR
PARAMS = {"hosts_per_segment": 2, "rails": 1, "aggs_per_plane": 2, "tor_uplinks": 2}


def state(ssh, server) -> dict[str, set[str]]:
    out = ssh(server, "echo BR; ovs-vsctl list-br; echo IF; ls /sys/class/net; echo RUN; ls /run/hpnlab 2>/dev/null;"
                      " echo PROC; pgrep -f '[m]ininet:|[t]estbed.cluster.agent' || true").stdout
    parts = re.split(r"^(BR|IF|RUN|PROC)$", out, flags=re.M)[1:]
    return {k: set(v.split()) for k, v in zip(parts[::2], parts[1::2], strict=True)}


def test_doctor_finds_every_server_ready():
    r = subprocess.run([HPNLAB, "doctor", "--cluster", os.environ["HPNLAB_CLUSTER"], "--json"], capture_output=True,
                       text=True, timeout=600)
    print(r.stdout[-3000:], r.stderr[-2000:])
    reports = json.loads(r.stdout)
    assert [rep["server"] for rep in reports] == ["s1", "s2"]
    for rep in reports:
        checks = {what: ok for what, ok, _detail in rep["checks"]}
        assert checks == dict.fromkeys(["ssh", "clock", "hpnlab", "root", "Mininet", "Open vSwitch", "gre tunnels",
                                        "tunnel_ip"], True), rep
        assert rep["capabilities"]["datapath"] == "kernel"
    assert r.returncode == 0


def test_hpnlab_up_spreads_hpn_over_two_servers_and_leaves_nothing(cluster, ssh):
    topo = build("hpn", **PARAMS)
    placement = place(topo, cluster.names)
    crossing = placement.crossing[0].name
    before = {s.name: state(ssh, s) for s in cluster.servers}
    r = subprocess.run([HPNLAB, "up", "hpn", *(f"{k}={v}" for k, v in PARAMS.items()),
                        "--cluster", os.environ["HPNLAB_CLUSTER"], "--fail", crossing, "--pingall", "--no-cli"],
                       capture_output=True, text=True, timeout=1800)
    print(r.stdout[-3000:], r.stderr[-3000:])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "placement over servers" in r.stdout and f"failed {crossing}" in r.stdout
    # 4 hosts with one NIC each: 12 host pairs, every one answers with a crossing uplink down
    sent, received = map(int, re.search(r"pingall: (\d+)/(\d+) replies", r.stdout).groups()[::-1])
    assert (sent, received) == (12, 12)
    after = {s.name: state(ssh, s) for s in cluster.servers}
    assert after == before
