"""QoS and PFC benchmark: rate fidelity, 7-to-1 incast with and without PFC, pause propagation, a 31-to-1 UDP
incast on 128 hosts under each PFC model and without PFC, and the PFC agent's reaction under an all-reduce at 8
and 64 hosts.

    sudo .venv/bin/python -m bench.pfc_bench [--out results/bench/pfc.json] [--seconds 10]
    .venv/bin/python -m bench.pfc_bench --from results/bench/pfc.json   (the docs' table only)

Default HPN, 200G host ports at 20 Mbit/s (scale 1/10,000). TCP (iperf3)
marked DSCP 26 rides the lossless class. Drops are read from every lossless
queue (switch ports and host NICs); the agent reports pauses per tier, queue
maxima, its achieved poll period and CPU share.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.tables import BENCHMARKS, replace_block, stamp, table, write_saved
from testbed.experiment.calibration import measure_reaction
from testbed.experiment.measure import StreamSpec, iperf, receiver_bottleneck, run_streams, shaped_rate, udp_incast
from testbed.net.network import Network
from testbed.qos.calibrated import probe_params
from testbed.qos.scale import choose_scale, offered_load
from testbed.qos.shaper import lossless_leaf
from testbed.qos.spec import QosSpec
from topos import build

DSCP26 = 26 << 2


def rate_fidelity(reps: int) -> dict:
    out = []
    with Network(build("hpn"), qos=QosSpec(pfc={"enabled": False})) as net:
        rate = net.qos.ports["h0:0"].plan.rate_bps
        for _ in range(reps):
            s: dict = {}
            flows = iperf(net, [("h0", "h4")], duration=7, during=lambda s=s: shaped_rate(net, ("h0:0", "h0:1"), 4, s))
            out.append({"wire_fraction": round(s["bps"] / rate, 4),
                        "goodput_fraction": round(flows[0]["bytes"] * 8 / flows[0]["seconds"] / rate, 4)})
    return {"configured_bps": rate, "runs": out}


def traffic(pairs, pfc: bool, seconds: float) -> dict:
    with Network(build("hpn"), qos=QosSpec(pfc={"enabled": pfc})) as net:
        before = net.qos.stats(lossless_leaf(3))
        flows = iperf(net, pairs, duration=seconds, tos=DSCP26)
        lossless = net.qos.stats(lossless_leaf(3))
        bottleneck = receiver_bottleneck(net, pairs[0][1], before, lossless)
        plans = {k: p.plan for k, p in net.qos.ports.items()}
        report = net.stop_qos() or {}
    drops = {k: q[0].drops for k, q in lossless.items() if q and q[0].drops}
    worst = max(((k.split("/")[0], q["max_backlog"]) for k, q in report.get("queues", {}).items()  # switch queues:
                 if not q["host"]), key=lambda kv: kv[1], default=(None, 0))  # a paused host holds its data
    goodput = sum(f["bytes"] for f in flows) * 8 / seconds
    return {
        "pfc": pfc,
        "goodput_bps": goodput,
        "bottleneck_bps": bottleneck,
        "goodput_fraction": round(goodput / bottleneck, 4),
        "tcp_retransmits": sum(f["retransmits"] for f in flows),
        "lossless_drops_total": sum(drops.values()),
        "lossless_drops_at_hosts": sum(v for k, v in drops.items() if k.startswith("h")),
        "deepest_queue": {"port": worst[0], "bytes": worst[1],
                          "xoff_plus_headroom": plans[worst[0]].lossless[3].xoff + plans[worst[0]].lossless[3].headroom
                          if worst[0] else None},
        "agent": {k: report[k] for k in ("poll_period_ms", "agent_cpu_share", "pauses_by_tier", "polls", "detect",
                                         "reaction_ms") if k in report},
    }


def propagation(seconds: float, detect: str = "auto") -> dict:
    """UDP (like RoCE: no congestion control) from 4 hosts of segment 0 to one host of segment 1.

    80% more than the receiver's two ports take: only pauses reaching the senders' NICs keep it lossless.
    `detect`: how the agent sees crossings (kernel events, or its poll).
    """
    pps, size = 1300, 1400  # ~14.6 Mbit/s per sender, 58 offered into 40
    specs = [StreamSpec(src=f"h{i}", dst="h4", sport=6000 + i, dport=7000, pps=pps, duration=seconds, size=size,
                        stream=i, tos=DSCP26) for i in range(4)]
    with Network(build("hpn"), qos=QosSpec(pfc={"detect": detect})) as net:
        r = run_streams(net, specs, tail=2 * seconds)  # the receiver stays until the paused backlog drained
        lossless = net.qos.stats(lossless_leaf(3))
        report = net.stop_qos()
    rep = r["receivers"]["h4:7000"]
    sent = sum(s["sent"] for s in r["senders"])
    received = sum(s["received"] for s in rep["streams"].values())
    return {"sent_packets": sent, "received_packets": received,
            "lossless_drops_total": sum(q[0].drops for q in lossless.values() if q),
            "pauses_by_tier": report["pauses_by_tier"],
            "sender_nics_paused": {k: v for k, v in report["ports"].items() if k.split(":")[0] in
                                   {s.src for s in specs}},
            "poll_period_ms": report["poll_period_ms"], "agent_cpu_share": report["agent_cpu_share"],
            "detect": report["detect"], "reaction_ms": report["reaction_ms"]}


def incast_large(hosts: int) -> dict:
    """31 hosts to one in UDP (tests/emu/test_pfc_incast_large.py's incast) at the scale auto takes for it: each
    PFC model on a fresh fabric, then the last fabric again without PFC."""
    topo = build("hpn", **probe_params(hosts))
    senders = [f"h{i}" for i in range(1, 32)]
    scale = choose_scale(offered_load(topo, [(h, 0) for h in ["h0", *senders]]), hosts=hosts).scale
    out: dict = {"hosts": hosts, "scale": scale}
    for model in ("egress", "ingress"):
        with Network(topo, qos=QosSpec(scale=scale, pfc={"model": model})) as net:
            r = udp_incast(net, "h0", senders, 1.0, DSCP26)
            rep = net.stop_qos()
            out[model] = vars(r) | {k: rep[k] for k in ("agent_cpu_share", "reaction_ms", "pauses_by_tier",
                                                         "resynced", "kernel_lost_events")}
            if model == "ingress":
                net.start_qos(QosSpec(scale=scale, pfc={"enabled": False}))
                out["pfc_off"] = vars(udp_incast(net, "h0", senders, 1.0, DSCP26))
    return out


def _large_rows(big: dict) -> list[list[str]]:
    rows = []
    for model in ("egress", "ingress"):
        r = big[model]
        paused = ", ".join(f"{t['ports_paused']} {k}" for k, t in sorted(r["pauses_by_tier"].items())
                           if t["pause_events"])
        rows.append([f"31-to-1 UDP incast, {big['hosts']} hosts, scale 1/{big['scale']:,.0f}, PFC model {model}",
                     f"{r['received']:,} of {r['sent']:,} frames delivered, {r['lossless_drops']:,} lossless drops; "
                     f"ports paused: {paused}; reaction p50 {r['reaction_ms']['median']:.2f} ms, p99 "
                     f"{r['reaction_ms']['p99']:.2f} ms, max {r['reaction_ms']['max']:.1f} ms; agent "
                     f"{r['agent_cpu_share']:.1%} of one core"])
    off = big["pfc_off"]
    rows.append(["same, PFC off", f"{off['received']:,} of {off['sent']:,} delivered, "
                                  f"{off['lossless_drops']:,} lossless drops"])
    return rows


def _tiers(tiers: dict) -> str:
    names = {"agg": "aggregation ports", "tor": "ToR ports", "host": "host NICs"}
    return ", ".join(f"{names.get(k, k)} {v['pause_events']:,}" for k, v in sorted(tiers.items())
                     if v["pause_events"]) or "none"


def _poll(p: dict) -> str:
    return f"median {p['median']:.1f} ms, p99 {p['p99']:.1f} ms, max {p['max']:.1f} ms (configured {p['configured']:g})"


def _agent(a: dict) -> str:
    """How fast the agent acted: from the crossing in the kernel with kernel events, its poll period when polling."""
    if a.get("detect") == "kernel":
        r = a["reaction_ms"]
        return f"kernel events: reaction median {r['median']:.2f} ms, p99 {r['p99']:.2f} ms, max {r['max']:.2f} ms"
    return f"poll: period {_poll(a['poll_period_ms'])}"


def readme_table(out: dict) -> str:
    """The docs' table from a run's record: every figure from the record, nothing typed."""
    rate, on, off = out["rate_fidelity"], out["incast_7_to_1"]["pfc_on"], out["incast_7_to_1"]["pfc_off"]
    udp = out["propagation_udp_4_remote_to_1"]
    deep = on["deepest_queue"]
    paused = udp["sender_nics_paused"].values()
    rows = [
        ["single TCP flow over a shaped 3-switch path: wire rate at the bottleneck / configured",
         ", ".join(f"{r['wire_fraction']:.4f}" for r in rate["runs"]) + " (goodput "
         + ", ".join(f"{r['goodput_fraction']:.3f}" for r in rate["runs"]) + ": TCP/IP headers)"],
        ["7-to-1 TCP incast, PFC on",
         f"{on['goodput_fraction']:.1%} of h7's two ports; {on['lossless_drops_total']:,} lossless drops, "
         f"{on['tcp_retransmits']:,} TCP retransmissions; deepest switch queue {deep['bytes'] / 1000:.0f} KB "
         f"(XOFF + headroom {(deep['xoff_plus_headroom'] or 0) / 1000:.0f} KB); pauses: "
         + _tiers(on["agent"].get("pauses_by_tier", {}))],
        ["same, PFC off", f"{off['goodput_fraction']:.1%}; {off['lossless_drops_total']:,} drops in lossless queues, "
                          f"{off['tcp_retransmits']:,} TCP retransmissions"],
        ["4 UDP senders (no congestion control, like RoCE) in segment 0 → one host in segment 1 at 1.45x its ports",
         f"{udp['received_packets']:,} of {udp['sent_packets']:,} packets delivered, {udp['lossless_drops_total']:,} "
         f"drops; pauses per hop: {_tiers(udp['pauses_by_tier'])}; sender NIC ports paused {len(paused)}, "
         f"{sum(p['paused_s'] for p in paused):.1f} s in all"],
        ["PFC agent (incast with PFC; UDP)", f"{_agent(on['agent'])}; {_agent(udp)}; "
                                             f"{on['agent']['agent_cpu_share']:.0%} and {udp['agent_cpu_share']:.0%} "
                                             "of one core"],
    ]
    if out.get("incast_large"):
        rows += _large_rows(out["incast_large"])
    polled = out.get("propagation_udp_polled")
    if polled:  # the same UDP incast with the agent polling, as on a machine without BPF
        rows.append(["same UDP incast, the agent polling (no BPF)",
                     f"{polled['received_packets']:,} of {polled['sent_packets']:,} delivered, "
                     f"{polled['lossless_drops_total']:,} drops; {_agent(polled)}; "
                     f"{polled['agent_cpu_share']:.0%} of one core"])
    for r in out.get("reaction_under_load", []):
        load = "the budget" if r["dilation"] == 1 else f"D = {r['dilation']:g}: 1/{r['dilation']:g} of the budget"
        rows.append([f"{r['hosts']} hosts, scale 1/{r['scale']:,.0f} ({load}): a ring all-reduce on every NIC 0 "
                     "beside a TCP incast on every NIC 1 (`hpnlab calibrate`'s reaction probe)", _reaction(r)])
    return f"Measured {out['when']}:\n\n" + table(["what", "result"], rows)


def _reaction(r: dict) -> str:
    return (f"reaction p50 {r['median_s'] * 1000:.2f} ms, p99 {r['p99_s'] * 1000:.2f} ms, max "
            f"{r['max_s'] * 1000:.2f} ms over {r['pauses']:,} pauses; headroom covered {r['window_ms']:.1f} ms of "
            f"ingress; switch queues at most {r['past_xoff_max_bytes'] / 1000:.0f} KB past XOFF (of "
            f"{r['headroom_min_bytes'] / 1000:.0f} KB headroom at the least); {r['lossless_drops']} lossless drops; "
            f"verdict {r['fidelity']}" + (f" ({'; '.join(x[:90] for x in r['reasons'])})" if r.get("reasons") else ""))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="results/bench/pfc.json")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--reaction-hosts", type=int, nargs="*", default=[8, 64],
                    help="HPN sizes to time the agent's reaction on under an all-reduce and an incast")
    ap.add_argument("--large-hosts", type=int, default=128, help="HPN size of the 31-to-1 UDP incast")
    ap.add_argument("--from", dest="saved", type=Path, help="Write the docs' table from this saved run; run nothing.")
    a = ap.parse_args()
    if a.saved:
        write_saved(a.saved, "pfc", readme_table)
        return
    incast = [(f"h{i}", "h7") for i in range(7)]
    out = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "stamp": stamp(),
        "rate_fidelity": rate_fidelity(a.reps),
        "incast_7_to_1": {"pfc_on": traffic(incast, True, a.seconds),
                          "pfc_off": traffic(incast, False, a.seconds)},
        "propagation_udp_4_remote_to_1": propagation(a.seconds / 2),
        "propagation_udp_polled": propagation(a.seconds / 2, detect="poll"),
        "incast_large": incast_large(a.large_hosts),
        # a fabric bigger than the budget's probe runs short of CPU at the budget: also 8x dilated (1/8 of it)
        "reaction_under_load": [measure_reaction(h) for h in a.reaction_hosts]
                               + [measure_reaction(h, dilation=8) for h in a.reaction_hosts if h > 8],
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    replace_block(BENCHMARKS, "pfc", readme_table(out), out["stamp"])


if __name__ == "__main__":
    main()
