"""results.json's schema (testbed/experiment/schema.py) against real records: the recorded quick runs in
tests/data/runs. Every key a run wrote is a field of the models, every field a run always has is there, every
field is described for the docs' reference, and an edited record is refused with the field it got wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.schema.results import TABLES, Results, Run, load, optional

RUNS = sorted((Path(__file__).resolve().parents[1] / "data" / "runs").glob("*.json"))
STAMP = {"recorded"}  # scripts/record_runs.py's provenance, not the product's


def recorded(path: Path) -> dict:
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in STAMP}


@pytest.mark.parametrize("path", RUNS, ids=[p.stem for p in RUNS])
def test_every_recorded_run_is_what_the_schema_says(path):
    data = recorded(path)
    typed = Results.model_validate(data)  # extra keys are refused, required ones must be there
    assert typed.runs and all(r.ops or r.halted for r in typed.runs)  # pfc_deadlock: halted before its first op
    assert [r.dump() for r in typed.runs] == data["runs"]  # read back and written again: the same record


def test_the_recorded_runs_cover_the_optional_fields_and_every_field_is_described():
    assert len(RUNS) >= 5
    seen = {k for p in RUNS for r in recorded(p)["runs"] for k in r}
    assert {name for name, f in Run.model_fields.items() if optional(f.description or "")} & seen
    for title, fields in TABLES.items():
        assert all(len(text) > 5 for text in fields.values()), title


@pytest.mark.parametrize("edit, field", [
    (lambda r: r.update(surprise=1), "runs.0.surprise"),
    (lambda r: r.pop("fidelity"), "runs.0.fidelity"),
    (lambda r: r["ops"][0].update(busbw_bps="fast"), "runs.0.ops.0.busbw_bps"),
    (lambda r: r["drops"].update(lossless=-0.5), "runs.0.drops.lossless"),
])
def test_an_edited_record_is_refused_naming_the_field(edit, field):
    data = recorded(RUNS[0])
    edit(data["runs"][0])
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        load(json.dumps(data))


def test_a_number_that_is_not_finite_is_refused():
    data = recorded(RUNS[0])
    data["runs"][0]["ops"][0]["busbw_bps"] = float("inf")
    with pytest.raises(ValueError, match="busbw_bps"):
        load(json.dumps(data))
