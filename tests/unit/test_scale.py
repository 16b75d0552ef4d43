"""scale auto: offered load, rounding, the budget cache, and the calibration probe's spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.experiment.calibration import probe_experiment
from testbed.experiment.jobs import jobs, resolve_auto
from testbed.experiment.spec import from_dict
from testbed.qos import calibrated as cal
from testbed.qos import scale as sc
from topos import build


def test_offered_load_counts_every_port_of_the_given_ranks():
    topo = build("hpn")  # 8 hosts x 2 NICs x 2 ports of 200G
    assert sc.offered_load(topo) == 8 * 2 * 2 * 200e9
    assert sc.offered_load(topo, [("h0", 0), ("h1", 0)]) == 2 * 2 * 200e9


@pytest.mark.parametrize("x,want", [(0.3, 1), (1, 1), (1.5, 2), (2.2, 2.5), (3, 5), (9.9, 10), (12_500, 20_000),
                                    (20_000, 20_000), (20_001, 25_000), (80_000, 100_000)])
def test_scales_are_rounded_up_to_readable_values(x, want):
    assert sc.nice_ceil(x) == want


def test_choice_fits_the_load_into_the_budget_and_says_why():
    c = sc.choose_scale(3.2e12, budget_bps=160e6)
    assert c.scale == 20_000 and c.offered_emulated_bps <= 160e6 * sc.SAFETY
    assert "1/20,000" in c.why() and "3.2 Tbit/s" in c.why()


def test_budget_cache_is_per_machine(tmp_path):
    path = tmp_path / "calibration.json"
    assert sc.load_budget(path) == sc.Budget(sc.DEFAULT_BUDGET_BPS, False)
    cal.save_budget({"budget_bps": 5e8}, path)
    assert sc.load_budget(path) == sc.Budget(5e8, True, 8)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({"another-machine/2cpu/6.1": data[cal.machine_key()]}))
    assert sc.load_budget(path).calibrated is False
    path.write_text("{not json")
    assert sc.load_budget(path).calibrated is False
    path.write_text(json.dumps({cal.machine_key(): {"budget_bps": 1.6e8, "points": []}}))  # saved before sizes
    assert sc.load_budget(path, hosts=64) == sc.Budget(1.6e8, True, 8)
    cal.save_budget({"budget_bps": 6e7}, path, hosts=32)  # the older record is kept whole, as the 8-host one
    assert json.loads(path.read_text())[cal.machine_key()]["by_hosts"]["8"] == {"budget_bps": 1.6e8, "points": []}


def test_a_fabric_uses_the_calibration_of_the_largest_probe_not_bigger_than_itself(tmp_path):
    path = tmp_path / "calibration.json"
    cal.save_budget({"budget_bps": 160e6}, path, hosts=8)
    cal.save_budget({"budget_bps": 60e6}, path, hosts=32)
    assert cal.calibrations(path) == {8: 160e6, 32: 60e6}
    assert [sc.load_budget(path, hosts=h).bps for h in (8, 16, 32, 64)] == [160e6, 160e6, 60e6, 60e6]
    cal.save_budget({"budget_bps": 180e6}, path, hosts=8)  # a new calibration replaces only its size
    assert cal.calibrations(path) == {8: 180e6, 32: 60e6}
    cal.save_budget({"budget_bps": 70e6, "points": [{"scale": 1}]}, path, hosts=64)
    cal.save_budget({"budget_bps": 190e6}, path, hosts=8)
    assert json.loads(path.read_text())[cal.machine_key()]["by_hosts"]["64"]["points"] == [{"scale": 1}]
    only_big = tmp_path / "big.json"
    cal.save_budget({"budget_bps": 60e6}, only_big, hosts=32)
    assert sc.load_budget(only_big, hosts=8) == sc.Budget(60e6, True, 32)  # the conservative one
    assert "calibrate --hosts 64" in sc.Budget(160e6, True, 8).source(64)
    assert "--hosts" not in sc.Budget(60e6, True, 32).source(32)


def test_scale_auto_uses_the_ranks_of_the_workload(tmp_path, monkeypatch):
    monkeypatch.setattr(cal, "CACHE", tmp_path / "none.json")
    topo = build("hpn")
    exp = from_dict({"name": "x", "qos": {"scale": "auto"},
                     "workload": {"collective": {"op": "allreduce", "size": "160GB", "ranks": "rail0"}}})
    resolved, auto = resolve_auto(exp, tmp_path, topo)
    choice = auto.scale
    assert resolved.time.dilation == 1  # dilation auto, for bulk ops of this small fabric: the scale is D = 1's
    assert choice.offered_real_bps == 8 * 2 * 200e9  # rail 0 only: every rank sends and receives at NIC rate
    assert resolved.qos.scale == choice.scale == sc.nice_ceil(3.2e12 / (sc.DEFAULT_BUDGET_BPS * sc.SAFETY))
    (o, sched), *_ = jobs(resolved, tmp_path, topo)[0].items
    assert o.size == int(160e9 / resolved.qos.scale)
    fixed, given = resolve_auto(from_dict({**exp.model_dump(by_alias=True), "qos": {"scale": 20_000}}), tmp_path,
                                topo)
    assert given.scale is None and fixed.qos.scale == 20_000


def test_calibration_probe_loads_every_host_both_ways_for_the_asked_seconds():
    exp = from_dict(probe_experiment(20_000, seconds=6.0))
    topo = build("hpn")
    js = jobs(exp, Path("."), topo)
    senders = [f.src for j in js for _o, s in j.items for step in s.steps for f in step]
    assert sorted(h for h, _n in senders) == sorted(h.name for h in topo.hosts)  # each host sends once
    flow = js[0].items[0][1].steps[0][0]
    assert flow.bytes == int(2 * 200e9 / 20_000 * 6.0 / 8)  # both ports of NIC 0 for 6 s


def test_wire_fidelity_is_the_busy_median_over_configured():
    from testbed.experiment.calibration import wire_fidelity

    # idle, ramp-up, 4 busy samples, ramp-down, idle: the median of the busy core
    tx = [0, 20e6, 158e6, 160e6, 157e6, 159e6, 60e6, 0]
    assert abs(wire_fidelity(tx, 160e6) - 158.5e6 / 160e6) < 1e-9
    assert wire_fidelity([0, 0], 160e6) == 0.0


def test_offered_load_of_an_incast_is_its_receiver():
    from testbed.experiment.jobs import offered

    topo = build("hpn")
    exp = from_dict({"name": "x", "qos": {"scale": 1},
                     "jobs": [{"name": "in", "collective": {"op": "incast", "size": "1GB", "ranks": "rail0"}},
                              {"name": "pp", "collective": {"op": "sendrecv", "size": "1GB", "ranks": "h0:1,h4:1"}}]})
    assert offered(jobs(exp, Path("."), topo), topo) == 2 * 200e9 + 2 * 200e9  # h0's NIC 0 in, h4's NIC 1 in


def test_calibration_probe_grows_with_the_asked_size_and_refuses_others():
    from topos.errors import InputError

    exp = from_dict(probe_experiment(160_000, seconds=6.0, hosts=64))
    topo = exp.topology.build()
    assert len(topo.hosts) == 64
    senders = [f.src[0] for j in jobs(exp, Path("."), topo) for _o, s in j.items for step in s.steps for f in step]
    assert sorted(senders) == sorted(h.name for h in topo.hosts)
    with pytest.raises(InputError, match="hosts"):
        probe_experiment(20_000, hosts=12)


def test_calibration_measures_again_a_point_spoilt_only_by_steal(monkeypatch, tmp_path):
    from testbed.experiment import calibration as cal

    def point(scale, faithful, reasons, steal=0.0, rate=1.0):
        return {"scale": scale, "offered_bps": 1e9 / scale, "rate_fidelity": rate, "faithful": faithful,
                "reasons": reasons, "fidelity": {"steal_mean": steal}}

    answers = {10: [point(10, False, ["steal"], steal=0.2), point(10, True, [])],
               5: [point(5, False, ["CPU-bound"])]}
    calls = []

    def measure(scale, seconds, hosts, transport):
        calls.append(scale)
        return answers[scale].pop(0)

    monkeypatch.setattr(cal, "measure_point", measure)
    r = cal.calibrate(hosts=8, scales=[10, 5], save=False, floor=False, reaction=False)
    assert calls == [10, 10, 5] and r["budget_bps"] == 1e9 / 10


def test_roce_has_a_budget_of_its_own_and_without_it_takes_tcps(monkeypatch, tmp_path):
    """The roce transport's NICs are the agents' Python: its budget is calibrated over roce and kept beside TCP's;
    where it was not, a run over roce takes TCP's figure, and says so."""
    from testbed.experiment import calibration

    path = tmp_path / "calibration.json"
    monkeypatch.setattr(cal, "CACHE", path)
    assert sc.load_budget(path, transport="roce") == sc.Budget(sc.DEFAULT_BUDGET_BPS, False, tcps=True)
    cal.save_budget({"budget_bps": 2e8}, path)
    tcp_only = sc.load_budget(path, transport="roce")
    assert tcp_only == sc.Budget(2e8, True, 8, tcps=True)
    assert "TCP's (roce not calibrated here: run 'hpnlab calibrate --transport roce')" in tcp_only.source(8)
    assert "TCP's" not in sc.load_budget(path).source(8)
    seen = []

    def measure(scale, seconds, hosts, transport):
        seen.append(transport)
        return {"scale": scale, "offered_bps": 1e9 / scale, "rate_fidelity": 1.0, "faithful": scale > 5,
                "reasons": [] if scale > 5 else ["CPU-bound"], "fidelity": {"steal_mean": 0.0}}

    monkeypatch.setattr(calibration, "measure_point", measure)
    r = calibration.calibrate(hosts=8, scales=[10, 5], floor=False, reaction=False, transport="roce")
    assert seen == ["roce", "roce"] and r["budget_bps"] == 1e8
    saved = json.loads(path.read_text())[cal.machine_key()]["by_hosts"]["8"]
    assert saved["budget_bps"] == 2e8 and saved["roce_budget_bps"] == 1e8 and len(saved["roce_points"]) == 2
    assert sc.load_budget(path, transport="roce") == sc.Budget(1e8, True, 8)  # its own now, whole
    assert sc.load_budget(path).bps == 2e8 == sc.load_budget(path, transport="rdma").bps  # TCP's as it was
    assert calibration.probe_experiment(20_000, transport="roce")["transport"] == "roce"


def test_bigger_probes_sweep_the_same_loads_per_host_from_light_to_heavy():
    from testbed.experiment.calibration import SCALES, scales_for

    assert scales_for(8) == list(SCALES)
    assert scales_for(64) == [640_000, 320_000, 240_000, 200_000, 160_000, 120_000, 80_000, 40_000]
