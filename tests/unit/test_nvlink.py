"""NVLink in time (topos/server.py, traffic/nvlink.py): an op inside one server takes its time at the server's
NVLink, as a wait on the GPU, and never reaches the fabric."""

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.experiment.jobs import ideal_iteration_s, jobs
from testbed.experiment.spec import from_dict
from topos import build
from topos.errors import InputError
from topos.server import nvlink_of
from traffic import closed_form
from traffic.collectives import among_gpus
from traffic.iteration import Step, predict
from traffic.nvlink import nvlink_seconds
from traffic.simai_analytical import busbw_of
from traffic.workload import Op, fits_server, gpu_groups, load_simai

DATA = Path(__file__).parents[1] / "data"


def test_a_gpu_generation_sets_the_nvlink_bus_bandwidth_and_a_topology_may_override_it():
    assert nvlink_of(build("hpn").params).bps("allreduce") == pytest.approx(18 * 20.6 * 8e9)  # H100 by default
    h800 = nvlink_of(build("hpn", gpu="H800").params)
    assert (h800.gpu, h800.bps("alltoall"), h800.latency_s) == ("H800", pytest.approx(8 * 20.6 * 8e9), 8.4e-6)
    per_op = nvlink_of(build("fat_tree", gpu="A100", nvlink_gbps={"alltoall": 1000}, nvlink_latency_us=0).params)
    assert per_op.bps("alltoall") == 1e12 and per_op.bps("allgather") == pytest.approx(12 * 20.0 * 8e9)
    assert per_op.latency_s == 0
    assert nvlink_of(build("spine_leaf", nvlink_gbps=2400).params).bps("reducescatter") == 2.4e12
    for bad, field in (({"gpu": "V100"}, "gpu"), ({"nvlink_gbps": {"allreduce": -1}}, "nvlink_gbps"),
                       ({"nvlink_gbps": {"gather": 10}}, "nvlink_gbps")):
        with pytest.raises(InputError) as exc:
            build("hpn", **bad)
        assert exc.value.field.startswith(field), exc.value.line()


def test_an_op_inside_a_server_takes_its_bytes_over_its_bus_bandwidth_plus_a_fixed_cost():
    link = nvlink_of(build("hpn", gpu="H800").params)
    bps = 8 * 20.6 * 8e9
    assert nvlink_seconds("allreduce", 16 << 20, 8, link) == pytest.approx(8.4e-6 + 2 * 7 / 8 * (16 << 20) * 8 / bps)
    assert nvlink_seconds("allgather", 16 << 20, 4, link) == pytest.approx(8.4e-6 + 3 / 4 * (16 << 20) * 8 / bps)
    assert nvlink_seconds("allreduce", 16 << 20, 1, link) == 0.0  # a group of one GPU moves nothing


def test_nvlink_keeps_the_gpu_busy_before_the_network_and_is_not_exposed_fabric_time():
    steps = [Step(0.010, "tp", nvlink_s=0.002), Step(0.001, "dp", overlap=True), Step(0.004, None)]
    t = predict(steps, lambda op: {"tp": 0.0, "dp": 0.008}[op])
    # GPU: 10 ms compute + 2 ms NVLink, then 1 ms; the overlapping 8 ms on the network from 13 ms end at 21 ms
    assert (t.seconds, t.compute_s, t.nvlink_s) == (pytest.approx(0.021), pytest.approx(0.015), 0.002)
    assert t.exposed_comm_s == pytest.approx(0.021 - 0.015 - 0.002)


def tp4_job(tmp_path: Path, **params):
    shutil.copy(DATA / "simai_tp4_dp4_16g.txt", tmp_path / "w.txt")
    exp = from_dict({"name": "t", "workload": {"simai": "w.txt"}, "qos": {"scale": 1000}, "time": {"dilation": 1},
                     "topology": {"name": "hpn", "params": {"hosts_per_segment": 2, **params}}})
    topo = exp.topology.build()
    return jobs(exp, tmp_path, topo)[0], topo


def test_tp_that_fits_a_server_runs_on_nvlink_and_a_larger_one_on_the_fabric(tmp_path):
    real = load_simai(DATA / "simai_tp4_dp4_16g.txt")
    link = nvlink_of(build("hpn", gpu="H800").params)
    job, topo = tp4_job(tmp_path, gpus_per_host=4, gpu="H800")  # TP 4 inside a server of 4 GPUs
    tp = [(s, sched) for s, sched in job.iteration if s.op is not None and s.op.group == "tp"]
    assert tp and all(sched is None for _s, sched in tp)
    real_tp = [s.op for s in real.iteration if s.op is not None and s.op.group == "tp"]
    assert [s.nvlink_s for s, _ in tp] == pytest.approx([nvlink_seconds(o.op, o.size, 4, link) for o in real_tp])
    nvlink = sum(s.nvlink_s for s, _sched in job.iteration)
    assert len(tp) == len(real_tp) == 49 and nvlink == pytest.approx(sum(s.nvlink_s for s, _ in tp))
    assert ideal_iteration_s(job, topo, 2) >= job.compute_s + nvlink
    spread, _topo = tp4_job(tmp_path, hosts_per_segment=4)  # 8 hosts of 2 GPUs: TP 4 spans two servers
    assert all(sched is not None and s.nvlink_s == 0 for s, sched in spread.iteration if s.op is not None)


def test_a_group_of_gpus_puts_only_its_hops_between_servers_on_their_nics():
    """TP 4 on servers of 8: the DP group of TP index 1 is GPUs 1 and 5 of each server; the ring visits h0's 1
    and 5, then h1's 5 and 1, so both hops between servers join one rail (5, then 1) and the rest is NVLink."""
    s = among_gpus("allreduce", [("h0", 1), ("h0", 5), ("h1", 1), ("h1", 5)], 4000, None, lambda g: g)
    assert {(f.src, f.dst) for step in s.steps for f in step} == {(("h0", 5), ("h1", 5)), (("h1", 1), ("h0", 1))}
    assert (s.gpus, s.gpus_per_host, s.members) == (4, 2, 4) and len(s.steps) == 6  # 2 (n-1) steps of 1,000 B
    assert s.total_bytes == closed_form.of(s) == 2 * 6 * 1000
    shared = among_gpus("alltoall", [(h, g) for h in ("h0", "h1") for g in range(8)], 8000, None, lambda g: g // 4)
    assert {f.src[1] for step in shared.steps for f in step} == {0, 1}  # two NICs, four GPUs behind each
    assert shared.total_bytes == closed_form.of(shared) == 8 * 8000  # each block to the other server's 8 GPUs


@settings(max_examples=150, deadline=None)
@given(op=st.sampled_from(["allreduce", "allgather", "reducescatter", "alltoall"]), hosts=st.integers(2, 6),
       per_host=st.integers(1, 4), size=st.integers(1, 10_000_000))
def test_the_bytes_between_servers_match_their_closed_form(op, hosts, per_host, size):
    """closed_form.between_servers works the bytes out from the ring's chunks, apart from the flows."""
    gpus = [(f"h{h}", g) for h in range(hosts) for g in range(per_host)]
    s = among_gpus(op, gpus, size, None, lambda g: g)
    assert s.total_bytes == closed_form.of(s)
    assert all(f.src[0] != f.dst[0] for step in s.steps for f in step)


@settings(max_examples=200, deadline=None)
@given(tp=st.sampled_from([1, 2, 3, 4, 8, 16]), dp=st.sampled_from([1, 2, 4, 6, 8]), ep=st.sampled_from([1, 2, 4]),
       pp=st.sampled_from([1, 2, 3]), per_host=st.sampled_from([1, 2, 4, 6, 8]))
def test_a_group_fits_a_server_exactly_when_every_one_of_its_ranks_does(tp, dp, ep, pp, per_host):
    """fits_server, which the mapping, the GPU groups and SimAI-Analytical's busbw share, against the groups
    written out rank by rank in Megatron's order."""
    plan = {"tp": tp, "dp": dp, "ep": ep, "pp": pp}
    members = {"tp": [range(r, r + tp) for r in range(0, tp * dp * pp, tp)],
               "dp": [range(s * tp * dp + t, (s + 1) * tp * dp, tp) for s in range(pp) for t in range(tp)]}
    if dp % ep == 0:
        members["ep"] = [range(s * tp * dp + b * tp + t, s * tp * dp + (b + ep) * tp, tp)
                         for s in range(pp) for t in range(tp) for b in range(0, dp, ep)]
    in_server = busbw_of(nvlink_of(build("hpn").params), 400e9, per_host, plan).in_server
    for kind, groups in members.items():
        fits = all(len({r // per_host for r in g}) == 1 for g in groups)
        assert fits_server(kind, plan, per_host) == fits == (kind in in_server), (kind, plan, per_host)


def test_megatron_groups_fill_the_servers_in_order():
    plan = {"tp": 4, "dp": 4, "pp": 1, "ep": 2}
    hosts = ["h0", "h1"]
    dp = gpu_groups(Op("allreduce", 1, "dp"), hosts, plan, 8)
    assert dp[1] == [("h0", 1), ("h0", 5), ("h1", 1), ("h1", 5)] and len(dp) == 4
    assert gpu_groups(Op("alltoall", 1, "ep"), hosts, plan, 8) == []  # EP 2 at a stride of 4: in a server
    ep = gpu_groups(Op("alltoall", 1, "ep"), hosts, {**plan, "ep": 4}, 8)
    assert ep[0] == [("h0", 0), ("h0", 4), ("h1", 0), ("h1", 4)] and len(ep) == 4
    assert gpu_groups(Op("allreduce", 1, "tp"), hosts, plan, 8) == []  # inside the servers
    assert gpu_groups(Op("allreduce", 1, "dp"), ["h0"], plan, 8) is None  # 16 GPUs of a plan on 8: too few
    assert gpu_groups(Op("allreduce", 1, "dp"), hosts, {}, 8) is None  # no plan: one rank per NIC
