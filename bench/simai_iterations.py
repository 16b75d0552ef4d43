"""Every SimAI file the importer takes, replayed with its compute alone on the default HPN, against the closed form.

    sudo .venv/bin/python -m bench.simai_iterations [--rows N] [--files A.txt B.txt] [--out FILE]

Each file runs as a one-job experiment through the runner (routing precise, scale auto, one iteration after a
warm-up iteration) and prints the measured iteration time, the prediction (compute in SimAI's order plus each
network op at the fabric's ideal rate, traffic/iteration.py) and their ratio, with the number of network ops
and the mean time an op spends beyond its closed form (the per-op cost of coordinating a replay). `--rows N`
keeps the first N layer rows of each file (the GPT-13B and DeepSeek files have thousands of ops).
Files without compute (GPT-7B) are listed as such: their iteration is communication only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from testbed.experiment.runner import run
from testbed.experiment.spec import from_dict
from traffic.workload import load_simai

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "workloads"
FILES = [ROOT / "tests" / "data" / "two_layers_simai.txt", *sorted(SHARED.glob("simai_*.txt"))]


def first_rows(src: Path, dst: Path, rows: int | None) -> None:
    lines = src.read_text().splitlines()
    body = [ln for ln in lines[2:] if ln.strip()]
    body = body if rows is None else body[:rows]
    dst.write_text("\n".join([lines[0], str(len(body)), *body]) + "\n")


def measure(path: Path, rows: int | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        first_rows(path, copy, rows)
        w = load_simai(copy)
        if w.compute_s == 0:
            return {"file": path.name, "compute_s": 0.0, "note": "no compute in the file"}
        exp = from_dict({"name": "simai-bench", "routing": "precise",
                         "workload": {"simai": copy.name, "iterations": 2}})
        out = run(exp, base=Path(tmp), results=Path(tmp) / "results")
        rec = json.loads((out / "results.json").read_text())["runs"][0]
    its = rec["iterations"]
    last = its[-1]  # the first iteration opens the connections
    ops = [o for o in rec["ops"] if o["start"] >= last["start"]]
    ideal = [o["seconds"] * o["fraction_of_ideal"] for o in ops]
    return {"file": path.name, "rows": rows, "network_ops": len(ops), "scale": rec["scale"],
            "compute_s": last["compute_s"], "seconds": last["seconds"], "predicted_s": last["predicted_s"],
            "ratio": round(last["seconds"] / last["predicted_s"], 3),
            # where the time goes: the ops at their closed forms, the ops as measured, the rest (compute, and
            # the gaps between one op's last byte and the next op's start)
            "ops_ideal_s": round(sum(ideal), 4), "ops_s": round(sum(o["seconds"] for o in ops), 4),
            "mean_op_beyond_ideal_ms": round(1000 * statistics.mean(o["seconds"] - i for o, i in zip(ops, ideal,
                                                                                                    strict=True)), 1)
            if ops else None,
            "bytes_ok": last["bytes_ok"], "faithful": rec["fidelity"]["faithful"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=None, help="first N layer rows of each file")
    ap.add_argument("--files", nargs="*", default=None, help="file names (default: every SimAI file here)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "simai_iterations.json")
    a = ap.parse_args()
    files = [f for f in FILES if a.files is None or f.name in a.files]
    rows = []
    for f in files:
        r = measure(f, a.rows)
        rows.append(r)
        print(json.dumps(r))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
