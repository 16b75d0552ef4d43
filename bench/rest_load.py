"""Load on the controller's REST API: concurrent clients against a real controller process on loopback.

    .venv/bin/python -m bench.rest_load [--clients 20] [--requests 50] [--out results/bench/rest_load.json]

The controller runs in precise mode on the mini HPN with no switches attached
(REST and the path state only), so what is measured is the API: its listen
queue, its threads and its lock. Each client mixes reads (/health, /paths) and
writes (declare 4 flows, withdraw them). Reported: answered, refused or failed
connections, p50/p95/p99 latency, requests per second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from controllers.client import ControllerClient, write_token
from controllers.rest import MAX_FLOWS
from testbed.net.controller import free_ports
from topos import build


def client_loop(c: ControllerClient, idx: int, n: int, times: list, errors: list) -> None:
    for i in range(n):
        t = time.monotonic()
        try:
            kind = i % 4
            if kind == 0:
                c.health()
            elif kind == 1:
                c.get("/paths?src=h0&dst=10.0.0.5")
            elif kind == 2:
                c.declare([{"src": f"h{idx % 4}", "dst": "10.0.0.5", "proto": "udp", "sport": 10000 + idx * 100 + j,
                            "dport": 7000} for j in range(4)])
            else:
                c.withdraw([f"udp:h{idx % 4}:{10000 + idx * 100 + j}->10.0.0.5:7000" for j in range(4)])
            times.append(time.monotonic() - t)
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            errors.append(type(exc).__name__)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog="python -m bench.rest_load")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=52, help="per client (a multiple of 4)")
    ap.add_argument("--out", default="results/bench/rest_load.json")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        topo = Path(d) / "topology.json"
        topo.write_text(build("hpn").to_json())
        token = write_token(str(Path(d) / "token"))
        rest, of_port = free_ports(2)
        proc = subprocess.Popen([sys.executable, "-m", "controllers.launcher", "--topology", str(topo), "--mode",
                                 "precise", "--of-port", str(of_port), "--rest-port", str(rest),
                                 "--token-file", str(Path(d) / "token")], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            probe = ControllerClient(rest, token)
            deadline = time.monotonic() + 30
            while True:
                try:
                    probe.health()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            times: list[float] = []
            errors: list[str] = []
            threads = [threading.Thread(target=client_loop, args=(ControllerClient(rest, token), i, a.requests, times,
                                                                 errors)) for i in range(a.clients)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - t0
            left = len(probe.get("/flows"))
            # the largest request the API takes holds the state lock this long (15k flows held it 2 s)
            big = [{"src": f"h{i % 8}", "dst": f"10.0.0.{1 + (i + 4) % 8}", "proto": "udp", "sport": 20000 + i,
                    "dport": 7000} for i in range(MAX_FLOWS)]
            t = time.monotonic()
            probe.declare(big)
            max_request_s = time.monotonic() - t
            probe.withdraw()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    q = statistics.quantiles(times, n=100) if len(times) >= 2 else [0.0] * 99
    out = {"clients": a.clients, "requests": a.clients * a.requests, "answered": len(times), "failed": len(errors),
           "failures": sorted(set(errors)), "p50_ms": round(q[49] * 1000, 1), "p95_ms": round(q[94] * 1000, 1),
           "p99_ms": round(q[98] * 1000, 1), "max_ms": round(max(times, default=0) * 1000, 1),
           "requests_per_s": round(len(times) / wall, 1), "flows_left": left,
           f"declare_{MAX_FLOWS}_flows_ms": round(max_request_s * 1000, 1)}
    print(json.dumps(out))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
