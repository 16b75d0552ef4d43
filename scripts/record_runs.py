"""Keep quick runs' results.json as test data: tests/data/runs/<experiment>.json.

The lab checkers and the results summaries are tested as pure code against these records
(tests/unit/test_recorded_runs.py), so that only one end-to-end run per lab stays in the slow tier.
A record is the run's own results.json, less the PFC agent's time series (`pfc.samples`: 0.6 MB per
run of failure_campaign, read only by the queue plot), stamped with where and when it was recorded.

    hpnlab run --quick experiments/<name>.yaml        # for each experiment a lab reads
    python scripts/record_runs.py results/*-quick-*   # newest run of each experiment wins
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from testbed.system.versions import git_revision, machine_summary, revision_text

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "runs"
DROPPED = ("pfc", "samples")  # (section, key) left out of every run


def trimmed(data: dict) -> dict:
    for run in data["runs"]:
        section = run.get(DROPPED[0])
        if isinstance(section, dict):
            section.pop(DROPPED[1], None)
    return data


def stamp() -> dict:
    return {"commit": revision_text(*git_revision()), "machine": machine_summary(),
            "date": datetime.now(UTC).strftime("%Y-%m-%d"), "left_out": ".".join(DROPPED)}


def main(folders: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for folder in sorted(folders, key=lambda f: Path(f).name):  # run folders start with their time
        data = json.loads((Path(folder) / "results.json").read_text())
        name = data["experiment"]["name"]
        data = {"recorded": {**stamp(), "from": Path(folder).name}, **trimmed(data)}
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
        print(f"{path.relative_to(ROOT)}: {path.stat().st_size // 1024} KB from {Path(folder).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
