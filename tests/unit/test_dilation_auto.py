"""dilation auto: the per-op floor, the dilation it asks for, the wall-time cap, and what is cached."""

from __future__ import annotations

import json

import pytest

from testbed.experiment.jobs import resolve_auto
from testbed.experiment.spec import from_dict
from testbed.qos import calibrated as cal
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


def test_the_pfc_reaction_is_cached_beside_the_others_and_the_headroom_covers_twice_its_longest(tmp_path):
    path = tmp_path / "calibration.json"
    default = sc.load_reaction(path)
    assert (default.max_s, default.calibrated) == (sc.DEFAULT_REACTION_MAX_S, False)
    assert "not calibrated" in default.why() and default.window_s == 2 * default.max_s
    cal.save_budget({"budget_bps": 1.6e8, "points": []}, path, hosts=8)
    cal.save_budget({"reaction": {"max_s": 0.0012, "p99_s": 0.0008}}, path, hosts=8)  # calibrate --only reaction
    cal.save_budget({"reaction": {"max_s": 0.004, "p99_s": 0.002}}, path, hosts=64)
    assert sc.load_budget(path).bps == 1.6e8
    assert sc.load_reaction(path, hosts=8) == sc.Reaction(0.0012, 0.0008, True, 8)
    assert sc.load_reaction(path, hosts=128).window_s == pytest.approx(2 * 0.004 * sc.growth(64, 128))
    cal.save_budget({"reaction": {"max_s": -1}}, path, hosts=8)  # edited into nonsense: left out
    assert sc.load_reaction(path, hosts=8).at_hosts == 64


def test_figures_measured_on_a_smaller_fabric_grow_with_the_switch_ports(tmp_path):
    """The per-step floor and the PFC headroom's window grow by the HPNs' switch ports; the budget does not."""
    path = tmp_path / "calibration.json"
    assert sc.growth(None, 8) == sc.growth(8, 4) == sc.growth(64, 64) == 1.0
    assert sc.growth(None, 64) == pytest.approx(512 / 96) and sc.growth(8, 60) == sc.growth(8, 64)
    g = sc.growth(8, 64)
    assert sc.load_budget(path, hosts=64).bps == sc.DEFAULT_BUDGET_BPS
    assert sc.load_floor(path, hosts=64).per_step_s == pytest.approx(sc.DEFAULT_FLOOR_S[1] * g)
    cal.save_budget({"reaction": {"max_s": 0.001, "needed_s": 0.0015}}, path, hosts=8)
    assert sc.load_reaction(path, hosts=8).window_s == pytest.approx(0.003)  # 2 x the longer: the queues' intake
    big = sc.load_reaction(path, hosts=64)
    assert big.window_s == pytest.approx(0.003 * g) and "x 5.33 for this fabric's switch ports" in big.why(64)
    cal.save_budget({"reaction": {"max_s": 0.002}}, path, hosts=64)  # measured on it: taken as it is
    assert sc.load_reaction(path, hosts=64).window_s == pytest.approx(0.004)


def test_the_floor_is_cached_beside_the_budget_and_each_keeps_the_other(tmp_path):
    path = tmp_path / "calibration.json"
    assert sc.load_floor(path) == Floor(*sc.DEFAULT_FLOOR_S) and "not calibrated" in sc.load_floor(path).source()
    cal.save_budget({"budget_bps": 1.6e8, "points": []}, path, hosts=8)
    cal.save_budget({"floor": {"base_s": 0.02, "per_step_s": 0.002}}, path, hosts=8)  # calibrate --only floor
    assert sc.load_budget(path).bps == 1.6e8 and sc.load_floor(path) == Floor(0.02, 0.002, True, 8)
    cal.save_budget({"budget_bps": 1.8e8, "points": []}, path, hosts=8)  # calibrate --only budget
    g = sc.growth(8, 64)  # a bigger fabric than the probe: the per-step floor grows with the switch ports
    assert sc.load_floor(path, hosts=64) == Floor(0.02, 0.002 * g, True, 8, grown=g)
    assert sc.load_budget(path).bps == 1.8e8
    cal.save_budget({"floor": {"base_s": 0.02, "per_step_s": 0.002, "frame_s": 0.001}}, path, hosts=8)
    assert sc.load_floor(path).frame_s == 0.001
    assert "plus 1.0 ms per step of full frames" in sc.load_floor(path).source()
    assert "calibrate --hosts 64" in sc.load_floor(path, hosts=64).source(64)
    data = json.loads(path.read_text())
    data[cal.machine_key()]["by_hosts"]["8"]["floor"] = {"base_s": -1, "per_step_s": "x"}  # edited by hand
    path.write_text(json.dumps(data))
    assert not sc.load_floor(path).calibrated


def test_resolve_chooses_the_dilation_then_the_scale_that_fits_at_it(tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "CACHE", tmp_path / "none.json")
    monkeypatch.setattr(sc, "DEFAULT_FLOOR_S", (FLOOR.base_s, FLOOR.per_step_s))
    exp = from_dict({"name": "x", "qos": {"scale": "auto"}, "time": {"dilation": "auto"},
                     "workload": {"collective": {"op": "allreduce", "size": "16MB", "ranks": "rail0", "iters": 3}}})
    resolved, auto = resolve_auto(exp, tmp_path, build("hpn"))
    # 8 ranks on both ports of NIC 0 (2 x 200 Gbit/s): 2 x 7/8 x 16 MB in 0.56 ms; its floor 10 ms + 14 steps x
    # 1 ms = 24 ms asks for 857x -> 1,000, where the scale is 25 (3.2 Tbit/s over 128 Mbit/s x 1,000)
    assert auto.time.worst.ideal_s == pytest.approx(1.75 * 16e6 * 8 / 400e9)
    assert resolved.time.dilation == auto.time.dilation == 1000
    assert auto.time.needed == pytest.approx(0.024 / (0.05 * 0.00056))
    assert auto.time.virtual_s == pytest.approx(3 * 0.00056) and auto.time.wall_s == pytest.approx(3 * 0.00056 * 1000)
    assert resolved.qos.scale == auto.scale.scale == 25
    assert len(auto.lines()) == 2 and auto.lines()[0].startswith("dilation auto = 1,000")


def test_time_is_checked_with_the_field_and_the_fix():
    base = {"name": "x", "workload": {"collective": {"op": "allreduce", "size": "16MB"}}}
    with pytest.raises(InputError, match="time.dilation"):
        from_dict({**base, "time": {"dilation": 0.5}})
    with pytest.raises(InputError, match="time.max_wall_s"):
        from_dict({**base, "time": {"dilation": 10, "max_wall_s": 60}})
    with pytest.raises(Exception, match="dilation"):
        from_dict({**base, "time": {"dilation": "fast"}})
    assert from_dict({**base, "time": {"dilation": "auto", "max_wall_s": 60}}).time.max_wall_s == 60


def test_the_floor_is_the_line_through_a_one_step_and_a_ring_probe(monkeypatch, tmp_path):
    from testbed.experiment import calibration

    monkeypatch.setattr(cal, "CACHE", tmp_path / "none.json")  # the default budget
    probes = {("sendrecv", False): {"op": "sendrecv", "steps": 1, "q_s": 0.006},
              ("allreduce", False): {"op": "allreduce", "steps": 14, "q_s": 0.045},
              ("allreduce", True): {"op": "allreduce", "steps": 14, "q_s": 0.030}}
    monkeypatch.setattr(calibration, "floor_point", lambda hosts, op, frames=False: probes[op, frames])
    f = calibration.measure_floor(8)
    assert (f["base_s"], f["per_step_s"]) == (0.003, 0.003)  # 6 ms = 3 + 3 x 1; 45 ms = 3 + 3 x 14
    assert f["frame_s"] == 0.0  # full frames added less beyond their ideal than the line: nothing
    probes["allreduce", True]["q_s"] = 0.087  # 3 ms + 14 x (3 + 3) ms: each step's frames added 3 ms
    assert calibration.measure_floor(8)["frame_s"] == pytest.approx(0.003)
    probes["sendrecv", False]["q_s"] = 0.001  # a lucky one-step probe: the base is not made negative
    assert calibration.measure_floor(8)["base_s"] == 0.0
    exp = calibration.floor_experiment(8, "sendrecv")
    assert exp["workload"]["collective"]["ranks"] == "h0:0,h4:0"  # across the segments
    assert calibration.floor_experiment(16, "allreduce")["workload"]["collective"]["ranks"].count(":0") == 16
    # the frames probe runs at the rate runs use (scale auto with every host port sending: 6.4 Tbit/s over the
    # default 128 Mbit/s) with 4 full frames per connection and ring step
    full = calibration.floor_experiment(8, "allreduce", frames=True)
    assert full["qos"]["scale"] == 50_000 and full["channels"] == 2
    assert full["workload"]["collective"]["size"] == 4 * 1448 * 8 * 2 * 50_000
    # the probes measure the machine in wall time: undilated, whatever the default dilation is (auto would
    # dilate ops of next to no bytes and measure a floor of nothing)
    for probe in (exp, full, calibration.probe_experiment(20_000)):
        assert calibration.from_dict(probe).time.dilation == 1


def test_a_sweep_that_found_nothing_keeps_the_cached_budget_and_its_points(monkeypatch, tmp_path):
    from testbed.experiment import calibration

    monkeypatch.setattr(cal, "CACHE", tmp_path / "calibration.json")
    cal.save_budget({"budget_bps": 1.6e8, "points": [{"scale": 20_000}]}, hosts=8)
    monkeypatch.setattr(calibration, "sweep", lambda *a: {"budget_bps": None, "points": [{"scale": 80_000}]})
    monkeypatch.setattr(calibration, "measure_floor", lambda hosts: {"base_s": 0.004, "per_step_s": 0.003})
    monkeypatch.setattr(calibration, "measure_reaction", lambda hosts, **kw: {"max_s": 0.002, "p99_s": 0.001})
    r = calibration.calibrate(hosts=8)
    assert r["budget_bps"] is None and r["points"] == [{"scale": 80_000}]  # what was measured is shown
    saved = json.loads(cal.CACHE.read_text())[cal.machine_key()]["by_hosts"]["8"]
    assert saved["budget_bps"] == 1.6e8 and saved["points"] == [{"scale": 20_000}]
    assert sc.load_floor(hosts=8) == Floor(0.004, 0.003, True, 8)
    assert sc.load_reaction(hosts=8) == sc.Reaction(0.002, 0.001, True, 8)


def test_a_machine_without_kernel_events_calibrates_the_rest(monkeypatch, tmp_path):
    from testbed.experiment import calibration

    monkeypatch.setattr(cal, "CACHE", tmp_path / "calibration.json")
    monkeypatch.setattr(calibration, "measure_floor", lambda hosts: {"base_s": 0.004, "per_step_s": 0.003})

    def no_bpf(hosts, **kw):
        raise RuntimeError("the PFC reaction probe saw no reaction on kernel events (detect 'poll')")

    monkeypatch.setattr(calibration, "measure_reaction", no_bpf)
    r = calibration.calibrate(hosts=8, budget=False)
    assert "detect 'poll'" in r["reaction_error"] and "reaction" not in r
    assert sc.load_floor(hosts=8).calibrated and not sc.load_reaction(hosts=8).calibrated


def test_by_default_time_is_auto_and_a_bulk_op_of_a_small_fabric_runs_undilated(tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "CACHE", tmp_path / "none.json")
    exp = from_dict({"name": "x", "workload": {"collective": {"op": "allreduce", "size": "160GB", "ranks": "rail0"}}})
    resolved, auto = resolve_auto(exp, tmp_path, build("hpn"))
    assert resolved.time.dilation == auto.time.dilation == 1 and auto.time.bound == 0
    small = from_dict({**exp.model_dump(by_alias=True, exclude={"time"}),
                       "workload": {"collective": {"op": "allreduce", "size": "16MB", "ranks": "rail0"}}})
    assert resolve_auto(small, tmp_path, build("hpn"))[0].time.dilation > 100  # small ops: dilated by default


def test_a_workload_with_no_network_op_runs_undilated_by_default_and_is_refused_when_auto_is_asked(tmp_path):
    (tmp_path / "w.yaml").write_text("name: think\nops:\n  - {compute: 20ms}\n")
    base = {"name": "x", "workload": {"file": "w.yaml"}}
    resolved, auto = resolve_auto(from_dict(base), tmp_path, build("hpn"))
    assert resolved.time.dilation == 1 and auto.time is None
    with pytest.raises(InputError, match="has none") as exc:
        resolve_auto(from_dict({**base, "time": {"dilation": "auto"}}), tmp_path, build("hpn"))
    assert exc.value.field == "time.dilation"
