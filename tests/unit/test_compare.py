"""The paper-beside-ours judgments experiments/README.md prints (bench/experiments_bench.py COMPARE) for the
failure experiments: what counts as reproduced."""

from __future__ import annotations

from bench.experiments_bench import _campaign, _gray
from testbed.schema.results import Results
from tests.records import a_run, an_op


def results(runs: list[dict]) -> Results:
    return Results.model_validate({"experiment": {"name": "e"}, "complete": True, "runs": runs})


def _campaign_run(variant: str, outcomes: list[str], kind: str = "nic-tor") -> dict:
    return a_run(variant=variant, campaign={"outcomes": [{"kind": kind, "outcome": o} for o in outcomes],
                                            "summary": {"job": {"goodput": 0.99}}})


def test_a_campaign_is_reproduced_when_dual_tor_rides_out_and_single_tor_restarts_on_every_outage_it_met():
    confounded = results([_campaign_run("dual-tor-hpn", ["slowdown"] * 4),
                          _campaign_run("single-tor-rail", ["restart", "restart", "confounded", "restart"])])
    text = _campaign(confounded)
    assert "single-tor-rail: 3 restarts in 3 NIC-ToR link and ToR outages, 0 in 0 aggregation-side ones (1 more " \
           "confounded)" in text and text.endswith(": reproduced")
    survived = results([_campaign_run("dual-tor-hpn", ["slowdown"] * 4),
                        _campaign_run("single-tor-rail", ["restart", "slowdown", "restart"])])
    assert _campaign(survived).endswith(": NOT reproduced")  # a single-ToR job that only slowed
    restarted = results([_campaign_run("dual-tor-hpn", ["slowdown", "restart"]),
                         _campaign_run("single-tor-rail", ["restart"])])
    assert _campaign(restarted).endswith(": NOT reproduced")  # 1 of 2 dual-ToR outages failed the job


def _gray_run(variant: str, seconds: float, named: list[float | None]) -> dict:
    return a_run(variant=variant, ops=[an_op(job="job", seconds=seconds)], iterations=[],
                 gray={"delays": [{"named_after_s": n} for n in named]} if named else None)


def test_gray_detection_goal_is_met_only_when_every_1e4_link_was_named_within_2_s():
    runs = [_gray_run("healthy", 1.0, []), _gray_run("lossy-1e-4", 1.1, [1.6])]
    assert _gray(results(runs)) == "lossy-1e-4: named after 1.60 s, ops 1.10x the healthy run's; 1e-4 named " \
                                    "within 2 s: reproduced"
    assert _gray(results([runs[0], _gray_run("lossy-1e-4", 1.1, [2.5])])).endswith("NOT met")
    assert _gray(results([runs[0], _gray_run("lossy-1e-4", 1.1, [None])])).endswith("NOT met")
