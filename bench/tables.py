"""Benchmarks write their tables into the docs between markers, so every figure there is generated, never typed,
and each table is stamped with the machine, the commit and the date it was measured on.

A block is delimited by `<!-- bench:NAME:start -->` and `<!-- bench:NAME:end -->`; what is between them is
replaced whole, the rest of the file is left as it is. docs/benchmarks.md holds the benchmarks' tables,
experiments/README.md the shipped experiments' (the docs site includes it).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from testbed.system.versions import git_revision, machine_summary, revision_text

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "docs" / "benchmarks.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"


def stamp() -> dict:
    """What a measurement was taken on, to keep in its saved record: machine, commit, date."""
    return {"machine": machine_summary(), "commit": revision_text(*git_revision()), "date": time.strftime("%Y-%m-%d")}


def stamp_of(record: dict | list) -> dict:
    """A saved record's stamp; records saved before stamps existed keep only their date (or nothing)."""
    record = record if isinstance(record, dict) else {}
    if "stamp" in record:
        return record["stamp"]
    return {"machine": "a machine not recorded", "commit": "not recorded",
            "date": str(record.get("when", "unknown"))[:10]}


def write_saved(path: Path, name: str, render: Callable[[dict | list], str]) -> None:
    """The docs' table `name` rewritten from a run saved earlier (a bench's `--from FILE`), under its own stamp."""
    saved = json.loads(path.read_text())
    replace_block(BENCHMARKS, name, render(saved), stamp_of(saved))


def args_or_saved(ap: argparse.ArgumentParser, name: str, render: Callable[[dict], str],
                  out: str) -> argparse.Namespace | None:
    """A bench's arguments with `--out` (default `out`) and `--from`; with `--from FILE` the docs' table `name` is
    written from that saved run and None returned: nothing is to run."""
    ap.add_argument("--out", default=out)
    ap.add_argument("--from", dest="saved", type=Path, help="Write the docs' table from this saved run; run nothing.")
    a = ap.parse_args()
    if a.saved:
        write_saved(a.saved, name, render)
        return None
    return a


def write_new(path: str | Path, name: str, saved: dict, render: Callable[[dict], str]) -> None:
    """A bench's fresh record (with its "stamp") saved to `path`, and its table written into the docs' block
    `name` and printed."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(saved, indent=1))
    replace_block(BENCHMARKS, name, render(saved), saved["stamp"])
    print(render(saved))


def stamp_line(s: dict) -> str:
    return f"Measured on {s['machine']}; commit {s['commit']}; {s['date']}."


def replace_block(path: Path, name: str, block: str, measured: dict) -> None:
    """Put `block` between the markers named `name` in `path`, under the stamp of where it was `measured`."""
    start, end = markers(name)
    text = path.read_text()
    if start not in text or end not in text or text.index(end) < text.index(start):
        raise SystemExit(f"{path}: no '{start}' ... '{end}' block to write into; add the two markers where the "
                         "table belongs")
    body = f"{start}\n{stamp_line(measured)}\n\n{block}\n{end}"
    path.write_text(text[:text.index(start)] + body + text[text.index(end) + len(end):])


def table(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def stamp_of_results(run_dir: Path) -> dict:
    """The stamp of an experiment's results folder: its environment.json's versions and the date in its name."""
    v = json.loads((run_dir / "environment.json").read_text())["versions"]
    day = run_dir.name[:8]
    return {"machine": f"kernel {v.get('kernel')} (results folder {run_dir.name})",
            "commit": revision_text(v.get("git"), bool(v.get("git_dirty"))),
            "date": f"{day[:4]}-{day[4:6]}-{day[6:]}"}
