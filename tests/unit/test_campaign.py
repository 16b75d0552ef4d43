"""Failure campaigns (pure): rates to a seeded schedule that follows its distribution, the schedule played one
outage at a time, and each outage's cost from the ops around it (the watchdog fails a stalled job, not a slow
one)."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.campaign import cost
from testbed.campaign.model import DEFAULT_RATES, MONTH_S, Outage, Rate, components, expected_per_month, sample
from testbed.experiment.failures import campaign_events, expand
from testbed.experiment.spec import from_dict
from topos import build
from topos.errors import InputError

HPN = build("hpn")


def test_the_default_rates_and_the_components_of_each_kind():
    assert DEFAULT_RATES["nic-tor"].monthly == 0.00057 and DEFAULT_RATES["tor"].monthly == 0.00051
    assert math.isclose(1 - (1 - DEFAULT_RATES["agg"].monthly) ** 12, 0.10)  # 10% a year
    sizes = {k: len(components(HPN, k)) for k in ("nic-tor", "tor", "agg", "tor-agg")}
    assert sizes == {"nic-tor": 32, "tor": 8, "agg": 8, "tor-agg": 32}, sizes
    # 8 hosts of HPN: about one outage every 6 months, mostly aggregation switches (10% a year each)
    per_month = expected_per_month(HPN, DEFAULT_RATES)
    assert 0.1 < sum(per_month.values()) < 0.2 and max(per_month, key=per_month.get) == "agg", per_month


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 60))
def test_a_sample_is_seeded(seed, n):
    a, months = sample(HPN, DEFAULT_RATES, n, seed)
    assert (a, months) == sample(HPN, DEFAULT_RATES, n, seed)  # same seed, same schedule
    assert len(a) == n and all(x.t_s < y.t_s for x, y in itertools.pairwise(a))
    assert months * MONTH_S == pytest.approx(a[-1].t_s)
    assert all(x.component in components(HPN, x.kind) and x.repair_s > 0 for x in a)
    assert a != sample(HPN, DEFAULT_RATES, n, seed + 1)[0]


def test_a_long_sample_follows_its_distribution():
    """20,000 outages: the arrival rate, each kind's share and the repair times' median within statistical
    bounds (5 standard errors: a correct sampler fails this about once in 3 million seeds)."""
    n = 20_000
    out, months = sample(HPN, DEFAULT_RATES, n, seed=7)
    per_month = expected_per_month(HPN, DEFAULT_RATES)
    total = sum(per_month.values())
    # n arrivals of a Poisson process: months ~ Gamma(n, total): mean n / total, sd sqrt(n) / total
    assert abs(months - n / total) < 5 * math.sqrt(n) / total
    for kind, rate in per_month.items():
        share = rate / total
        got = sum(1 for o in out if o.kind == kind)
        assert abs(got - n * share) < 5 * math.sqrt(n * share * (1 - share)) + 1, (kind, got, n * share)
    links = sorted(o.repair_s for o in out if o.kind == "nic-tor")  # lognormal: median = the median given
    if len(links) > 100:
        assert abs(statistics.median(links) / DEFAULT_RATES["nic-tor"].repair_median_s - 1) < 0.3
    switches = [o.repair_s for o in out if o.kind == "agg"]
    assert abs(statistics.median(switches) / DEFAULT_RATES["agg"].repair_median_s - 1) < 0.05
    # exponential gaps: their coefficient of variation is 1
    gaps = [b.t_s - a.t_s for a, b in itertools.pairwise(out)]
    assert abs(statistics.stdev(gaps) / statistics.mean(gaps) - 1) < 0.05


def campaign(**over) -> dict:
    c = {"outages": 6, "kinds": ["nic-tor", "tor"], "hold_s": 3.0, "settle_s": 1.0, "start_s": 2.0}
    return {"name": "c", "topology": {"name": "hpn"}, "workload": {"collective": {"op": "allreduce", "size": "1GB"}},
            "campaign": {**c, **over}, "seed": 3}


def test_a_campaign_plays_its_outages_one_at_a_time():
    exp = from_dict(campaign())
    events = expand(exp, HPN)
    assert events == sorted(campaign_events(exp, HPN), key=lambda e: (e.t, e.up))
    downs = [e for e in events if not e.up]
    assert [e.t for e in downs] == [2.0 + 4.0 * k for k in range(6)] and [e.outage for e in downs] == list(range(6))
    for d in downs:
        up = next(e for e in events if e.up and e.outage == d.outage)
        assert up.t == d.t + 3.0 and up.links == d.links
        kind = d.cause.split()[1]
        assert kind in ("nic-tor", "tor") and (len(d.links) == 1) == (kind == "nic-tor")
    # a ToR's outage is all its links
    tor = next(d for d in downs if d.cause.split()[1] == "tor") if any(d.cause.split()[1] == "tor" for d in downs) \
        else None
    if tor is not None:
        assert set(tor.links) == {l.name for l in HPN.links_of(tor.cause.split()[2])}
    # the file's rates replace the defaults: only ToRs fail here
    only = from_dict(campaign(rates={"nic-tor": {"monthly": 0.0}}))
    assert {e.cause.split()[1] for e in expand(only, HPN)} == {"tor"}


@pytest.mark.parametrize("over, field", [
    ({"hold_s": 1.0}, "campaign.hold_s"),  # the watchdog (2 s by default) could never fire
    ({"rates": {"nic-tor": {"monthly": 0.0}, "tor": {"monthly": 0.0}}}, "campaign.rates"),
    ({"outages": 0}, "campaign.outages"),
    ({"kinds": ["spine"]}, "campaign.kinds.0"),
])
def test_a_campaign_that_cannot_work_is_refused(over, field):
    with pytest.raises(InputError) as e:
        from_dict(campaign(**over))
    assert e.value.field == field, e.value
    with pytest.raises(InputError) as e:
        from_dict({**campaign(), "failures": [{"at": 1.0, "link": "h0:nic0:p0"}]})
    assert e.value.field == "campaign"


def op(start: float, steps: list[float], job: str = "j") -> dict:
    return {"job": job, "start": start, "seconds": sum(steps), "step_seconds": steps}


def test_the_watchdog_fails_a_stalled_job_and_not_a_slow_one():
    """Ops of 0.5 s (ten 50 ms steps) back to back; outage 0 slows them to 0.8 s (every step still under the
    watchdog), outage 1 stalls one step 2.5 s (over the 2 s watchdog)."""
    r = cost.Resilience(watchdog_s=2.0, restart_s=600.0, checkpoint_s=3600.0)
    ops = [op(0.5 * k, [0.05] * 10) for k in range(10)]  # clear: 0 .. 5 s
    ops += [op(5.0 + 0.8 * k, [0.08] * 10) for k in range(4)]  # outage 0 held 5 .. 8 s
    ops += [op(8.2, [0.05] * 4 + [2.5] + [0.05] * 5)]  # outage 1 held 8.5 .. 11.5 s
    ops += [op(11.2 + 0.5 * k, [0.05] * 10) for k in range(4)]
    log = [{"t": 5.0, "up": False, "outage": 0, "links": ["a"], "time": 100.0},
           {"t": 8.0, "up": True, "outage": 0, "links": ["a"], "time": 103.0},
           {"t": 8.5, "up": False, "outage": 1, "links": ["b"], "time": 103.5},
           {"t": 11.5, "up": True, "outage": 1, "links": ["b"], "time": 106.5}]
    heard = [{"event": "link-down", "link": "a", "time": 100.012, "recompute_ms": 1.5}]
    outages = [Outage(1000.0, "nic-tor", "a", 7200.0), Outage(5000.0, "nic-tor", "b", 3600.0)]
    slow, stalled = cost.outcomes(outages, log, ops, heard, {"j": 16}, r, hold_s=3.0)
    assert slow.outcome == "slowdown" and slow.slowdown == pytest.approx(1.6) and slow.stall_s == 0.08
    assert slow.reroute_ms == pytest.approx(13.5) and stalled.reroute_ms is None
    assert slow.lost_gpu_s == pytest.approx(16 * 7200 * (1 - 1 / 1.6))  # its real repair time at the slowdown
    assert stalled.outcome == "restart" and stalled.stall_s == 2.5
    assert stalled.lost_gpu_s == pytest.approx(16 * (2.0 + 600.0 + 5000.0 % 3600.0))
    s = cost.summary([slow, stalled], months=2.0, gpus={"j": 16})["j"]
    assert s["restarts"] == 1 and s["slowdowns"] == 1 and s["survived"] == 0.5 and s["interruptions_per_month"] == 0.5
    lost = slow.lost_gpu_s + stalled.lost_gpu_s
    assert s["lost_gpu_hours"] == pytest.approx(lost / 3600, abs=1e-3)
    assert s["goodput"] == pytest.approx(1 - lost / (16 * 2 * MONTH_S), abs=1e-6)


def test_a_rate_is_a_monthly_probability():
    r = Rate(0.5, 60.0)
    assert math.isclose(1 - math.exp(-r.per_second * MONTH_S), 0.5)


def test_the_pod_picture_counts_what_a_job_uses_and_charges_what_was_measured():
    from testbed.campaign.pod import Measured, Pod, measured_from, pod_picture, year

    dual, single = Pod(), Pod(dual_tor=False)
    assert dual.components(1024) == {"nic-tor": 2048, "tor": 16, "agg": 0, "tor-agg": 0}
    assert single.components(1024)["nic-tor"] == 1024 and single.components(1024)["tor"] == 8
    assert dual.components(15_360) == {"nic-tor": 30_720, "tor": 240, "agg": 120, "tor-agg": 14_400}
    r = cost.Resilience(watchdog_s=2.0, restart_s=600.0, checkpoint_s=3600.0)
    # single-ToR: every NIC-ToR link outage a restart; 1,024 links of 0.057% a month: 7.0 a year
    restart = {"nic-tor": Measured(10, 10, ())}
    y = year(1024, single, DEFAULT_RATES, restart, r, trials=4000, seed=1, slice_aggs_per_plane=2)
    expect = 1024 * DEFAULT_RATES["nic-tor"].per_second * 12 * MONTH_S
    assert abs(statistics.mean(y.interruptions) - expect) < 5 * math.sqrt(expect / 4000), (y.stats(), expect)
    per = 1024 * (2.0 + 600.0 + 1800.0) / 3600  # GPU-hours a restart costs on average
    assert y.stats()["lost_gpu_hours"]["mean"] == pytest.approx(expect * per, rel=0.05)
    # dual-ToR: the same outages slow the job 1.6x for their repair time instead
    slowed = {"nic-tor": Measured(10, 0, (1.6,) * 10)}
    d = year(1024, dual, DEFAULT_RATES, slowed, r, trials=2000, seed=1, slice_aggs_per_plane=2).stats()
    assert d["interruptions"]["mean"] == 0 and 0 < d["lost_gpu_hours"]["mean"] and 0.99 < d["goodput"] < 1
    # from a campaign's outcomes; kinds it never met are left out, and said to be
    m = measured_from([{"kind": "tor", "outcome": "restart", "slowdown": None},
                       {"kind": "tor", "outcome": "slowdown", "slowdown": 1.5},
                       {"kind": "tor", "outcome": "none", "slowdown": 1.01}])
    assert m == {"tor": Measured(3, 1, (1.5, 1.0))}
    pic = pod_picture(dual, DEFAULT_RATES, m, r, sizes=(1024,), trials=200)
    assert pic["left_out"] == ["nic-tor", "agg", "tor-agg"] and pic["jobs"][0]["gpus"] == 1024


def test_a_job_still_stalled_from_the_outage_before_is_confounded():
    """One op stuck from 1.2 s to 9 s spans outages 0 (1-3 s) and 1 (5-7 s): the first is a restart, the second
    cannot be told apart from it and is left out of the counts."""
    r = cost.Resilience(watchdog_s=2.0, restart_s=600.0, checkpoint_s=3600.0)
    ops = [op(0.0, [0.1] * 4), op(0.4, [0.1] * 8 + [7.8] + [0.1] * 2), op(9.1, [0.1] * 4)]
    log = [{"t": 1.0, "up": False, "outage": 0, "links": ["a"], "time": 1.0},
           {"t": 3.0, "up": True, "outage": 0, "links": ["a"], "time": 3.0},
           {"t": 5.0, "up": False, "outage": 1, "links": ["b"], "time": 5.0},
           {"t": 7.0, "up": True, "outage": 1, "links": ["b"], "time": 7.0}]
    outages = [Outage(10.0, "nic-tor", "a", 60.0), Outage(20.0, "nic-tor", "b", 60.0)]
    first, second = cost.outcomes(outages, log, ops, [], {"j": 8}, r, hold_s=2.0)
    assert first.outcome == "restart" and first.stall_s == pytest.approx(7.8)
    assert second.outcome == "confounded" and second.lost_gpu_s == 0
    s = cost.summary([first, second], months=1.0, gpus={"j": 8})["j"]
    assert s["restarts"] == 1 and s["confounded"] == 1 and s["survived"] == 0.0


def test_a_slowdown_counts_the_stalled_op_and_not_where_the_ops_begin():
    """Ops of 0.5 s; the outage (held 5 .. 8 s) stalls the op in flight 1.5 s, then the ops run at full speed
    again, the last begun just before the repair. The job got 3.25 ops done in 3 s where it does 6 clear: a
    slowdown, though every op begun during the outage took its clear time."""
    r = cost.Resilience(watchdog_s=2.0, restart_s=600.0, checkpoint_s=3600.0)
    ops = [op(0.5 * k - 0.1, [0.05] * 10) for k in range(1, 10)] + [op(4.9, [0.05] * 9 + [1.5])]
    ops += [op(6.85 + 0.5 * k, [0.05] * 10) for k in range(8)]
    log = [{"t": 5.0, "up": False, "outage": 0, "links": ["a"], "time": 100.0},
           {"t": 8.0, "up": True, "outage": 0, "links": ["a"], "time": 103.0}]
    (o,) = cost.outcomes([Outage(1000.0, "nic-tor", "a", 7200.0)], log, ops, [], {"j": 8}, r, hold_s=3.0)
    done = 1.85 / 1.95 + 1 + 1 + 0.15 / 0.5
    assert o.outcome == "slowdown" and o.stall_s == 1.5 and o.slowdown == pytest.approx(6 / done, abs=1e-4)
