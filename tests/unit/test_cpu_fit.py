"""How `auto` splits the load between the bytes scale and time dilation (testbed/qos/cpu.py): steps keep their
frames, the budget is held by the host ports sending at once, and D takes the rest within the wall-time cap."""

from __future__ import annotations

import pytest

from testbed.experiment.jobs import offered, resolve_auto, step_bytes
from testbed.experiment.planning import plan
from testbed.experiment.spec import from_dict
from testbed.qos import calibrated as cal
from testbed.qos import cpu
from testbed.qos import scale as sc
from traffic.simai import Model, Plan, transformer

FLOOR = sc.Floor(0.005, 0.003)


def test_the_scale_keeps_the_frames_of_the_ops_that_carry_the_traffic():
    # 8 frames of 1,448 B are 11,584 B: 50 MB a step allows 4,316 -> 2,500; the 1 KB op (0.1% of the longest
    # op's time) cannot keep any frames at any scale and does not count
    assert cpu.max_scale([(1.0, 50_000_000), (0.001, 1_000)]) == 2_500
    assert cpu.max_scale([(1.0, 50_000_000), (0.5, 1_000_000)]) == 50  # a carrier of 1 MB a step: 86 -> 50
    assert cpu.max_scale([(0.0, 0)]) is None


def _choice(d: float, busy_s: float, cap: float = 600.0) -> sc.DilationChoice:
    op = sc.OpTime("op", 0.01, 14)
    return sc.DilationChoice(d, d, 1.0, FLOOR, op, 0, 1, cap, busy_s=busy_s)


def test_dilation_takes_what_the_budget_needs_within_the_wall_time_cap():
    budget = sc.Budget(64e6, False)
    raised = cpu.fit(_choice(9, 0.05), 51.2e12, budget, 2_500)  # 51.2 Tbit/s at 1/2,500: 20 Gbit/s, 320x
    assert raised.dilation == 400 and "needs 320x to fit 64 Mbit/s" in raised.why()
    assert raised.why().startswith("dilation auto = 400: 51.2 Tbit/s offered at scale 1/2,500")
    assert cpu.fit(_choice(500, 0.05), 51.2e12, budget, 2_500).dilation == 500  # already enough: unchanged
    capped = cpu.fit(_choice(9, 5.0), 51.2e12, budget, 2_500)  # 5 s of busy fabric time: 600 s allow 120
    assert capped.dilation == 120 and "capped by the wall time" in capped.why()


def test_the_budget_is_held_by_the_host_ports_sending_at_once(tmp_path):
    none = tmp_path / "none.json"
    assert sc.load_budget(none, ports=32) == sc.Budget(sc.DEFAULT_BUDGET_BPS, False)  # 16 G / 32 = 500 M: not held
    held = sc.load_budget(none, ports=256)
    assert held.bps == pytest.approx(sc.PORT_LOAD_BPS / 256) and held.ports == 256
    assert "held to 16 Gbit/s over its 256 sending host ports" in held.source()


def test_a_128_gpu_job_on_8_rail_servers_gets_steps_of_frames_and_a_load_its_ports_allow(tmp_path, monkeypatch):
    """The acceptance run's plan (16 hosts x 8 rails x 8 GPUs, TP 8, PP 2), worked out without running it: the
    data-parallel ops keep 8 frames a step and connection, D carries the rest, the wall time stays short."""
    monkeypatch.setattr(cal, "CACHE", tmp_path / "none.json")
    transformer(Plan(8, 128, pp=2, pp_comm=8 << 20), Model(layers=40, hidden=5120, params=13_000_000_000,
                                                            layer_ns=2_000_000)).write(tmp_path / "g128.txt")
    exp = from_dict({"name": "g128", "routing": "precise", "workload": {"simai": "g128.txt"},
                     "topology": {"name": "hpn", "params": {"hosts_per_segment": 8, "rails": 8, "gpus_per_host": 8}}})
    topo = exp.topology.build()
    (p,) = plan(exp, tmp_path, reduced=False, cluster=None)
    real, _ = resolve_auto(exp, tmp_path, topo)
    assert p.exp.qos.scale == real.qos.scale
    emulated = offered(p.jobs, topo) / p.exp.qos.scale / p.exp.time.dilation
    assert emulated <= sc.PORT_LOAD_BPS / 256  # 256 host ports send at once
    carriers = [b for t, b in step_bytes(p.jobs, topo, 2) if b]
    assert min(carriers) >= cpu.MIN_STEP_FRAMES * cpu.MSS  # at the emulated size: 8 full frames a step
    assert p.auto.time.wall_s < 60 and p.auto.time.cpu
