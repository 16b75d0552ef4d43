"""DCTCP in the emulation against DCTCP in ns-3: the same incast (4:1 and 16:1) at the same link rate, delay,
marking threshold K and buffer, in the testbed and in mainline ns-3 (bench/ns3_dctcp.py, .venv-ns3).

    sudo make ns3-venv && sudo .venv/bin/python -m bench.dctcp_bench [--senders 4 16] [--seconds 10]
    .venv/bin/python -m bench.dctcp_bench --from results/bench/dctcp.json   (the docs' table only)

The emulation: a spine-leaf with one leaf, N senders and a receiver under it, `qos.cc: dctcp` (the switches
mark at K = Kmin of the receiver's port, DCTCP's step), iperf3 flows in the lossless class for `seconds`; the
receiver's leaf port is the bottleneck, its queue read by the PFC agent's samples. Its figures (the port's
emulated rate, K, the queue's limit, the hosts' round trip measured by ping) set ns-3's star. Compared: the
bottleneck queue (median, 99th percentile) and the goodput against the port's rate.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

from bench.tables import args_or_saved, stamp, table, write_new
from testbed.system.signals import exit_cleanly_on_signals

ROOT = Path(__file__).resolve().parents[1]
NS3_PYTHON = ROOT / ".venv-ns3" / "bin" / "python"
DSCP26 = 26 << 2
SAMPLE_S = 0.05  # the PFC agent's sampling period, and ns-3's
AGREE = 0.25  # the goal: median queue and goodput within 25%


def _rtt_s(net, src: str, dst_ip: str) -> float:
    out = net.popen(src, ["ping", "-c", "20", "-i", "0.05", "-q", dst_ip], stdout=subprocess.PIPE,
                    text=True).communicate(timeout=60)[0]
    return float(re.search(r"= [\d.]+/([\d.]+)/", out).group(1)) / 1000  # rtt min/avg/max/mdev: the average


def emulated(senders: int, seconds: float) -> dict:
    from testbed.experiment.measure import iperf
    from testbed.net.network import Network
    from testbed.qos.cc import socket_cc
    from testbed.qos.spec import QosSpec
    from topos import build
    from topos.addressing import nic_address

    topo = build("spine_leaf", leaves=1, hosts_per_leaf=senders + 1, spines=1)
    receiver = topo.hosts[-1].name
    with Network(topo, qos=QosSpec(cc="dctcp")) as net:
        port = next(p for p in net.qos.ports.values() if p.peer == receiver and not p.is_host)
        plan = port.plan.lossless[3]
        rtt = _rtt_s(net, topo.hosts[0].name, nic_address(topo.hosts[-1], 0).ip)
        flows = iperf(net, [(h.name, receiver) for h in topo.hosts[:-1]], duration=seconds, tos=DSCP26,
                      cc=socket_cc("dctcp"))
        marks = sum((net.ecn_marks() or {}).values())
        report = net.stop_qos()
    return {"rate_bps": port.plan.rate_bps, "k_bytes": plan.kmin, "buffer_bytes": plan.limit, "rtt_s": rtt,
            "goodput_bps": sum(f["bytes"] for f in flows) * 8 / seconds, "marked": marks,
            "backlog": [s["backlog"].get(f"{port.key}/p3", 0) for s in report["samples"]],
            "pauses": sum(t["pause_events"] for t in report["pauses_by_tier"].values())}


def simulated(emu: dict, senders: int, seconds: float) -> dict:
    """The same incast in ns-3: one-way delay a quarter of the emulation's round trip (two links each way)."""
    cfg = {"senders": senders, "rate_bps": emu["rate_bps"], "delay_s": emu["rtt_s"] / 4, "k_bytes": emu["k_bytes"],
           "buffer_bytes": emu["buffer_bytes"], "seconds": seconds, "sample_s": SAMPLE_S}
    r = subprocess.run([str(NS3_PYTHON), str(ROOT / "bench" / "ns3_dctcp.py"), json.dumps(cfg)],
                       capture_output=True, text=True, timeout=1800)
    if r.returncode:
        raise SystemExit(f"ns-3 failed: {r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return {**out, "goodput_bps": out["received_bytes"] * 8 / seconds}


def _queued(xs: list[int]) -> list[int]:
    """A run's samples from its first queued byte on: the emulation's agent samples from before iperf3 started,
    ns-3's from the flows' start time; both are read from the first frame that queued."""
    first = next((i for i, b in enumerate(xs) if b), len(xs))
    return xs[first:]


def _percentile(xs: list[int], f: float) -> float:
    xs = sorted(_queued(xs))
    return xs[min(len(xs) - 1, int(f * len(xs)))] if xs else 0.0


def _row(r: dict) -> list[str]:
    e, s = r["emulated"], r["ns3"]
    cells, agree = [], True
    for what in ("median", "p99", "goodput"):
        a, b = ((e["goodput_bps"] / e["rate_bps"], s["goodput_bps"] / e["rate_bps"]) if what == "goodput" else
                (_percentile(e["backlog"], 0.5 if what == "median" else 0.99) / 1e3,
                 _percentile(s["backlog"], 0.5 if what == "median" else 0.99) / 1e3))
        fmt = "{:.1%}" if what == "goodput" else "{:.1f}"
        cells.append(f"{fmt.format(a)} / {fmt.format(b)}")
        if what != "p99":
            agree &= abs(a - b) <= AGREE * max(b, 1e-9)
    return [f"{r['senders']}:1", f"{e['rate_bps'] / 1e6:g} Mbit/s, RTT {e['rtt_s'] * 1e3:.2f} ms, "
            f"K {e['k_bytes'] / 1e3:.1f} KB", *cells, f"{e['marked']:,} / {s['marked']:,}",
            "yes" if agree else "no"]


def render(saved: dict) -> str:
    return "\n".join([
        f"Generated by `python -m bench.dctcp_bench` ({saved['seconds']:g} s per incast; queue sampled every "
        f"{SAMPLE_S * 1e3:g} ms from the first queued byte on). Each cell: emulated / ns-3. Agree: median queue "
        f"and goodput within {AGREE:.0%}. Emulation's PFC pauses: "
        + ", ".join(f"{r['senders']}:1 {r['emulated']['pauses']:,}" for r in saved["rows"]) + ".", "",
        table(["incast", "link, round trip, K", "queue median (KB)", "queue p99 (KB)", "goodput of the port",
               "CE marks", "agree"], [_row(r) for r in saved["rows"]])])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--senders", type=int, nargs="+", default=[4, 16])
    ap.add_argument("--seconds", type=float, default=10.0)
    a = args_or_saved(ap, "dctcp", render, "results/bench/dctcp.json")
    if a is None:
        return
    if not NS3_PYTHON.exists():
        raise SystemExit("no .venv-ns3: run 'sudo make ns3-venv' first (mainline ns-3 from PyPI)")
    measured, rows = stamp(), []
    exit_cleanly_on_signals()  # SIGTERM unwinds through each network's stop(), as Ctrl-C does
    for n in a.senders:
        emu = emulated(n, a.seconds)
        rows.append({"senders": n, "emulated": emu, "ns3": simulated(emu, n, a.seconds)})
        print(json.dumps(rows[-1])[:600], flush=True)
    write_new(a.out, "dctcp", {"stamp": measured, "seconds": a.seconds, "rows": rows}, render)


if __name__ == "__main__":
    main()
