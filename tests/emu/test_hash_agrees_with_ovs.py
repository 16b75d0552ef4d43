"""controllers/hashing.py predicts what Open vSwitch's `multipath` action chooses, bit for bit.

A bridge of this test's own (userspace datapath, no ports) gets the rules; `ofproto/trace` reports
what they do with each random 5-tuple, with no packet sent.
"""

from __future__ import annotations

import os
import random
import re
import subprocess

import pytest

from controllers.hashing import FiveTuple, bucket, seed
from controllers.ruleset import RuleSet
from testbed.net.static_routes import bundle_lines

SETS = ((2, 0), (3, 777), (8, 0), (60, 4242))  # (next hops, basis)


@pytest.fixture
def bridge(no_leftovers, tmp_path):
    br = f"hpnhash{os.getpid() % 100000}"
    subprocess.run(["ovs-vsctl", "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev"], check=True)
    try:
        yield br
    finally:
        subprocess.run(["ovs-vsctl", "del-br", br], check=True)


def random_tuple(rng: random.Random, dst: str | None = None) -> FiveTuple:
    def ip() -> str:
        return f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"

    return FiveTuple(ip(), dst or ip(), rng.choice((6, 17)), rng.randrange(1, 65536), rng.randrange(1, 65536))


def trace(br: str, t: FiveTuple, extra: str = "") -> str:
    kind = "tcp" if t.proto == 6 else "udp"
    flow = f"in_port=LOCAL,{extra}{kind},nw_src={t.src},nw_dst={t.dst},{kind}_src={t.sport},{kind}_dst={t.dport}"
    return subprocess.run(["ovs-appctl", "ofproto/trace", br, flow], capture_output=True, text=True,
                          check=True).stdout


def test_the_pure_hash_predicts_ovs_multipath_for_1000_random_5_tuples(bridge):
    rules = [f"priority=10,reg1={n},ip,actions=multipath(symmetric_l3l4+udp,{basis},modulo_n,{n},0,"
             f"NXM_NX_REG0[0..15])" for n, basis in SETS]
    subprocess.run(["ovs-ofctl", "add-flows", bridge, "-"], input="\n".join(rules), text=True, check=True)
    rng = random.Random(13)
    wrong = []
    for _ in range(1000):
        n, basis = rng.choice(SETS)
        t = random_tuple(rng)
        m = re.search(r"Final flow:.*?reg0=0x([0-9a-f]+)", trace(bridge, t, f"reg1={n},"))
        got = int(m.group(1), 16) if m else 0  # a register left at 0 is not printed
        if got != bucket(t, n, basis):
            wrong.append((t, n, basis, got))
    assert wrong == [], f"{len(wrong)} of 1000 differ, e.g. {wrong[:3]}"


def test_the_asic_rules_send_each_flow_to_the_port_the_hash_predicts(bridge, tmp_path):
    basis = seed("asic-seeded", "agg-p0-pl0-3")
    table = {"10.1.0.3": (5, 6, 7), "10.2.0.3": (8, 9), "10.3.0.3": (4,)}
    (tmp_path / "b").write_text("\n".join(bundle_lines(RuleSet(basis=basis).update(table))) + "\n")
    subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "bundle", bridge, str(tmp_path / "b")], check=True)
    rng = random.Random(5)
    seen: dict[str, set[int]] = {ip: set() for ip in table}
    for _ in range(300):
        dst = rng.choice(list(table))
        t = random_tuple(rng, dst)
        ports = table[dst]
        want = ports[bucket(t, len(ports), basis)]
        outs = re.findall(r"^\s+output:(\d+)", trace(bridge, t), re.M)
        assert outs == [str(want)], (t, outs, want)
        seen[dst].add(want)
    assert {ip: len(s) for ip, s in seen.items()} == {ip: len(p) for ip, p in table.items()}  # every port used


@pytest.mark.parametrize("routing,hashing,per_switch", [("static", "asic-seeded", 128), ("controller", "asic", 8)])
def test_every_switch_of_a_fabric_hashes_as_predicted(routing, hashing, per_switch, no_leftovers):
    """The installed rules (ovs-ofctl bundles when static, the controller's OpenFlow messages otherwise)
    send each traced 5-tuple out of ports[hash mod n] of the routing table's ECMP set."""
    from controllers.routing import compute_tables
    from testbed.net import Network
    from topos import build
    from topos.addressing import nic_address

    topo = build("hpn")
    tables = compute_tables(topo)
    dst_ips = [nic_address(h, n).ip for h in topo.hosts for n in range(h.nics)]
    rng = random.Random(7)
    checked = 0
    with Network(topo, routing=routing, mode="ecmp", hashing=hashing) as net:
        assert net.hashing == hashing
        for sw in topo.switches:
            sets = {ip: ports for ip, ports in tables.switch[sw.name].items() if len(ports) > 1 and ip in dst_ips}
            if not sets:
                continue
            for _ in range(per_switch):
                dst = rng.choice(sorted(sets))
                t = random_tuple(rng, dst)
                ports = sets[dst]
                want = ports[bucket(t, len(ports), seed(hashing, sw.name))]
                outs = re.findall(r"^\s+output:(\d+)", trace(sw.short, t), re.M)
                assert outs == [str(want)], (sw.name, t, outs, want)
                checked += 1
    assert checked >= 8 * per_switch
