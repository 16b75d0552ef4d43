"""Gray failures (pure parts): the spec's lossy/degrade/restore actions checked before anything starts, their
events, the loss rate's threshold, and the detector naming each gray link once from its counters."""

from __future__ import annotations

import pytest

from testbed.experiment.detector import Detector, delays
from testbed.experiment.failures import expand, host_links_down, host_links_down_in_any_rep
from testbed.experiment.spec import check_against, from_dict
from testbed.qos.loss import ONE, threshold
from topos import build
from topos.errors import InputError
from traffic.timebase import Clock

HPN = build("hpn")


def exp(*failures, **over) -> dict:
    return {"name": "g", "topology": {"name": "hpn"}, "workload": {"collective": {"op": "allreduce", "size": "1GB"}},
            "failures": list(failures), **over}


def test_gray_actions_become_events_on_the_link():
    e = from_dict(exp({"at": 1.0, "link": "h1:nic0:p0", "action": "lossy", "loss": 1e-4},
                      {"at": 2.0, "link": "h1:nic0:p0", "action": "degrade", "rate_gbps": 50},
                      {"at": 3.0, "link": "h1:nic0:p0", "action": "restore"}, qos={"pfc": {"enabled": False}}))
    check_against(e, HPN)
    lossy, slow, well = expand(e, HPN)
    assert lossy.gray == ("lossy", 1e-4) and lossy.up and lossy.links == (HPN.find_link("h1:nic0:p0").name,)
    assert slow.gray == ("degrade", 0.25) and well.gray == ("restore", 0.0)  # 50 of the host port's 200 Gbit/s


@pytest.mark.parametrize("failure, field", [
    ({"action": "lossy"}, "failures[].loss"),  # lossy needs its rate
    ({"action": "down", "loss": 0.1}, "failures[].loss"),  # and only lossy takes one
    ({"action": "degrade"}, "failures[].rate_gbps"),
    ({"action": "lossy", "loss": 1.5}, "failures.0.loss"),
    ({"action": "lossy", "loss": 0.1, "link": None, "node": "tor-p0-s0-r0-a"}, "failures[].node"),
])
def test_a_gray_failure_missing_its_figure_is_refused(failure, field):
    with pytest.raises(InputError) as e:
        from_dict(exp({"at": 1.0, "link": "h1:nic0:p0", **failure}))
    assert e.value.field == field, e.value


def test_a_degrade_is_checked_against_the_link():
    faster = from_dict(exp({"at": 1.0, "link": "h1:nic0:p0", "action": "degrade", "rate_gbps": 400},
                           qos={"pfc": {"enabled": False}}))
    with pytest.raises(InputError, match="a degraded one is slower") as e:
        check_against(faster, HPN)
    assert e.value.field == "failures[0].rate_gbps"
    # with PFC on too: a pause changes the lossless queue's gate, never the port's rate (testbed/qos/shaper.py)
    check_against(from_dict(exp({"at": 1.0, "link": "h1:nic0:p0", "action": "degrade", "rate_gbps": 50})), HPN)


def test_a_pause_storm_is_a_host_links_with_pfc_on_and_the_detector_leaves_it_to_the_watchdog():
    e = from_dict(exp({"at": 1.0, "link": "h1:nic0:p0", "action": "pfc_storm"},
                      {"at": 2.0, "link": "h1:nic0:p0", "action": "restore"}))
    check_against(e, HPN)
    storm, well = expand(e, HPN)
    assert storm.gray == ("pfc_storm", 0.0) and storm.up and well.gray == ("restore", 0.0)
    assert host_links_down(expand(e, HPN), HPN) == []  # the link stays up: no transport is refused for it
    fired = [{"t": 1.0, "links": list(storm.links), "gray": list(storm.gray), "up": True, "cause": storm.cause}]
    assert delays([], fired) == []  # nothing for the counters' detector to name
    with pytest.raises(InputError, match="needs PFC") as off:
        from_dict(exp({"at": 1.0, "link": "h1:nic0:p0", "action": "pfc_storm"}, qos={"pfc": {"enabled": False}}))
    assert off.value.field == "failures[0].action"
    uplink = next(l.name for l in HPN.links if l.kind == "tor-agg")
    with pytest.raises(InputError, match="from a host NIC") as switch:
        check_against(from_dict(exp({"at": 1.0, "link": uplink, "action": "pfc_storm"})), HPN)
    assert switch.value.field == "failures[0].link"


def test_a_loss_rate_is_a_threshold_on_a_random_32_bit_number():
    assert threshold(0) == 0 and threshold(1e-4) == round(1e-4 * ONE) and threshold(1) == ONE - 1
    with pytest.raises(ValueError):
        threshold(1.5)


def test_the_detector_names_each_gray_link_once_from_its_counters():
    clock = Clock()
    d = Detector(lambda: {}, clock)
    d.look({"a": {"errors": {"a_to_b": 0, "b_to_a": 0}, "frames": {"a_to_b": 10, "b_to_a": 10}}})
    assert d.found == []  # lossy, but nothing lost yet: nothing to see
    d.look({"a": {"errors": {"a_to_b": 1, "b_to_a": 0}}, "b": {"rate_fraction": 0.25}})
    d.look({"a": {"errors": {"a_to_b": 5, "b_to_a": 2}}, "b": {"rate_fraction": 0.25}})
    assert [(f["link"], f["kind"]) for f in d.found] == [("a", "lossy"), ("b", "degraded")]
    assert d.found[0]["errors"] == 1 and d.found[1]["rate_fraction"] == 0.25
    t = d.found[0]["t"]
    fired = [{"t": t - 0.5, "links": ["a"], "gray": ["lossy", 1e-4]}, {"t": t - 0.1, "links": ["b"],
             "gray": ["degrade", 0.25]}, {"t": t, "links": ["a"], "gray": ["restore", 0.0]},
             {"t": t, "links": ["c"], "gray": ["lossy", 1e-3]}]
    said = delays(d.found, fired)
    assert [(x["links"], x["named_after_s"]) for x in said] == [
        (["a"], pytest.approx(0.5, abs=1e-3)), (["b"], pytest.approx(d.found[1]["t"] - t + 0.1, abs=1e-3)),
        (["c"], None)]


class Tick:
    """A clock the test moves (the detector reads only now())."""

    def __init__(self):
        self.t = 0.0

    def now(self) -> float:
        return self.t


def test_a_link_is_named_flapping_after_five_flaps_within_ten_seconds():
    clock = Tick()
    d = Detector(lambda: {}, clock)
    d.look_carriers({"a": 4, "b": 0})  # what the ports counted before the run is not a flap
    for i in range(1, 10):
        clock.t = i * 0.1
        d.look_carriers({"a": 4 + i, "b": 2 if i > 3 else 0})  # a: a change a look; b: one failure and its repair
    assert d.found == []  # 9 changes: four and a half flaps
    clock.t = 1.0
    d.look_carriers({"a": 14, "b": 2})
    assert [(f["link"], f["kind"], f["carrier_changes"], f["t"]) for f in d.found] == [("a", "flapping", 10, 1.0)]
    slow = Detector(lambda: {}, clock)
    for i in range(12):  # a change every 1.1 s: never 10 within 10 s
        clock.t = 100 + i * 1.1
        slow.look_carriers({"a": i})
    assert slow.found == []
    fired = [{"t": 0.5, "links": ["a"], "cause": "flap a", "up": False, "flap": 0.1},
             {"t": 0.6, "links": ["a"], "cause": "flap a", "up": True, "flap": 0.1},
             {"t": 0.7, "links": ["a"], "cause": "flap a", "up": False, "flap": 0.1},
             {"t": 0.5, "links": ["c"], "cause": "flap c", "up": False, "flap": 0.2},
             {"t": 0.9, "links": ["c"], "cause": "down c", "up": False}]
    said = delays(d.found, fired)  # one entry per flapping link, from its first down; a plain down is none
    assert [(x["links"], x["failure"], x["value"], x["named_after_s"]) for x in said] == [
        (["a"], "flap", 0.1, pytest.approx(0.5, abs=1e-3)), (["c"], "flap", 0.2, None)]


def test_flap_events_carry_their_period():
    exp_ = from_dict(exp({"at": 1.0, "link": "h1:nic0:p0", "action": "flap", "period": 0.2, "count": 2}))
    events = expand(exp_, HPN)
    assert [(e.t, e.up, e.flap) for e in events] == [(1.0, False, 0.2), (1.2, True, 0.2), (1.4, False, 0.2),
                                                     (pytest.approx(1.6), True, 0.2)]


def test_the_host_links_a_schedule_takes_down():
    """What the rdma transport cannot ride through (traffic.transports.choose): host links going down, named,
    flapped or under a failed ToR; not a fabric link, not a gray one, not one coming up."""
    uplink = "tor-p0-s0-r0-a:5-agg-p0-pl0-0:1"
    e = from_dict(exp({"at": 1.0, "link": uplink, "action": "down"},
                      {"at": 1.5, "link": "h1:nic0:p0", "action": "lossy", "loss": 1e-4},
                      {"at": 2.0, "link": "h5:nic0:p0", "action": "flap", "period": 0.5, "count": 2},
                      {"at": 4.0, "link": uplink, "action": "up"}))
    assert host_links_down(expand(e, HPN), HPN) == ["h5:nic0:p0"]
    assert host_links_down(expand(from_dict(exp({"at": 1.0, "link": uplink})), HPN), HPN) == []
    tor = from_dict(exp({"at": 1.0, "node": "tor-p0-s0-r0-a"}))
    under = [lk.name for lk in HPN.links_of("tor-p0-s0-r0-a") if lk.kind == "host-tor"]
    assert under and host_links_down(expand(tor, HPN), HPN) == under


def test_every_repetition_of_a_campaign_gets_the_transport_its_failures_allow():
    """Each repetition draws its campaign with its own seed: with one outage a repetition, seed 2 and 3 hit
    fabric links only and seed 4 a host port. Chosen per repetition, auto gave the first two rdma and the third
    tcp, three runs that do not compare; the host ports of every repetition decide it, the same for all."""
    e = from_dict({"name": "g", "topology": {"name": "hpn"},
                   "workload": {"collective": {"op": "allreduce", "size": "1GB"}}, "seed": 2, "repetitions": 3,
                   "campaign": {"outages": 1, "kinds": ["nic-tor", "agg", "tor-agg"]}})
    reps = [e.repetition(r) for r in range(3)]
    assert [r.seed for r in reps] == [2, 3, 4]
    assert [host_links_down(expand(r, HPN), HPN) for r in reps] == [[], [], ["h4:nic1:p1"]]
    assert host_links_down_in_any_rep(e, HPN) == ["h4:nic1:p1"]  # what plan() chooses from, for every rep
    one = e.model_copy(update={"repetitions": 1})
    assert host_links_down_in_any_rep(one, HPN) == []  # rep 0 alone hits no host port: rdma stays possible
