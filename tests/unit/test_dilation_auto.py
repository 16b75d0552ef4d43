"""dilation auto: the per-op floor, the dilation it asks for, the wall-time cap, and what is cached."""

from __future__ import annotations

import json

import pytest

from testbed.experiment.jobs import resolve_auto
from testbed.experiment.spec import from_dict
from testbed.qos import scale as sc
from testbed.qos.scale import Floor, OpTime, choose_dilation
from topos import build
from topos.errors import InputError
from traffic.timebase import MAX_DILATION

FLOOR = Floor(0.010, 0.001)  # 11 ms for one step, 24 ms for an 8-rank ring's 14


@pytest.mark.parametrize("x,up,down", [(0.5, 1, 1), (1.1, 1.2, 1), (52.2, 60, 50), (857, 1000, 800),
                                       (3000, 3000, 3000), (99_999, 100_000, 80_000)])
def test_dilations_are_rounded_to_readable_values_with_fine_steps(x, up, down):
    assert sc.nice_ceil(x, sc.FINE) == up and sc.nice_floor(x, sc.FINE) == down


def test_the_smallest_op_sets_the_dilation_and_the_choice_says_why():
    ops = [OpTime("allreduce of 2 GB", 0.5, 14), OpTime("allreduce of 16 MB", 0.0092, 14)]
    c = choose_dilation(ops, virtual_s=1.0, floor=FLOOR)
    # 24 ms / (5% of 9.2 ms) = 52.2: rounded up to 60; 1 s of the fabric then takes 60 s
    assert (c.dilation, round(c.needed, 1), c.worst.label, c.bound, c.wall_s) == (60, 52.2, "allreduce of 16 MB",
                                                                                  0, 60)
    assert c.why().startswith("dilation auto = 60: the smallest op (allreduce of 16 MB, 14 steps, ideal 9,200.0 us) "
                              "needs 52x for the emulator's 24.0 ms per op to be 5% of it")
    assert "1 s of the fabric's time will take 60 s or more of wall time" in c.why()
    # a one-step op of the same ideal time waits for the floor once: 11 ms, 24x, rounded up to 25
    assert choose_dilation([OpTime("sendrecv", 0.0092, 1)], 1.0, FLOOR).dilation == 25


def test_a_wall_time_cap_lowers_the_dilation_and_says_which_ops_stay_latency_bound():
    ops = [OpTime("big", 0.5, 14), OpTime("small", 0.0092, 14), OpTime("small", 0.0092, 14)]
    c = choose_dilation(ops, virtual_s=1.0, floor=FLOOR, max_wall_s=30)
    assert (c.dilation, c.bound, c.ops) == (30, 2, 3)
    assert "capped at 30 s of wall time" in c.why() and "2 of 3 ops or iterations stay latency-bound" in c.why()
    # the default cap is 10 minutes; an op no dilation can help is held at the largest one
    tiny = choose_dilation([OpTime("tiny", 1e-9, 1)], virtual_s=1e-9, floor=FLOOR)
    assert tiny.dilation == MAX_DILATION and tiny.bound == 1
    long = choose_dilation([OpTime("small", 0.0092, 14)], virtual_s=100.0, floor=FLOOR)
    assert long.dilation == 6 and long.wall_s <= sc.DEFAULT_MAX_WALL_S and long.bound == 1
    with pytest.raises(ValueError, match="nothing to go by"):
        choose_dilation([OpTime("empty", 0.0, 1)], 0.0, FLOOR)


def test_the_floor_is_cached_beside_the_budget_and_each_keeps_the_other(tmp_path):
    path = tmp_path / "calibration.json"
    assert sc.load_floor(path) == Floor(*sc.DEFAULT_FLOOR_S) and "not calibrated" in sc.load_floor(path).source()
    sc.save_budget({"budget_bps": 1.6e8, "points": []}, path, hosts=8)
    sc.save_budget({"floor": {"base_s": 0.02, "per_step_s": 0.002}}, path, hosts=8)  # calibrate --only floor
    assert sc.load_budget(path).bps == 1.6e8 and sc.load_floor(path) == Floor(0.02, 0.002, True, 8)
    sc.save_budget({"budget_bps": 1.8e8, "points": []}, path, hosts=8)  # calibrate --only budget
    assert sc.load_floor(path, hosts=64) == Floor(0.02, 0.002, True, 8) and sc.load_budget(path).bps == 1.8e8
    assert "calibrate --hosts 64" in sc.load_floor(path, hosts=64).source(64)
    data = json.loads(path.read_text())
    data[sc.machine_key()]["by_hosts"]["8"]["floor"] = {"base_s": -1, "per_step_s": "x"}  # edited by hand
    path.write_text(json.dumps(data))
    assert not sc.load_floor(path).calibrated


def test_resolve_chooses_the_dilation_then_the_scale_that_fits_at_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sc, "CACHE", tmp_path / "none.json")
    monkeypatch.setattr(sc, "DEFAULT_FLOOR_S", (FLOOR.base_s, FLOOR.per_step_s))
    exp = from_dict({"name": "x", "qos": {"scale": "auto"}, "time": {"dilation": "auto"},
                     "workload": {"collective": {"op": "allreduce", "size": "16MB", "ranks": "rail0", "iters": 3}}})
    resolved, auto = resolve_auto(exp, tmp_path, build("hpn"))
    # 8 ranks on both ports of NIC 0 (2 x 200 Gbit/s): 2 x 7/8 x 16 MB in 0.56 ms. Its floor at D = 6,000, where
    # the scale is 5 (3.2 Tbit/s over 128 Mbit/s x 6,000, on the coarse ladder): 10 ms + 14 steps x (1 ms + a
    # 1,514-byte frame across 4 hops at 200 Gbit/s / 30,000 = 7.27 ms) = 126 ms, 4,490x 5% of 0.56 ms -> 6,000.
    # (Without the frames 24 ms would ask for 857x -> 1,000, where the scale is 25 and a frame's 4 hops add
    # 6 ms to each of the 14 steps: a floor of 108 ms, not 24.)
    assert auto.time.worst.ideal_s == pytest.approx(1.75 * 16e6 * 8 / 400e9)
    assert resolved.time.dilation == auto.time.dilation == 6000
    assert auto.time.needed == pytest.approx((0.010 + 14 * (0.001 + 4 * 1514 * 8 * 30_000 / 200e9)) / (0.05 * 0.00056))
    assert auto.time.virtual_s == pytest.approx(3 * 0.00056) and auto.time.wall_s == pytest.approx(3 * 0.00056 * 6000)
    assert resolved.qos.scale == auto.scale.scale == 5
    assert len(auto.lines()) == 2 and auto.lines()[0].startswith("dilation auto = 6,000")
    assert "plus 7.3 ms per step for a full frame" in auto.lines()[0]


def test_time_is_checked_with_the_field_and_the_fix():
    base = {"name": "x", "workload": {"collective": {"op": "allreduce", "size": "16MB"}}}
    with pytest.raises(InputError, match="time.dilation"):
        from_dict({**base, "time": {"dilation": 0.5}})
    with pytest.raises(InputError, match="time.max_wall_s"):
        from_dict({**base, "time": {"dilation": 10, "max_wall_s": 60}})
    with pytest.raises(Exception, match="dilation"):
        from_dict({**base, "time": {"dilation": "fast"}})
    assert from_dict({**base, "time": {"dilation": "auto", "max_wall_s": 60}}).time.max_wall_s == 60


def test_the_floor_is_the_line_through_a_one_step_and_a_ring_probe(monkeypatch):
    from testbed.experiment import calibration as cal

    probes = {"sendrecv": {"op": "sendrecv", "steps": 1, "q_s": 0.006},
              "allreduce": {"op": "allreduce", "steps": 14, "q_s": 0.045}}
    monkeypatch.setattr(cal, "floor_point", lambda hosts, op: probes[op])
    f = cal.measure_floor(8)
    assert (f["base_s"], f["per_step_s"]) == (0.003, 0.003)  # 6 ms = 3 + 3 x 1; 45 ms = 3 + 3 x 14
    probes["sendrecv"]["q_s"] = 0.001  # a lucky one-step probe: the base is not made negative
    assert cal.measure_floor(8)["base_s"] == 0.0
    exp = cal.floor_experiment(8, "sendrecv")
    assert exp["workload"]["collective"]["ranks"] == "h0:0,h4:0"  # across the segments
    assert cal.floor_experiment(16, "allreduce")["workload"]["collective"]["ranks"].count(":0") == 16


def test_a_sweep_that_found_nothing_keeps_the_cached_budget_and_its_points(monkeypatch, tmp_path):
    from testbed.experiment import calibration as cal

    monkeypatch.setattr(sc, "CACHE", tmp_path / "calibration.json")
    sc.save_budget({"budget_bps": 1.6e8, "points": [{"scale": 20_000}]}, hosts=8)
    monkeypatch.setattr(cal, "sweep", lambda *a: {"budget_bps": None, "points": [{"scale": 80_000}]})
    monkeypatch.setattr(cal, "measure_floor", lambda hosts: {"base_s": 0.004, "per_step_s": 0.003})
    r = cal.calibrate(hosts=8)
    assert r["budget_bps"] is None and r["points"] == [{"scale": 80_000}]  # what was measured is shown
    saved = json.loads(sc.CACHE.read_text())[sc.machine_key()]["by_hosts"]["8"]
    assert saved["budget_bps"] == 1.6e8 and saved["points"] == [{"scale": 20_000}]
    assert sc.load_floor(hosts=8) == Floor(0.004, 0.003, True, 8)


def test_at_a_fixed_bytes_scale_frames_no_dilation_shrinks_are_said_not_chased():
    """The failover experiments' 1.4 s ring all-reduce (14 steps) at scale 1/25,000: a full frame across its 4
    hops is 6.1 ms of the fabric's time per step at every D (the frame's wall time grows with D as the rate
    falls), 6.1% of the op. auto used to climb to the cap for it (60-100x); now it takes what shrinks the rest
    of the floor and says the op stays latency-bound and why. With the scale following D the frames' wall
    time stays put and D = 2 makes the whole floor 5%."""
    op = OpTime("allreduce/ring of 20 GB", 1.4, 14)
    fixed = choose_dilation([op], 1.4, Floor(0.005, 0.003), frame_s=lambda d: 0.0061 * d)
    assert (fixed.dilation, fixed.bound, fixed.by_frames) == (1, 1, 1)
    assert "1 of 1 ops or iterations stay latency-bound at any dilation" in fixed.why()
    assert "lower qos.scale, or make it auto" in fixed.why() and "capped" not in fixed.why()
    follows = choose_dilation([op], 1.4, Floor(0.005, 0.003), frame_s=lambda d: 0.0061)
    assert (follows.dilation, follows.bound, follows.by_frames) == (2, 0, 0)
