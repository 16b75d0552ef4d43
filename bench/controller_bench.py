"""Controller benchmark: start-up, precise vs ECMP link use, failover gaps.

    sudo .venv/bin/python -m bench.controller_bench [--out results/bench/controller.json] [--quick]
    .venv/bin/python -m bench.controller_bench --from results/bench/controller.json   (the docs' table only)

Everything is measured on real Mininet + OVS with the controller in its own
process: link use from OVS port counters, gaps from a paced UDP probe stream
(1000 packets/s, so a gap is resolved to ~1 ms plus this machine's scheduling
jitter, which the "baseline" line reports).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.tables import BENCHMARKS, replace_block, stamp, table, write_saved
from testbed.experiment.measure import StreamSpec, gap_after, host_links_used, port_delta, run_streams, uplinks_used
from testbed.net.network import Network
from topos import build


def startup(reps: int) -> dict:
    ready, total = [], []
    for _ in range(reps):
        with Network(build("hpn"), routing="controller", mode="ecmp") as net:
            ready.append(net.controller.health()["ready_after_s"])
            total.append(net.timings["start_s"])
    return {"topology": "hpn mini (16 switches, 8 hosts, 64 links)", "controller_start_to_all_routed_s": ready,
            "network_start_s": total}


def flows_for(n: int, base_sport: int) -> list[StreamSpec]:
    """n flows from segment-0 hosts to segment-1 hosts on rail 0 (round-robin over the 4 source hosts)."""
    return [StreamSpec(src=f"h{i % 4}", dst=f"h{4 + i % 4}", sport=base_sport + i, dport=7000 + i, pps=400,
                       duration=1.5, size=1000, stream=i) for i in range(n)]


def link_use(mode: str, n: int, trials: int) -> dict:
    used_counts = []
    with Network(build("hpn"), routing="controller", mode=mode) as net:
        for t in range(trials):
            specs = flows_for(n, 20000 + 100 * t)
            if mode == "precise":
                net.controller.withdraw()
                for v in net.controller.declare([{"src": s.src, "dst": s.dst_ip(net), "proto": "udp",
                                                  "sport": s.sport, "dport": s.dport} for s in specs]):
                    net.steer(v)
            before = net.port_counters()
            run_streams(net, specs, tail=0.3)
            used = uplinks_used(net, port_delta(before, net.port_counters()), min_bytes=200_000)
            used_counts.append(len(used))
    m = 8  # rail-0 uplinks of segment 0: 2 planes x 4 aggregation switches
    return {"mode": mode, "flows": n, "uplinks_available": m, "distinct_uplinks": used_counts,
            "mean": statistics.mean(used_counts), "hashing_predicts": round(m * (1 - (1 - 1 / m) ** n), 3)}


def failover(kind: str) -> dict:
    topo = build("rail_optimized") if kind == "host-tor single-ToR" else build("hpn")
    spec = StreamSpec(src="h0", dst="h4", sport=5555, dport=7777, pps=1000, duration=4.0, size=200)
    with Network(topo, routing="controller", mode="ecmp") as net:
        # Find the links this 5-tuple hashes onto with a short identical stream first.
        before = net.port_counters()
        run_streams(net, [StreamSpec(**{**spec.__dict__, "duration": 1.0})], tail=0.3)
        after = net.port_counters()
        if kind == "tor-agg":
            victim = sorted(uplinks_used(net, port_delta(before, after), 50_000))[0]
        else:
            victim = sorted(host_links_used(net, port_delta(before, after, "rx_bytes"), "h0", 50_000))[0]
        actions = [(1.5, lambda: net.set_link(victim, up=False))]
        if kind == "host-tor single-ToR":
            actions.append((3.0, lambda: net.set_link(victim, up=True)))
        r = run_streams(net, [spec], actions)
        rep = r["receivers"]["h4:7777"]
        s = rep["streams"]["0"]
        events = net.controller.get("/events")
    return {"failure": kind, "link": victim, "gap_ms": gap_after(rep, r["actions_at"][0]),
            "lost_packets": s["lost"] + (4000 - s["highest_seq"] - 1), "received": s["received"], "sent": 4000,
            "controller_recompute_ms": [e["recompute_ms"] for e in events]}


def baseline_jitter() -> dict:
    with Network(build("hpn"), routing="controller", mode="ecmp") as net:
        rep = run_streams(net, [StreamSpec(src="h0", dst="h4", pps=1000, duration=3.0)])["receivers"]["h4:7000"]
    return {"no failure: max gap ms (scheduling jitter)": rep["max_gap_ms"], "lost": rep["streams"]["0"]["lost"]}


def _runs(xs: list, fmt: str = "{}") -> str:
    return " / ".join(fmt.format(x) for x in xs)


def readme_table(out: dict) -> str:
    """The docs' table from a run's record: every figure from the record, nothing typed."""
    st, base = out["startup"], out["baseline"]
    rows = [["controller process start → all switches connected, routed and barrier-confirmed",
             _runs(st["controller_start_to_all_routed_s"], "{:.2f}") + " s"],
            ["whole network start (Mininet + OVS + controller + host config)",
             _runs(st["network_start_s"], "{:.1f}") + " s"]]
    for n in sorted({u["flows"] for u in out["link_use"]}):
        by = {u["mode"]: u for u in out["link_use"] if u["flows"] == n}
        e, p = by["ecmp"], by["precise"]
        rows.append([f"{n} flows seg 0 → seg 1, rail 0 ({e['uplinks_available']} uplinks: 2 planes x 4 aggs), "
                     "distinct uplinks used",
                     f"ECMP {_runs(e['distinct_uplinks'])} (hashing predicts m(1-(1-1/m)^n) = "
                     f"{e['hashing_predicts']:g}); precise {_runs(p['distinct_uplinks'])}"])
    rows.append(["probe stream 1000 pkt/s, no failure: longest silence (this machine's scheduling jitter)",
                 f"{base['no failure: max gap ms (scheduling jitter)']:.1f} ms, {base['lost']} lost"])
    said = {"tor-agg": "ToR-aggregation link of the stream's path fails",
            "host-tor dual-ToR": "host port (dual-ToR HPN) carrying the stream fails",
            "host-tor single-ToR": "host port on single-ToR rail-optimized fails, repaired 1.5 s later"}
    for f in out["failover"]:
        rows.append([said[f["failure"]], f"{f['lost_packets']:,} of {f['sent']:,} lost, longest silence "
                     f"{f['gap_ms']:.0f} ms"])
    recompute = [ms for f in out["failover"] for ms in f["controller_recompute_ms"]]
    if recompute:
        rows.append(["controller recomputation per link event", f"{min(recompute):.1f}-{max(recompute):.1f} ms"])
    return (f"Measured {out['when']} ({len(st['network_start_s'])} runs each):\n\n"
            + table(["what", "result"], rows))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results/bench/controller.json")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--from", dest="saved", type=Path, help="Write the docs' table from this saved run; run nothing.")
    a = ap.parse_args()
    if a.saved:
        write_saved(a.saved, "controller", readme_table)
        return
    reps = 1 if a.quick else 3
    out = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "stamp": stamp(), "startup": startup(reps),
           "baseline": baseline_jitter(),
           "link_use": [link_use(mode, n, reps) for n in (4, 8) for mode in ("ecmp", "precise")],
           "failover": [failover(k) for k in ("tor-agg", "host-tor dual-ToR", "host-tor single-ToR")]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    replace_block(BENCHMARKS, "controller", readme_table(out), out["stamp"])


if __name__ == "__main__":
    main()
