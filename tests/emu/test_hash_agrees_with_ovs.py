"""controllers/hashing.py predicts what Open vSwitch's `multipath` action chooses, bit for bit.

A bridge of this test's own (userspace datapath, no ports) gets one rule per next-hop count;
`ofproto/trace` reports the register the action wrote for each random 5-tuple, with no packet sent.
"""

from __future__ import annotations

import os
import random
import re
import subprocess

from controllers.hashing import FiveTuple, bucket

N_TUPLES = 1000


def test_the_pure_hash_predicts_ovs_multipath_for_random_5_tuples(no_leftovers):
    br = f"hpnhash{os.getpid() % 100000}"
    subprocess.run(["ovs-vsctl", "add-br", br, "--", "set", "bridge", br, "datapath_type=netdev"], check=True)
    try:
        rules = [f"priority=10,reg1={n},ip,actions=multipath(symmetric_l3l4+udp,{basis},modulo_n,{n},0,"
                 f"NXM_NX_REG0[0..15])" for n, basis in ((2, 0), (3, 777), (8, 0), (60, 4242))]
        subprocess.run(["ovs-ofctl", "add-flows", br, "-"], input="\n".join(rules), text=True, check=True)
        rng = random.Random(13)
        wrong = []
        for _ in range(N_TUPLES):
            n, basis = rng.choice(((2, 0), (3, 777), (8, 0), (60, 4242)))
            proto = rng.choice((6, 17))
            t = FiveTuple(f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
                          f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}", proto,
                          rng.randrange(1, 65536), rng.randrange(1, 65536))
            kind = "tcp" if proto == 6 else "udp"
            flow = (f"in_port=LOCAL,reg1={n},{kind},nw_src={t.src},nw_dst={t.dst},{kind}_src={t.sport},"
                    f"{kind}_dst={t.dport}")
            out = subprocess.run(["ovs-appctl", "ofproto/trace", br, flow], capture_output=True, text=True,
                                 check=True).stdout
            m = re.search(r"Final flow:.*?reg0=0x([0-9a-f]+)", out)
            got = int(m.group(1), 16) if m else 0  # a register that stays 0 is not printed
            if got != bucket(t, n, basis):
                wrong.append((t, n, basis, got))
        assert wrong == [], f"{len(wrong)} of {N_TUPLES} differ, e.g. {wrong[:3]}"
    finally:
        subprocess.run(["ovs-vsctl", "del-br", br], check=True)
