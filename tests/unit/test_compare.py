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


def test_a_roce_gray_failure_is_set_against_the_healthy_run_of_its_transport_and_scales_with_go_back_ns_cost():
    """The TCP and RoCE variants of gray_failures run at other bytes scales and dilations: an op's fabric time is
    compared only with the healthy run like it, and a RoCE one says what a lost frame cost its queue pairs."""
    roce = {"transport": "roce", "scale": 4.0, "dilation": 3125.0}
    nic = {"sent": 10_000, "resent": 530, "lost": 0, "naks": 9, "timeouts": 1, "out_of_order": 500}
    lossy = _gray_run("roce-lossy-1e-3", 0.003, [None]) | roce | {"roce": nic}
    lossy["gray"]["counters"] = {"h1:nic0:p0": {"errors": {"a_to_b": 6, "b_to_a": 4}, "frames": {"a_to_b": 9_990}}}
    lossy["drops"] = lossy["drops"] | {"high": 0, "lossless": 0, "default": 0}
    runs = [_gray_run("healthy", 1.0, []) | {"transport": "tcp"}, _gray_run("roce-healthy", 0.002, []) | roce,
            lossy]
    assert _gray(results(runs)) == ("roce-lossy-1e-3: named after never, ops 1.50x the healthy run's (RoCE: 53.0 "
                                    "frames resent per frame lost, 1 retry timeouts); 1e-4 named within 2 s: NOT met")
    assert "ops" not in _gray(results([runs[0], lossy]))  # no healthy RoCE run: no slowdown to give
