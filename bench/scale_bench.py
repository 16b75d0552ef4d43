"""Scale benchmark: HPN at 8 to 128 hosts, hpnlab beside Mininet's own API with TCLink on the same graph.

    sudo .venv/bin/python -m bench.scale_bench [--hosts 8 16 32 64 128] [--out results/bench/scale.json]
        [--repeat N] [--dilation [D ...]] [--floor] [--allreduce-only] [--from results/bench/scale.json]

Per size: start (built, routed, shaped) and teardown time, all-pairs ping time
and loss, memory per host (MemAvailable before and after start), a ring
all-reduce on rail 0 at the default settings (time dilation and scale auto: busbw as a fraction of ideal,
exact bytes, fidelity verdict and the CPU idle minimum, what the PFC agent cost and how fast it acted;
`--repeat N` runs it N times, each on a fresh network), and the peer
baseline: the same hosts, switches and links at the same rates started and
stopped with Mininet's API and TCLink. With `--dilation D ...` (default 1; none: `--dilation` alone), the
all-reduce again at each given D: D = 1 undilated at scale auto, D > 1 at the scale D = 1 takes (the same
bytes at 1/D of the per-port wall-clock load), timed in the fabric's time. With `--floor`, the emulator's
per-op floor is measured on each size first (`hpnlab calibrate --only floor --hosts N`, cached where
HPNLAB_CACHE says), so that the verdict weighs each size's ops by its own floor, not the 8-host one.
A run over the default sizes writes the docs' scale table (between its markers); `--from FILE` writes it
from a saved run without running anything.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from bench.tables import BENCHMARKS, replace_block, stamp, table, write_saved
from testbed.experiment.calibration import calibrate
from testbed.experiment.jobs import resolve_auto
from testbed.experiment.runner import run_one
from testbed.experiment.spec import from_dict
from testbed.net.network import Network
from testbed.qos.calibrated import probe_params
from testbed.qos.scale import choose_scale, offered_load
from testbed.qos.spec import QosSpec
from testbed.schema.results import Verdict
from testbed.system.signals import exit_cleanly_on_signals
from topos import build
from topos.addressing import dpid_hex


def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def hpnlab_lifecycle(hosts: int) -> dict:
    topo = build("hpn", **probe_params(hosts))
    scale = choose_scale(offered_load(topo), hosts=hosts).scale
    m0, t0 = mem_available(), time.monotonic()
    with Network(topo, routing="static", qos=QosSpec(scale=scale)) as net:  # a start that fails is undone too
        up = time.monotonic() - t0
        mem = (m0 - mem_available()) / hosts
        t1 = time.monotonic()
        ping = net.pingall()
        ping_s = time.monotonic() - t1
        t2 = time.monotonic()
    return {"switches": len(topo.switches), "links": len(topo.links), "up_s": round(up, 2),
            "down_s": round(time.monotonic() - t2, 2), "pingall_s": round(ping_s, 2),
            "ping_sent": ping.sent, "ping_received": ping.received, "mem_per_host_mb": round(mem / 2**20, 1),
            "timings": {k: round(v, 2) for k, v in net.timings.items()}}


def mininet_lifecycle(hosts: int) -> dict:
    """The same graph with Mininet's API and TCLink (bw in Mbit/s at the same scale), userspace OVS."""
    from mininet.link import TCLink
    from mininet.log import setLogLevel
    from mininet.net import Mininet
    from mininet.node import OVSSwitch

    from testbed.system.capabilities import probe

    setLogLevel("warning")
    topo = build("hpn", **probe_params(hosts))
    scale = choose_scale(offered_load(topo), hosts=hosts).scale
    t0 = time.monotonic()
    net = Mininet(topo=None, build=False, controller=None, link=TCLink, autoSetMacs=True, waitConnected=False)
    try:  # addHost and addLink already make namespaces and veths: a stop (Ctrl-C, SIGTERM) among them undoes them
        for h in topo.hosts:
            net.addHost(f"m{h.short}")
        for s in topo.switches:
            net.addSwitch(f"m{s.short}", cls=OVSSwitch, dpid=dpid_hex(s), datapath=probe().datapath,
                          failMode="secure", batch=True)  # no rules: nothing floods the looped fabric
        for l in topo.links:
            net.addLink(f"m{topo.nodes[l.a].short}", f"m{topo.nodes[l.b].short}", port1=l.a_port,
                        port2=l.b_port, bw=l.rate_gbps * 1e3 / scale)
        net.build()
        net.start()
        up = time.monotonic() - t0
    finally:
        t1 = time.monotonic()
        net.stop()
    return {"up_s": round(up, 2), "down_s": round(time.monotonic() - t1, 2)}


def _experiment(hosts: int, iters: int, dilation: float | None, scale: float | str):
    return from_dict({"name": f"scale-{hosts}", "topology": {"name": "hpn", "params": probe_params(hosts)},
                      "routing": "precise", "qos": {"scale": scale},
                      **({} if dilation is None else {"time": {"dilation": dilation}}), "step_timeout_s": 300,
                      "workload": {"collective": {"op": "allreduce", "size": "160GB", "ranks": "rail0",
                                                  "iters": iters}}})


def allreduce(hosts: int, iters: int, dilation: float | None = None, scale: float | str = "auto") -> dict:
    """The ring all-reduce through the runner, at the default settings (dilation and scale auto) unless a
    dilation is given. With time dilated D, a fixed scale puts 1/D of the per-port wall-clock load on the
    machine (scale auto would fill the budget again with D times the bytes)."""
    exp = _experiment(hosts, iters, dilation, scale)
    t0 = time.monotonic()
    rec = run_one(f"{hosts}", exp, Path.cwd(), None, 0)
    return {"settings": "default" if dilation is None else "given", "scale": rec.scale,
            "scale_auto": rec.scale_auto, "dilation": rec.dilation, "dilation_auto": rec.dilation_auto,
            "traffic_s": rec.traffic_s, "run_wall_s": round(time.monotonic() - t0, 1), "tcp": rec.tcp,
            "drops": rec.drops.dump(), "fraction_of_ideal": [round(o.fraction_of_ideal, 4) for o in rec.ops],
            "bytes_ok": rec.bytes_ok, "faithful": rec.fidelity.faithful, "fidelity": rec.fidelity.dump(),
            "halted": rec.halted and rec.halted.dump(), "pfc_agent": _pfc_agent(rec.pfc)}


def _pfc_agent(report: dict | None) -> dict | None:
    """What the PFC agent cost and how fast it acted in the run (#28: its CPU at 64 hosts, reaction)."""
    if not report:
        return None
    return {"detect": report.get("detect", "poll"), "cpu_share": report["agent_cpu_share"],
            "reaction_ms": report.get("reaction_ms"), "poll_period_ms": report["poll_period_ms"]}


def _agent_cell(agent: dict | None) -> str:
    if not agent:
        return "-"
    cpu = f"{agent['cpu_share']:.0%} of a core" if agent["cpu_share"] is not None else "CPU not measured"
    if agent["detect"] == "kernel":
        p99 = (agent["reaction_ms"] or {}).get("p99")
        return f"{cpu}; kernel events, reaction p99 " + (f"{p99:g} ms" if p99 is not None else "- (no crossing)")
    return f"{cpu}; poll p99 {agent['poll_period_ms']['p99']:g} ms (every {agent['poll_period_ms']['configured']:g})"


DEFAULT_HOSTS = [8, 16, 32, 64, 128]


def _verdict(fidelity: dict) -> str:
    v = Verdict.model_validate(fidelity)
    idle_said = f"CPU idle >= {v.cpu_idle_min:.0%}" if v.cpu_idle_min is not None else "CPU idle not measured"
    if v.status == "faithful":
        return f"faithful ({idle_said})"
    return f"{'NOT faithful' if v.status != 'unknown' else 'unknown'} ({idle_said}): " + "; ".join(v.why())[:160]


def _allreduce_cells(ar: dict) -> list[str]:
    span = ar["traffic_s"]
    chosen = " (default: auto)" if ar.get("settings") == "default" else ""
    return [f"1/{ar['scale']:,.0f}, D = {ar['dilation']:g}{chosen}",
            ", ".join(f"{f:.1%}" for f in ar["fraction_of_ideal"]) + ("" if ar["bytes_ok"] else " (bytes NOT exact)"),
            f"{span['virtual']:.2f} s in {span['wall']:.1f} s", _agent_cell(ar.get("pfc_agent")),
            _verdict(ar["fidelity"])]


def _beside(ours: float, theirs: float) -> str:
    return f"{ours:.1f} / {theirs:.1f} s ({ours / theirs:.2f}x)" if theirs else f"{ours:.1f} s"


def scale_table(rows: list[dict]) -> str:
    """The docs' table: start, stop, pingall and memory per size, then its all-reduce(s), one line per D."""
    out = []
    for row in rows:
        h, mn = row.get("hpnlab"), row.get("mininet_tclink") or {}
        if h:
            life = [f"{row['hosts']} / {h['switches']} / {h['links']}", _beside(h["up_s"], mn.get("up_s", 0)),
                    _beside(h["down_s"], mn.get("down_s", 0)),
                    f"{h['ping_received']:,}/{h['ping_sent']:,} in {h['pingall_s']} s", f"{h['mem_per_host_mb']} MB"]
        else:
            life = [str(row["hosts"]), "-", "-", "-", "-"]
        again = [f"{row['hosts']}, again", "", "", "", ""]
        for i, ar in enumerate([row["allreduce"], *row.get("repeats", []), *row.get("dilated", [])]):
            first = life if i == 0 else again if ar.get("settings") == "default" else [f"{row['hosts']}, same", "",
                                                                                        "", "", ""]
            out.append(first + _allreduce_cells(ar))
    return table(["hosts / switches / links", "up: hpnlab / Mininet+TCLink", "teardown: hpnlab / Mininet",
                  "pingall (all NIC pairs)", "memory per host", "all-reduce: scale, dilation",
                  "busbw of ideal (2 iterations)", "virtual in wall", "PFC agent", "verdict"], out)


def _given(hosts: int, iters: int, dilations: list[float], default: dict) -> list[dict]:
    """The all-reduce at each given dilation, beside the default settings' run (`default`; not again where
    auto chose the same): D > 1 at the scale D = 1 takes."""
    undilated_scale = None  # only a D > 1 needs it (building the topology is seconds at 128 hosts)
    if any(d != 1 for d in dilations):
        exp = _experiment(hosts, iters, 1.0, "auto")
        undilated_scale = resolve_auto(exp, Path.cwd(), exp.topology.build())[0].qos.scale

    def ran(d: float) -> bool:  # auto chose these settings: the default run is this one
        return d == default["dilation"] and (d == 1 or undilated_scale == default["scale"])
    return [allreduce(hosts, iters, d, "auto" if d == 1 else undilated_scale) for d in sorted(dilations)
            if not ran(d)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, nargs="+", default=DEFAULT_HOSTS)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--no-mininet", action="store_true", help="Skip the Mininet + TCLink baseline.")
    ap.add_argument("--out", default="results/bench/scale.json")
    ap.add_argument("--dilation", type=float, nargs="*", default=[1.0],
                    help="Besides the default settings (dilation and scale auto), also run the all-reduce with "
                         "time dilated by each D (1: undilated, at scale auto; D > 1: at the scale D = 1 would "
                         "choose, so 1/D of the per-port wall-clock load).")
    ap.add_argument("--repeat", type=int, default=1, help="Run the all-reduce at the defaults N times per size.")
    ap.add_argument("--allreduce-only", action="store_true", help="Skip the start/stop and pingall figures.")
    ap.add_argument("--floor", action="store_true", help="Measure and cache each size's per-op floor first.")
    ap.add_argument("--from", dest="saved", type=Path, help="Write the docs' table from this saved run; run nothing.")
    a = ap.parse_args()
    if a.saved:
        write_saved(a.saved, "scale", lambda saved: scale_table(saved["rows"]))
        return
    measured = stamp()
    exit_cleanly_on_signals()  # SIGTERM unwinds through each network's stop(), as Ctrl-C does
    rows = []
    for n in a.hosts:
        row = {"hosts": n} if a.allreduce_only else {"hosts": n, "hpnlab": hpnlab_lifecycle(n)}
        if not (a.no_mininet or a.allreduce_only):
            row["mininet_tclink"] = mininet_lifecycle(n)
        if a.floor:
            row["floor"] = calibrate(hosts=n, budget=False)["floor"]
        row["allreduce"] = allreduce(n, a.iters)
        row["repeats"] = [allreduce(n, a.iters) for _ in range(a.repeat - 1)]
        row["dilated"] = _given(n, a.iters, a.dilation, row["allreduce"])
        rows.append(row)
        if "hpnlab" in row:
            h, mn = row["hpnlab"], row.get("mininet_tclink", {})
            print(f"{n:4} hosts {h['switches']:3} sw {h['links']:4} links | up {h['up_s']:6.1f} s down "
                  f"{h['down_s']:5.1f} s | Mininet+TCLink up {mn.get('up_s', '-')} down {mn.get('down_s', '-')} | "
                  f"pingall {h['ping_received']}/{h['ping_sent']} in {h['pingall_s']} s | {h['mem_per_host_mb']} "
                  "MB/host", flush=True)
        for ar in [row["allreduce"], *row["repeats"], *row["dilated"]]:
            span = ar["traffic_s"]
            print(f"{n:4} hosts all-reduce 1/{ar['scale']:,.0f}, D = {ar['dilation']:g}: {ar['fraction_of_ideal']} "
                  f"of ideal, bytes ok {ar['bytes_ok']}, {span['virtual']:.2f} s virtual in {span['wall']:.1f} s "
                  f"wall, {Verdict.model_validate(ar['fidelity']).line()}", flush=True)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"when": time.strftime("%Y-%m-%d %H:%M:%S"), "stamp": measured, "rows": rows},
                                       indent=1))
    print(scale_table(rows))
    if a.hosts == DEFAULT_HOSTS and not a.allreduce_only:  # a partial run prints, never replaces the table
        replace_block(BENCHMARKS, "scale", scale_table(rows), measured)


if __name__ == "__main__":
    main()
