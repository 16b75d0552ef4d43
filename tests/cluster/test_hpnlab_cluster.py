"""`hpnlab up --cluster`: hpnlab's own network spread over the tier's two VMs by its placement, with the server
agent owning what is made on s2. A crossing uplink fails and every host still reaches every other; a ring
all-reduce between the servers' hosts on links shaped on both servers delivers its exact bytes; after each run
neither server keeps a bridge, an interface, a run record or a process of it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.cluster.placement import place
from topos import build

HPNLAB = str(Path(sys.executable).parent / "hpnlab")
# a small HPN, so that the VMs' emulated CPUs build it in minutes: 2 segments of 2 single-rail hosts, 2
# aggregation switches per plane, 2 uplinks per ToR
PARAMS = {"hosts_per_segment": 2, "rails": 1, "aggs_per_plane": 2, "tor_uplinks": 2}


# made by the kernel when the GRE module loads (the first GRE tunnel of the boot), not by a run
KERNEL_FALLBACK_DEVICES = {"gre0", "gretap0", "erspan0"}


def state(ssh, server) -> dict[str, set[str]]:
    out = ssh(server, "echo BR; ovs-vsctl list-br; echo IF; ls /sys/class/net; echo RUN; ls /run/hpnlab 2>/dev/null;"
                      " echo PROC; pgrep -f '[m]ininet:|[t]estbed.cluster.agent' || true").stdout
    parts = re.split(r"^(BR|IF|RUN|PROC)$", out, flags=re.M)[1:]
    seen = {k: set(v.split()) for k, v in zip(parts[::2], parts[1::2], strict=True)}
    seen["IF"] -= KERNEL_FALLBACK_DEVICES
    return seen


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


@pytest.mark.parametrize("routing", ["static", "controller"])
def test_hpnlab_up_spreads_hpn_over_two_servers_and_leaves_nothing(cluster, ssh, routing):
    topo = build("hpn", **PARAMS)
    placement = place(topo, cluster.names)
    crossing = placement.crossing[0].name
    before = {s.name: state(ssh, s) for s in cluster.servers}
    r = subprocess.run([HPNLAB, "up", "hpn", *(f"{k}={v}" for k, v in PARAMS.items()),
                        "--cluster", os.environ["HPNLAB_CLUSTER"], "--routing", routing, "--fail", crossing,
                        "--pingall", "--no-cli"],
                       capture_output=True, text=True, timeout=1800)
    print(r.stdout[-3000:], r.stderr[-3000:])
    assert r.returncode == 0, r.stderr[-2000:]
    assert "placement over servers" in r.stdout and f"failed {crossing}" in r.stdout
    # 4 hosts with one NIC each: 12 host pairs, every one answers with a crossing uplink down
    sent, received = map(int, re.search(r"pingall: (\d+)/(\d+) replies", r.stdout).groups()[::-1])
    assert (sent, received) == (12, 12)
    after = {s.name: state(ssh, s) for s in cluster.servers}
    assert after == before


def test_a_stream_between_servers_survives_a_crossing_uplink_failure_under_the_controller(cluster):
    """Controller routing with the controller on s1 and half the switches on s2: a paced UDP stream from a host
    on s1 to a host on s2 keeps flowing when the sender's plane-0 ToR loses its uplink to s2; the controller
    saw the port go down."""
    from testbed.experiment.measure import StreamSpec
    from testbed.net.network import Network

    topo = build("hpn", **PARAMS)
    placement = place(topo, cluster.names)
    src = next(h.name for h in topo.hosts if placement.server_of[h.name] == "s1")
    dst = next(h.name for h in topo.hosts if placement.server_of[h.name] == "s2")
    tor = next(l.b for l in topo.links_of(src) if l.kind == "host-tor" and l.nic_port == 0)
    uplink = next(l for l in placement.crossing if tor in (l.a, l.b))
    with Network(topo, routing="controller", cluster=cluster) as net:
        assert net.pingall().loss == 0
        r, sent, _ = streams(net, [StreamSpec(src=src, dst=dst, sport=5000, dport=7000, pps=200, duration=8)],
                             actions=[(3, lambda: net.set_link(uplink.name, up=False))], tail=4, gap_ms=20)
        events = net.controller.get("/events")
    t_fail = r["actions_at"][0]
    got = r["receivers"][f"{dst}:7000"]
    (stream,) = got["streams"].values()
    print(f"sent {sent}, received {stream['received']}, lost {stream['lost']}, "
          f"max gap {got['max_gap_ms']:.0f} ms, last packet {stream['last'] - t_fail:.1f} s after the failure")
    assert any(e.get("link") == uplink.name for e in events), events
    assert stream["last"] - t_fail > 3  # it kept arriving after the failure, across the servers
    # what is lost is the failover gap (469 ms measured under TCG): at most 2 s of the stream
    assert stream["received"] >= sent - 2 * 200


def test_a_ring_all_reduce_across_servers_on_links_shaped_on_both_delivers_its_exact_bytes(cluster, ssh):
    """`hpnlab traffic run --cluster` with QoS (HTB on every port, each server shaping its own): a ring over the
    4 hosts, 2 on each server, so every iteration crosses the tunnel both ways."""
    topo = build("hpn", **PARAMS)
    placement = place(topo, cluster.names)
    before = {s.name: state(ssh, s) for s in cluster.servers}
    scale = 100_000  # 2 Mbit/s per host port: what the VMs' emulated CPUs forward with room to spare
    r = subprocess.run([HPNLAB, "traffic", "run", "--topo", "hpn", *(f"-p{k}={v}" for k, v in PARAMS.items()),
                        "--cluster", os.environ["HPNLAB_CLUSTER"], "--no-pfc", "--scale", str(scale), "--op",
                        "allreduce", "--algorithm", "ring", "--size", "20GB", "--iters", "2", "--format", "json"],
                       capture_output=True, text=True, timeout=1800)
    print(r.stderr[-3000:])
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(r.stdout)
    ops = rec["ops"]
    print(f"ops: {[(o['bytes_delivered'], o['bytes_expected'], round(o['busbw_bps'] / 1e6, 3)) for o in ops]}; "
          f"fraction of ideal {[round(o['fraction_of_ideal'], 3) for o in ops]}; drops {rec['drops']}")
    assert len(ops) == 2 and all(o["bytes_delivered"] == o["bytes_expected"] > 0 for o in ops)
    # the record names both servers, their versions (the same code on each) and where every node ran
    servers = rec["cluster"]["servers"]
    assert list(servers) == ["s1", "s2"] and servers["s1"]["versions"]["git"] == servers["s2"]["versions"]["git"]
    assert rec["cluster"]["placement"]["servers"] == {s: sorted(placement.nodes_on(s)) for s in cluster.names}
    # the ring crossed the tunnel: the crossing links carried bytes each way, shaped below their port rate
    carried = {(f["from"], f["to"]): f["bytes"] for f in rec["fabric_links"]}
    crossing = sum(carried[(l.a, l.b)] + carried[(l.b, l.a)] for l in placement.crossing)
    assert crossing >= sum(o["bytes_expected"] for o in ops) // 2, crossing
    # HTB on both servers read back through s2's agent: host ports on s2 sent what the ring gave them
    rx = rec["host_port_rx"]
    on_s2 = [k for k in rx if placement.server_of[k.split(":")[0]] == "s2"]
    assert on_s2 and sum(rx[k] for k in on_s2) > 0
    assert max(o["fraction_of_ideal"] for o in ops) <= 1.05  # never faster than the shaped rate allows
    # fidelity looks at every server's CPU, each sample
    assert rec["timeline"] and all(set(row["cpu_idle_by_server"]) == {"s1", "s2"} for row in rec["timeline"])
    assert rec["fidelity"]["cpu_idle_min"] == min(min(row["cpu_idle_by_server"].values()) for row in rec["timeline"])
    after = {s.name: state(ssh, s) for s in cluster.servers}
    assert after == before


def streams(net, specs: list, **kw) -> tuple[dict, int, int]:
    """Paced UDP streams between hosts on any server (run_streams: each receiver bound before the senders
    start); (the run, packets sent, packets received)."""
    from testbed.experiment.measure import run_streams

    r = run_streams(net, specs, **kw)
    print("receivers:", [{k: v for k, v in rep.items() if k != "gaps"} for rep in r["receivers"].values()])
    return (r, sum(x["sent"] for x in r["senders"]),
            sum(st["received"] for rep in r["receivers"].values() for st in rep["streams"].values()))


@pytest.fixture(scope="module")
def shaped(cluster):
    """The small HPN over both servers, shaped on both (1/100,000: host ports 2 Mbit/s, uplinks 4), with PFC:
    one network for the tests below (a start under the VMs' emulated CPUs takes minutes)."""
    from testbed.net.network import Network
    from testbed.qos.spec import QosSpec

    topo = build("hpn", **PARAMS)
    # a 20 ms poll: a one-CPU TCG VM does not keep 5 ms; the headroom follows the period
    spec = QosSpec(scale=100_000, pfc={"poll_ms": 20})
    with Network(topo, qos=spec, cluster=cluster) as net:
        yield net, place(topo, cluster.names)


def test_pfc_pauses_cross_servers_to_the_sending_hosts(shaped):
    """Both hosts of s1 and the other host of s2 send into one host of s2 at 1.5-2.4 times its ports (RoCE-like
    UDP in the lossless class): the queues at the receiver's ToRs on s2 pause aggregation ports on either
    server, whose queues pause s1's ToRs and hosts; every pause toward another server's port is a message
    between the agents.

    What this tier asserts is the mechanism across servers, not losslessness: a one-CPU TCG VM leaves the
    polling PFC agent without the CPU for 0.3-10 s at a time (measured in the cluster tier), longer than any
    headroom sized from its period, so drops there are printed, not claimed away. Lossless across servers
    is the claim of the kernel's event-driven PFC (issue #28); on one machine tests/emu/test_pfc_servers.py
    asserts it."""
    from testbed.experiment.measure import StreamSpec
    from testbed.qos.shaper import lossless_leaf

    net, placement = shaped
    on_s2 = [h.name for h in net.topo.hosts if placement.server_of[h.name] == "s2"]
    dst = on_s2[0]
    src = [h.name for h in net.topo.hosts if placement.server_of[h.name] == "s1"] + on_s2[1:]
    # 2 streams of 1.6 Mbit/s (143 x 1400 B/s) from each of 3 hosts into the receiver's two 2 Mbit/s ports. A
    # sender whose two streams hash onto one of its ports still puts 2 Mbit/s in, so at least 6 Mbit/s meet 4:
    # with s1's two hosts alone that floor was 4, and in one CI run both hashed so and nothing queued anywhere.
    _, sent, got = streams(net, [StreamSpec(src=h, dst=dst, sport=6000 + 10 * i + j, dport=7000, pps=143, duration=4,
                                            size=1400, stream=2 * i + j, tos=26 << 2)
                                 for i, h in enumerate(src) for j in range(2)], tail=8)
    drops = {k: q[0].drops for k, q in net.qos.stats(lossless_leaf(3)).items() if q and q[0].drops}
    report = net.pfc.report()
    between, period = report["between_servers"], report["poll_period_ms"]
    print(f"sent {sent}, received {got}, lossless drops {drops}; between servers {between}; poll {period}; "
          f"by server {report['by_server']}; pauses by tier {report['pauses_by_tier']}")
    # the pauses crossed: messages from the congested s2 reached s1 (s1 pauses s2's ports only when one of its
    # aggregation switches backs up: in 1 of 5 runs it never did), every one taken, and s1's hosts paused
    assert report["by_server_remote"]["s1"]["received"] > 0, report["by_server_remote"]
    assert between["rejected"] == 0 and between["one_way_ms"]["n"] > 0
    # how far back the pause travels depends on the agents' timing too (in 1 of 6 runs it stopped at s1's
    # ToRs): the pauses must reach s1, its ToRs or its hosts
    paused = {k.split(":")[0] for k in report["ports"]}
    assert paused & set(placement.nodes_on("s1")), report["ports"]
    assert 0 < got and got + sum(drops.values()) <= sent  # delivered, and nothing counted twice


def test_a_stream_across_servers_keeps_its_rate_through_the_tunnel(shaped):
    """A UDP stream from a host on s1 to a host on s2 offered above its host port's rate: what the sender's
    port shapes on s1, and what the receiver's ToR forwards on s2 after the crossing uplink's tunnel, against
    each other and against the port's shaped rate."""
    from testbed.experiment.measure import StreamSpec
    from testbed.qos.shaper import ROOT

    net, placement = shaped
    topo = net.topo
    src = next(h.name for h in topo.hosts if placement.server_of[h.name] == "s1")
    dst = next(h.name for h in topo.hosts if placement.server_of[h.name] == "s2")
    near = [f"{src}:{l.a_port if l.a == src else l.b_port}" for l in topo.links_of(src)]
    far = [f"{l.other(dst)}:{l.a_port if l.a != dst else l.b_port}" for l in topo.links_of(dst)]  # ToRs -> dst
    rate = net.qos.ports[near[0]].plan.rate_bps
    result: dict = {}

    def window() -> None:  # from 3 s into the stream (its queue full) for 6 s
        t0, a = time.monotonic(), net.qos.stats(ROOT)
        time.sleep(6)
        t1, b = time.monotonic(), net.qos.stats(ROOT)
        result["near"] = max(b[k][0].bytes - a[k][0].bytes for k in near) * 8 / (t1 - t0)
        result["far"] = sum(b[k][0].bytes - a[k][0].bytes for k in far) * 8 / (t1 - t0)

    # 2.4 Mbit/s into a 2 Mbit/s port
    streams(net, [StreamSpec(src=src, dst=dst, sport=6100, dport=7000, pps=215, duration=12, size=1400)],
            actions=[(3, window)], tail=4)
    print(f"{src} -> {dst}, port shaped at {rate / 1e6:g} Mbit/s: sent on s1 {result['near'] / 1e6:.3f}, forwarded on "
          f"s2 after the tunnel {result['far'] / 1e6:.3f} Mbit/s ({result['near'] / rate:.3f} and "
          f"{result['far'] / rate:.3f} of the shaped rate)")
    assert result["near"] <= 1.02 * rate  # the shaper holds
    # What the tunnel carried of what the shaper sent (0.95-1.01 measured). Against the shaped rate itself
    # (0.99-1.01 in two runs) the one-CPU TCG VM can be the limit first: once its sender reached 0.78 of
    # 2 Mbit/s. Printed, not asserted.
    assert result["far"] >= 0.9 * result["near"] > 0
