"""results.json's reference (testbed/experiment/schema.py) against real records: the recorded quick runs in
tests/data/runs. Every key a run wrote is documented, and every documented key a run always has is there."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.experiment.schema import FILE_FIELDS, ITERATION_FIELDS, OP_FIELDS, RUN_FIELDS, optional

RUNS = sorted((Path(__file__).resolve().parents[1] / "data" / "runs").glob("*.json"))
STAMP = {"recorded"}  # scripts/record_runs.py's provenance, not the product's


def check(fields: dict[str, str], records: list[dict], what: str) -> set[str]:
    """The keys the records hold, after checking them against the documented ones."""
    seen = set().union(*(r.keys() for r in records))
    assert not seen - set(fields) - STAMP, f"{what}: undocumented keys {sorted(seen - set(fields) - STAMP)}"
    always = {k for k, v in fields.items() if not optional(v)}
    for r in records:
        assert always <= set(r), f"{what}: documented but missing {sorted(always - set(r))}"
    return seen


def test_documented_keys_are_what_runs_write():
    files = [json.loads(p.read_text()) for p in RUNS]
    assert len(files) >= 5
    runs = [r for f in files for r in f["runs"]]
    check(FILE_FIELDS, files, "results.json")
    seen = check(RUN_FIELDS, runs, "run")
    assert {k for k, v in RUN_FIELDS.items() if optional(v)} & seen, "the recorded runs hold no optional key"
    check(OP_FIELDS, [o for r in runs for o in r["ops"]], "op")
    check(ITERATION_FIELDS, [i for r in runs for i in r["iterations"]], "iteration")
