"""Collective benchmark: ring all-reduce busbw as a fraction of the physical bound.

    sudo .venv/bin/python -m bench.collectives_bench [--out results/bench/collectives.json]
    .venv/bin/python -m bench.collectives_bench --from results/bench/collectives.json   (the docs' table only)

Eight hosts, one rail, 2 channels per peer (one per NIC port), TCP transport,
lossless class with PFC, scale 1/25,000 (200G ports at 8 Mbit/s, the default budget). HPN with
precise routing (placed by the controller, and host-side under the asic hash)
vs HPN and DCN+ with ECMP: the paper's comparison in miniature.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.tables import BENCHMARKS, replace_block, stamp, table, write_saved
from testbed.net.network import Network
from testbed.qos.spec import QosSpec
from topos import build
from traffic.collectives import build_schedule
from traffic.replay import Replayer
from traffic.transports.tcp import TcpTransport

SCALE = 25_000  # 8 hosts x 2 ports x 200G = 128 Mbit/s emulated: the default budget (testbed/qos/scale.py)


def run(topo: str, mode: str, op: str, algorithm: str, size: int, iters: int) -> dict:
    t = build(topo)
    host_side = mode == "precise-host"  # the switches run ECMP with the asic hash; the hosts pick the paths
    with Network(t, routing="controller", mode="ecmp" if host_side else mode, hashing="asic" if host_side else "ovs",
                 qos=QosSpec(scale=SCALE)) as net:
        tr = TcpTransport(net, tos=26 << 2)
        tr.start()
        rp = Replayer(net, tr, channels=2, routing=mode)
        sched = build_schedule(op, [(h.name, 0) for h in t.hosts], size, algorithm)
        rp.run(sched)  # warm-up
        results = [rp.run(sched) for _ in range(iters)]
        rp.close()
        tr.stop()
        pfc = (net.stop_qos() or {}).get("by_priority", {})  # pauses in a collision-free schedule are the emulator's
    return {"topology": topo, "routing": mode, "op": op, "algorithm": algorithm, "size_emulated": size,
            "size_real": size * SCALE, "ideal_busbw_bps": results[0].ideal_busbw_bps,
            "busbw_bps": [round(r.busbw_bps) for r in results],
            "fraction_of_ideal": [round(r.fraction_of_ideal, 4) for r in results],
            "bytes_ok": all(r.bytes_delivered == r.bytes_expected for r in results),
            "xoff_events": sum(p["xoff_events"] for p in pfc.values()),
            "lossless_drops": sum(p["drops"] for p in pfc.values())}


FABRIC = {"hpn": "HPN", "dcn_plus": "DCN+"}
ROUTING = {"precise": "precise", "precise-host": "precise, host-side", "ecmp": "ECMP"}


def readme_table(out: dict) -> str:
    rows = [[f"{FABRIC.get(r['topology'], r['topology'])}, {ROUTING.get(r['routing'], r['routing'])}",
             f"{r['algorithm'].replace('_', '-')} {r['op']}", ", ".join(f"{f:.1%}" for f in r["fraction_of_ideal"]),
             "yes" if r["bytes_ok"] else "NO", f"{r.get('xoff_events', '-')} / {r.get('lossless_drops', '-')}"]
            for r in out["runs"]]
    return (f"Measured {out['when']} (scale 1/{out['scale']:,}):\n\n"
            + table(["fabric, routing", "op", "busbw / ideal", "bytes delivered = closed form",
                     "XOFF crossings / lossless drops (warm-up included)"], rows))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results/bench/collectives.json")
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--from", dest="saved", type=Path, help="Write the docs' table from this saved run; run nothing.")
    a = ap.parse_args()
    if a.saved:
        write_saved(a.saved, "collectives", readme_table)
        return
    cases = [("hpn", "precise", "allreduce", "ring", 8_000_000),
             ("hpn", "precise-host", "allreduce", "ring", 8_000_000),
             ("hpn", "ecmp", "allreduce", "ring", 8_000_000),
             ("dcn_plus", "ecmp", "allreduce", "ring", 8_000_000),
             ("hpn", "precise", "allreduce", "halving_doubling", 8_000_000),
             ("hpn", "precise", "alltoall", "pairwise", 8_000_000)]
    out = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "stamp": stamp(), "scale": SCALE,
           "runs": [run(*c, iters=a.iters) for c in cases]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    for r in out["runs"]:
        print(f"{r['topology']:9} {r['routing']:12} {r['op']:10} {r['algorithm']:17} "
              f"busbw/ideal {r['fraction_of_ideal']}  bytes ok {r['bytes_ok']}")
    replace_block(BENCHMARKS, "collectives", readme_table(out), out["stamp"])


if __name__ == "__main__":
    main()
