"""One server against several: the same collective on the same HPN, alone and spread by `--cluster`.

    sudo .venv/bin/python -m bench.cluster_bench --cluster cluster.yaml [--scale 1000000] [--out FILE]

Runs `hpnlab traffic run` twice with the same arguments, first on this server alone, then over the cluster
file's servers, and prints busbw, its fraction of ideal and the fidelity verdict of each, and how far the
two busbw figures are apart (issue #18's goal: within 10% where both runs are faithful). In the cluster tier
(`HPNLAB_CLUSTER_INTERACTIVE=1 make cluster-test`, then scripts/vm/cluster-cmd.sh) it runs on the VMs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from testbed.schema.results import Run

HPNLAB = str(Path(sys.executable).parent / "hpnlab")
PARAMS = {"hosts_per_segment": 2, "rails": 1, "aggs_per_plane": 2, "tor_uplinks": 2}


def traffic_run(args: list[str], cluster: str | None) -> Run:
    cmd = [HPNLAB, "traffic", "run", *args, "--format", "json", *(["--cluster", cluster] if cluster else [])]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if not r.stdout.strip():
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return Run.model_validate_json(r.stdout)


def summary(rec: Run) -> dict:
    ops = rec.ops
    if rec.halted or not ops:
        raise SystemExit(f"the run halted: {rec.halted}")
    fid = rec.fidelity
    return {"busbw_bps": round(statistics.mean(o.busbw_bps for o in ops)),
            "fraction_of_ideal": round(statistics.mean(o.fraction_of_ideal for o in ops), 4),
            "bytes_ok": rec.bytes_ok, "faithful": fid.faithful, "reasons": fid.reasons,
            "cpu_idle_min": fid.cpu_idle_min, "servers": list((rec.cluster or {}).get("servers", {})) or ["this one"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--scale", default="1000000")
    ap.add_argument("--size", default="200GB")
    ap.add_argument("--iters", default="3")
    ap.add_argument("--out", default="results/bench/cluster.json")
    a = ap.parse_args()
    # tcp on both: over several servers the rdma transport is refused (traffic/transports)
    args = ["--topo", "hpn", *(f"-p{k}={v}" for k, v in PARAMS.items()), "--no-pfc", "--transport", "tcp",
            "--scale", a.scale,
            "--op", "allreduce", "--algorithm", "ring", "--size", a.size, "--iters", a.iters]
    one, spread = summary(traffic_run(args, None)), summary(traffic_run(args, a.cluster))
    apart = abs(spread["busbw_bps"] - one["busbw_bps"]) / one["busbw_bps"]
    out = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "args": args, "one_server": one, "cluster": spread,
           "busbw_apart": round(apart, 4), "within_10pct": apart <= 0.10,
           "both_faithful": one["faithful"] and spread["faithful"]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(out, indent=1))
    for name, s in (("one server", one), (f"{len(spread['servers'])} servers", spread)):
        print(f"{name:>10}: busbw {s['busbw_bps'] / 1e6:.3f} Mbit/s, {s['fraction_of_ideal']:.1%} of ideal, bytes "
              f"{'exact' if s['bytes_ok'] else 'WRONG'}, {'faithful' if s['faithful'] else 'NOT faithful: '}"
              + "; ".join(s["reasons"]))
    print(f"busbw apart by {apart:.1%} ({'within' if apart <= 0.10 else 'NOT within'} 10%); "
          f"both faithful: {out['both_faithful']}")


if __name__ == "__main__":
    main()
