"""Every SimAI file the importer takes, replayed with its compute alone on an HPN of its size, against the closed form.

    sudo .venv/bin/python -m bench.simai_iterations [--rows N] [--files A.txt B.txt] [--out FILE]
        [--dilation auto|D] [--max-wall S] [--keep DIR]

Each file runs as a one-job experiment through the runner on one segment of as many 8-GPU servers (2 NICs
each) as it has GPUs (routing precise, scale auto, time dilation auto
unless given, one iteration after a warm-up iteration) and prints the measured iteration time, the
prediction (compute in SimAI's order plus each network op at the fabric's ideal rate, traffic/iteration.py)
and their ratio, with the number of network ops and the mean time an op spends beyond its closed form (the
emulator's own cost per op). `--rows N` keeps the first N layer rows of each file (a production model's
file has thousands of ops).
By default the files are the project's own (tests/data/simai_*.txt, written by `python -m traffic.simai`);
`--files` takes paths to any other SimAI/AICB files instead, e.g. those of SimAI's own examples.
Files without compute are listed as such: their iteration is communication only.
A run of the project's files in full writes the docs' SimAI table (between its markers).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from bench.tables import BENCHMARKS, replace_block, stamp, table, write_saved
from testbed.experiment.runner import run
from testbed.experiment.spec import from_dict
from testbed.schema.results import load
from topos.errors import InputError
from traffic.workload import load_simai

ROOT = Path(__file__).resolve().parents[1]
# The project's own SimAI files (traffic/simai.py writes them); a user's files come in through --files.
FILES = sorted((ROOT / "tests" / "data").glob("simai_*.txt"))


def first_rows(src: Path, dst: Path, rows: int | None) -> None:
    lines = src.read_text().splitlines()
    body = [ln for ln in lines[2:] if ln.strip()]
    body = body if rows is None else body[:rows]
    dst.write_text("\n".join([lines[0], str(len(body)), *body]) + "\n")


def measure(path: Path, rows: int | None, dilation: float | str = "auto", max_wall: float | None = None,
            keep: Path | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        first_rows(path, copy, rows)
        w = load_simai(copy)
        if w.compute_s == 0:
            return {"file": path.name, "compute_s": 0.0, "note": "no compute in the file"}
        time_spec = {"dilation": dilation, **({"max_wall_s": max_wall} if max_wall else {})}
        hosts = -(-w.plan["all_gpus"] // 8)  # servers of 8 GPUs behind the default 2 NICs, in one segment
        exp = from_dict({"name": "simai-bench", "routing": "precise", "time": time_spec,
                         "topology": {"name": "hpn", "params": {"segments_per_pod": 1, "hosts_per_segment": hosts,
                                                                "gpus_per_host": 8}},
                         "workload": {"simai": copy.name, "iterations": 2}})
        try:
            out = run(exp, base=Path(tmp), results=keep or Path(tmp) / "results")
        except InputError as e:  # e.g. every op inside one server: nothing for the fabric to replay
            return {"file": path.name, "compute_s": w.compute_s, "note": f"not run: {e}"}
        rec = load((out / "results.json").read_text()).runs[0]
    last = rec.iterations[-1]  # the first iteration opens the connections
    ops = [o for o in rec.ops if o.start >= last.start]
    ideal = [o.seconds * o.fraction_of_ideal for o in ops]
    return {"file": path.name, "rows": rows, "network_ops": len(ops), "scale": rec.scale,
            "compute_s": last.compute_s, "seconds": last.seconds, "predicted_s": last.predicted_s,
            "ratio": round(last.seconds / last.predicted_s, 3),
            # where the time goes: the ops at their closed forms, the ops as measured, the rest (compute, and
            # the gaps between one op's last byte and the next op's start)
            "ops_ideal_s": round(sum(ideal), 4), "ops_s": round(sum(o.seconds for o in ops), 4),
            "mean_op_beyond_ideal_ms": round(1000 * statistics.mean(o.seconds - i for o, i in zip(ops, ideal,
                                                                                                    strict=True)), 1)
            if ops else None,
            "bytes_ok": last.bytes_ok, "dilation": rec.dilation, "traffic_s": rec.traffic_s, "tcp": rec.tcp,
            "verdict": rec.fidelity.status, "reasons": rec.fidelity.why(), "faithful": rec.fidelity.faithful}


def simai_table(rows: list[dict]) -> str:
    """The docs' table: per file its iteration measured against the closed form, with the dilation and the wall
    time the two iterations (warm-up and measured) took."""
    out = []
    for r in rows:
        if "seconds" not in r:
            compute = f"{r['compute_s']:.3g} s" if r.get("compute_s") else "none"
            out.append([r["file"], "-", compute, "-", "-", "-", "-", "-", r.get("note", "")])
            continue
        said = r["verdict"] + (": " + "; ".join(r["reasons"])[:140] if r["reasons"] else "")
        out.append([r["file"] + (f" (first {r['rows']} rows)" if r["rows"] else ""), f"{r['network_ops']:,}",
                    f"{r['compute_s']:.3g} s", f"{r['dilation']:g}", f"{r['seconds']:.4g} s",
                    f"{r['predicted_s']:.4g} s", f"{r['ratio']:.2f}", f"{r['traffic_s']['wall']:.0f} s", said])
    return table(["file", "network ops", "compute", "dilation", "measured", "predicted", "ratio",
                  "wall (2 iterations)", "verdict"], out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=None, help="first N layer rows of each file")
    ap.add_argument("--files", nargs="*", type=Path, default=None,
                    help="SimAI workload files (default: the project's own, tests/data/simai_*.txt)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "simai_iterations.json")
    ap.add_argument("--dilation", default="auto", help="time dilation D, or auto (default)")
    ap.add_argument("--max-wall", type=float, default=None, help="cap on the wall time auto may choose for")
    ap.add_argument("--keep", type=Path, default=None, help="keep each run's results folder under this folder "
                    "(per-op records, timeline); default: thrown away")
    ap.add_argument("--from", dest="saved", type=Path, help="Write the docs' table from this saved run; run nothing.")
    a = ap.parse_args()
    if a.saved:
        # files saved before stamps hold the rows alone
        write_saved(a.saved, "simai", lambda saved: simai_table(saved["rows"] if isinstance(saved, dict) else saved))
        return
    dilation = a.dilation if a.dilation == "auto" else float(a.dilation)
    files = FILES if a.files is None else a.files
    measured, rows = stamp(), []
    for f in files:
        r = measure(f, a.rows, dilation, a.max_wall, a.keep)
        rows.append(r)
        print(json.dumps(r), flush=True)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"stamp": measured, "rows": rows}, indent=1))
    print(simai_table(rows))
    if a.files is None:  # every file: the table in the docs (a partial run prints only)
        replace_block(BENCHMARKS, "simai", simai_table(rows), measured)


if __name__ == "__main__":
    main()
