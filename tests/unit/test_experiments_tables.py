"""experiments/README.md's tables (bench/experiments_bench.py) brought up to date a few experiments at a time: a
partial run rewrites its experiments' lines and keeps the others' as they were measured, each under its own
stamp."""

from __future__ import annotations

from pathlib import Path

from bench.experiments_bench import Measured, kept, tables

FILES = sorted((Path(__file__).resolve().parents[2] / "experiments").glob("*.yaml"))
OLD = {"machine": "vm: 2 cores", "commit": "64e8476", "date": "2026-11-26"}
NEW = {"machine": "ci: 2 cores", "commit": "abc1234", "date": "2026-12-01"}


def _row(name: str, variant: str, folder: str) -> str:
    return f"| {name} | {variant} | 3 | 9.14 | 57.1% | 0/0 | no |  |  | 287.4 | queue 101 KB | faithful | {folder} |"


def _written(done: dict[str, Measured]) -> str:
    """The block as replace_block writes it: its own stamp line, then the tables."""
    return f"Measured on vm: 2 cores; commit 64e8476; 2026-11-26.\n\n{tables(done, FILES, quick=False)}"


def test_a_partial_run_replaces_its_experiments_lines_and_keeps_the_others_with_their_stamps():
    before = {"hash_polarization": Measured("- **hash_polarization** (paper: 3x): old cut.",
                                            [_row("hash_polarization", "dual-plane", "old-folder")], OLD),
              "placement": Measured(None, [_row("placement", "compact", "p-folder"),
                                           _row("placement", "scattered", "p-folder")], OLD)}
    again = kept(_written(before))
    assert again == before  # read back as written: bullets, rows and stamps
    fresh = {"hash_polarization": Measured("- **hash_polarization** (paper: 3x): new cut.",
                                           [_row("hash_polarization", "dual-plane", "new-folder")], NEW)}
    text = _written(again | fresh)
    assert "new cut" in text and "old cut" not in text and "old-folder" not in text
    assert "| hash_polarization | ci: 2 cores | abc1234 | 2026-12-01 |" in text
    assert "| placement | vm: 2 cores | 64e8476 | 2026-11-26 |" in text and text.count("p-folder") == 2
    assert "retired" not in _written(again | {"retired": Measured(None, [_row("retired", "v", "r")], OLD)})
    missing = next(line for line in text.splitlines() if line.startswith("Not measured at full size yet"))
    assert "cc_incast" in missing and "placement" not in missing and "hash_polarization" not in missing


def test_tables_written_before_per_experiment_stamps_keep_the_one_stamp_they_had():
    old = "\n".join(["Measured on vm: 2 cores; commit 64e8476; 2026-11-26.", "", "### The paper's figures beside ours",
                     "", "- **pfc_incast** (paper: —): drops 0.", "", "### Every variant", "",
                     "| experiment | variant | ops |", "|---|---|---|", _row("pfc_incast", "pfc-on", "f")])
    assert kept(old) == {"pfc_incast": Measured("- **pfc_incast** (paper: —): drops 0.",
                                                [_row("pfc_incast", "pfc-on", "f")], OLD)}
