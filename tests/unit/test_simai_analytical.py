"""simai-analytical (traffic/simai_analytical.py): SimAI-Analytical's estimate, worked out by hand here."""

import shutil
from pathlib import Path

import pytest

from testbed.experiment.jobs import jobs
from testbed.experiment.spec import from_dict
from topos import build
from topos.server import nvlink_of
from traffic.iteration import Step
from traffic.metrics import busbw_factor
from traffic.simai_analytical import busbw_of, estimate
from traffic.workload import Op, Workload

DATA = Path(__file__).parents[1] / "data"
H100 = nvlink_of(build("hpn").params)
NIC = 8 * 400e9  # 8 NICs of 2 x 200G


def one_layer(tp: int, dp: int, pp: int = 1, ga: int = 1) -> Workload:
    fwd, ig = Op("allreduce", 64 << 20, "tp"), Op("allreduce", 64 << 20, "tp")
    wg = Op("allreduce", 1_000_000_000, "dp")
    steps = [Step(0.010, fwd, phase="fwd"), Step(0.010, ig, phase="ig"), Step(0.010, wg, True, "wg")]
    plan = {"tp": tp, "ep": 1, "pp": pp, "ga": ga, "all_gpus": tp * dp * pp, "dp": dp}
    return Workload("one", [fwd, ig, wg], plan, steps)


def at_nics(w: Workload, **kw):
    return estimate(w, busbw_of(H100, NIC, 8, w.plan), **kw)


def test_tp_at_nvlink_and_dp_at_the_nic_share_hidden_under_compute():
    est = at_nics(one_layer(tp=8, dp=4))
    tp = 2 * (2 * 7 / 8 * (64 << 20) * 8 / (18 * 20.6 * 8e9))
    dp = 2 * 3 / 4 * 1e9 * 8 / 400e9  # 30 ms at 400 Gbit/s per GPU
    assert est.comm_s == pytest.approx({"tp": tp, "dp": dp})
    assert est.compute_s == pytest.approx(0.030)
    # DP overlaps, but only 30 ms of compute can hide it: every other group is exposed
    assert est.exposed_s == pytest.approx(tp + dp - 0.030) and est.bubble_s == 0
    assert est.seconds == pytest.approx(0.030 + tp + dp - 0.030)


def test_a_group_whose_span_fits_a_server_runs_at_nvlink():
    inside = at_nics(one_layer(tp=2, dp=4))  # DP groups at a stride of 2 over 8 GPUs: one server
    assert inside.comm_s["dp"] == pytest.approx(2 * 3 / 4 * 1e9 * 8 / (18 * 20.6 * 8e9))
    assert at_nics(one_layer(tp=2, dp=8)).comm_s["dp"] == pytest.approx(2 * 7 / 8 * 1e9 * 8 / 400e9)


def test_tp_beyond_a_server_runs_at_the_network_and_pipelines_pay_a_bubble():
    wide = at_nics(one_layer(tp=16, dp=2))
    assert wide.comm_s["tp"] == pytest.approx(2 * (2 * 15 / 16 * (64 << 20) * 8 / 400e9))
    flat = at_nics(one_layer(tp=8, dp=4))
    piped = at_nics(one_layer(tp=8, dp=4, pp=2, ga=4))
    assert piped.bubble_s == pytest.approx(flat.seconds / 4) and piped.seconds == pytest.approx(flat.seconds * 1.25)
    small_dp = at_nics(one_layer(tp=8, dp=2))  # DP 20 ms, hidden; TP exposed
    assert small_dp.seconds == pytest.approx(0.030 + small_dp.comm_s["tp"])
    hidden = at_nics(one_layer(tp=8, dp=2), overlap={"tp": 1.0})
    assert hidden.seconds == pytest.approx(0.030)  # 30 ms of compute hides both


def test_a_simai_job_carries_its_estimate_on_the_topologys_servers(tmp_path):
    shutil.copy(DATA / "simai_tp4_dp4_16g.txt", tmp_path / "w.txt")
    exp = from_dict({"name": "t", "workload": {"simai": "w.txt"}, "qos": {"scale": 1000}, "time": {"dilation": 1},
                     "topology": {"name": "hpn", "params": {"hosts_per_segment": 2, "gpus_per_host": 4,
                                                            "gpu": "H800"}}})
    (job,) = jobs(exp, tmp_path, exp.topology.build())
    est = job.simai_analytical
    assert est is not None and est.compute_s == pytest.approx(job.compute_s)
    # the TP collectives of 16 MB among 4 GPUs at an H800's 164.8 GB/s, no fixed cost
    tp_ops = [s.op for s, _sched in job.iteration if s.op is not None and s.op.group == "tp"]
    assert len(tp_ops) == 49
    factors = sum(busbw_factor(o.op, 4) for o in tp_ops)
    assert est.comm_s["tp"] == pytest.approx(factors * 16777216 * 8 / (8 * 20.6 * 8e9))
    collective = from_dict({"name": "t", "workload": {"collective": {"op": "allreduce", "size": "1MB"}},
                           "qos": {"scale": 1000}})
    assert jobs(collective, tmp_path, collective.topology.build())[0].simai_analytical is None


def test_the_two_predictions_agree_where_they_model_alike_and_say_why_where_not():
    """bench/simai_estimate.py: both put TP 8 on NVLink and each DP group's 8 GPUs on one rail each, and agree;
    with TP 4 a DP group holds two GPUs per server, which both run at the NIC share (the communication agrees
    but for NVLink's fixed cost) and which ours exposes at the end of the iteration; a pipeline's bubble is
    SimAI's alone."""
    from bench.simai_estimate import compare

    exact = compare(DATA / "simai_tp8_dp8_64g.txt")
    assert exact["ratio"] == pytest.approx(1.0, abs=0.10) and exact["why"] == ""
    apart = compare(DATA / "simai_tp4_dp4_16g.txt")
    assert apart["ours_comm_s"]["dp"] == pytest.approx(apart["their_comm_s"]["dp"], rel=0.01)
    assert abs(apart["ratio"] - 1) > 0.10 and "overlap +" in apart["why"] and "DP" not in apart["why"]
    moe = compare(DATA / "simai_moe_tp2_pp2_ep4_32g.txt")
    assert moe["bubble_s"] > 0 and "pipeline bubble" in moe["why"]
