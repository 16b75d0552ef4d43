"""Whole run records for tests that write a results.json by hand: a recorded run's first record (pfc_incast,
tests/data/runs) with the fields the test sets, so that what a test changes is all that differs from a run
hpnlab wrote (testbed/experiment/schema.py refuses a record with fields missing)."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path

RECORDED = Path(__file__).resolve().parent / "data" / "runs" / "pfc_incast.json"


@cache
def _recorded() -> dict:
    return json.loads(RECORDED.read_text())["runs"][0]


def an_op(**fields) -> dict:
    """The recorded run's first op, with `fields` set."""
    return {**copy.deepcopy(_recorded()["ops"][0]), **fields}


def a_run(**fields) -> dict:
    """The recorded run, with `fields` set (ops=[an_op(...)] for ops of your own)."""
    return {**copy.deepcopy(_recorded()), **fields}


def results_json(experiment: dict, runs: list[dict], complete: bool = True) -> str:
    """A results.json's text."""
    return json.dumps({"experiment": experiment, "complete": complete, "runs": runs})
