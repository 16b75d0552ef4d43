"""What the live web view costs: one sample of a running HPN (OVS's datapath counters, every switch port's
operstate, the shaped queues of every port, declared flows) and the size of the state pushed to pages.

    sudo .venv/bin/python -m bench.web_sample [--hosts 8 32 64] [--samples 20]

The hub samples twice a second, so the share of one core it takes is sample time x 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from testbed.net.network import Network
from testbed.qos.calibrated import probe_params
from testbed.qos.spec import QosSpec
from testbed.system.signals import exit_cleanly_on_signals
from testbed.web.fabric import QUEUE_SHARE, FabricProbe
from testbed.web.hub import PERIOD_S
from topos import build


def measure(hosts: int, samples: int) -> dict:
    topo = build("hpn", **probe_params(hosts))
    with Network(topo, routing="controller", mode="precise", qos=QosSpec(scale="auto")) as net:
        probe = FabricProbe.of(net)
        probe.sample()
        times, size = [], 0
        for _ in range(samples):
            t0 = time.monotonic()
            state = probe.sample()
            times.append(time.monotonic() - t0)
            size = len(json.dumps(state))
            time.sleep(PERIOD_S)
        queues_every = max(PERIOD_S, probe._ports_cost / QUEUE_SHARE)
    ms = statistics.mean(times) * 1000
    return {"hosts": hosts, "switches": len(topo.switches), "links": len(topo.links), "sample_ms_mean": round(ms, 1),
            "sample_ms_max": round(max(times) * 1000, 1), "core_share": round(ms / 1000 / PERIOD_S, 3),
            "queues_every_s": round(queues_every, 1), "state_kb": round(size / 1024, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, nargs="+", default=[8, 32, 64])
    ap.add_argument("--samples", type=int, default=20)
    args = ap.parse_args()
    exit_cleanly_on_signals()
    print("hosts switches links  sample ms (mean / max)  share of a core at 2/s  queues read every (s)  "
          "state pushed (KB)")
    for h in args.hosts:
        r = measure(h, args.samples)
        print(f"{r['hosts']:5d} {r['switches']:8d} {r['links']:5d}  {r['sample_ms_mean']:7.1f} / "
              f"{r['sample_ms_max']:<9.1f}  {100 * r['core_share']:22.1f}%  {r['queues_every_s']:21.1f}  "
              f"{r['state_kb']:17.1f}")


if __name__ == "__main__":
    main()
