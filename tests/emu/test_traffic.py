"""Collectives over the emulated fabric: exact bytes, busbw against the physical bound, SimAI replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.net.network import Network
from testbed.qos.spec import QosSpec
from topos import build
from traffic import closed_form
from traffic.collectives import build_schedule
from traffic.replay import Replayer, op_schedule
from traffic.transports.tcp import TcpTransport
from traffic.workload import load_simai

WORKLOADS = Path(__file__).resolve().parents[1] / "data"  # written by traffic/simai.py
SCALE = 20_000  # 200G host ports at 10 Mbit/s: 16 connections stay well within 2 cores


@pytest.fixture
def fabric(no_leftovers):
    def start(mode="precise", topo="hpn"):
        net = Network(build(topo), routing="controller", mode=mode, qos=QosSpec(scale=SCALE))
        net.__enter__()
        tr = TcpTransport(net, tos=26 << 2)
        tr.start()
        opened.append((net, tr))
        return net, tr

    opened = []
    yield start
    for net, tr in opened:
        tr.stop()
        net.stop()


@pytest.mark.timing
def test_ring_allreduce_precise_on_hpn(fabric, cpu_window):
    net, tr = fabric("precise")
    ranks = [(h.name, 0) for h in net.topo.hosts]
    sched = build_schedule("allreduce", ranks, 4_000_000)
    rp = Replayer(net, tr, channels=2, routing="precise")
    rp.run(sched)  # warm-up: connections and windows, as nccl-tests does
    r = rp.run(sched)
    rp.close()
    assert r.bytes_delivered == r.bytes_expected == 2 * 7 * 4_000_000  # 2(n-1)/n of the buffer per rank
    assert len(r.step_seconds) == 14
    sent = {}
    for rec in rp.records[-len(rp.records) // 2:]:
        sent[rec.src] = sent.get(rec.src, 0) + rec.bytes
    assert set(sent.values()) == {2 * 7 * 4_000_000 // 8}
    # The physical bound is each rank's two 10 Mbit/s ports; bench/collectives_bench.py reports the number.
    assert r.ideal_busbw_bps == 20e6
    # Every connection used the source port it was declared (and pinned) with.
    tuples = {tuple(rec.sent["five_tuple"]) for rec in rp.records}
    assert all(t[2] >= 20000 for t in tuples) and len(tuples) == 16
    cpu_window.rates_are_meaningful()
    assert r.fraction_of_ideal >= 0.75, f"busbw {r.busbw_bps / 1e6:.1f} Mbit/s = {r.fraction_of_ideal:.0%}"


def test_simai_micro_workload_replays_end_to_end(fabric):
    net, tr = fabric("ecmp")
    w = load_simai(WORKLOADS / "simai_allreduce_8g.txt").scaled(2_000)
    hosts = [h.name for h in net.topo.hosts]
    rp = Replayer(net, tr, channels=2)
    for op in w.ops:
        sched = op_schedule(op, hosts, rails=2, plan=w.plan)  # TP 8 over 2-GPU hosts: one group on 4 hosts
        assert (sched.groups, sched.gpus, len({h for h, _nic in sched.ranks})) == (1, 8, 4)
        r = rp.run(sched)
        # a ring of 8 GPUs whose 4 hops between servers each carry 2 x 7/8 of the buffer (NVLink the rest)
        assert r.bytes_delivered == r.bytes_expected == closed_form.of(sched) == 4 * 2 * 7 * op.size // 8


TWO_LAYERS = Path(__file__).resolve().parents[1] / "data" / "simai_dp16_two_layers.txt"  # 1 s of compute per rank


@pytest.mark.timing
def test_simai_iteration_with_compute_overlaps_weight_gradients(fabric, cpu_window):
    """1 s of compute per rank (forward 2 x 0.3 s, backward 4 x 0.1 s) and two data-parallel all-reduces of the
    weight gradients that overlap the backward pass: the iteration takes what SimAI's order predicts."""
    from traffic.iteration import predict
    from traffic.metrics import busbw_factor

    net, tr = fabric("precise")
    w = load_simai(TWO_LAYERS).scaled(SCALE)  # 10 GB real: 500 kB emulated per all-reduce
    hosts = [h.name for h in net.topo.hosts]
    steps = [(s, None if s.op is None else op_schedule(s.op, hosts, rails=2, plan=w.plan)) for s in w.iteration]
    rp = Replayer(net, tr, channels=2, routing="precise")
    rp.run(next(sched for _s, sched in steps if sched is not None))  # warm-up: connections and windows
    it = rp.run_iteration(steps)
    rp.close()
    assert it.compute_s == pytest.approx(1.0) and len(it.ops) == 2
    # one ring of 16 GPUs: 8 hops between servers, each 2 x 15/16 of the buffer (NVLink the other 8)
    assert it.bytes_ok and all(o.bytes_expected == 8 * 2 * 15 * 500_000 // 16 for o in it.ops)

    def ideal(op):  # the closed form: a hop of a 16-GPU ring all-reduce at a NIC's two 10 Mbit/s ports
        return busbw_factor("allreduce", 16) * op.size * 8 / 20e6

    want = predict(w.iteration, ideal)
    blocking = it.compute_s + sum(ideal(s.op) for s in w.iteration if s.op)
    # the same order with each op's measured time: what the replay's overlap and ordering alone give
    seconds = iter([o.seconds for o in it.ops])
    replayed = predict(w.iteration, lambda _op: next(seconds))
    print(f"iteration {it.seconds:.3f} s; from the ops' own times {replayed.seconds:.3f} s; at the ideal rate "
          f"{want.seconds:.3f} s (all blocking {blocking:.3f} s); ops {[round(o.seconds, 3) for o in it.ops]} s "
          f"(ideal {ideal(w.iteration[-1].op):.3f} s), issued at {[round(t, 3) for t in it.issued_s]} s")
    assert want.seconds == pytest.approx(1.55, rel=0.01)  # the second all-reduce waits for the first
    # layer 1's all-reduce goes after the forward pass and its own backward (0.8 s); layer 0's after its
    # backward (1.0 s) and after layer 1's all-reduce (one communicator): never before 0.8 + its ideal time
    first, second = it.issued_s
    assert first == pytest.approx(0.8, abs=0.02) and second >= 0.8 + ideal(w.iteration[-1].op) * 0.95
    assert it.seconds >= second + ideal(w.iteration[-1].op) * 0.95  # no op beats its closed form
    cpu_window.rates_are_meaningful()
    # the iteration is its ops in SimAI's order: within 10% of that order over their own times (the rest is
    # the agents' report lag between ops); how close the ops come to the closed form is the fabric's part
    assert it.seconds <= replayed.seconds * 1.1, "the iteration is longer than its ops in SimAI's order"
    # layer 1's all-reduce runs under layer 0's 0.2 s of backward compute (less the report lag)
    assert it.seconds <= it.compute_s + sum(o.seconds for o in it.ops) - 0.05, "no overlap with the backward pass"


def test_traffic_run_prints_what_nccl_tests_prints(no_leftovers, hpnlab):
    """`--format nccl --sizes MIN:MAX:xF`: a row per size in nccl-tests' columns and the average line its users
    grep for, read back with their regexes; real sizes, every element delivered."""
    import re

    r = hpnlab("traffic", "run", "--format", "nccl", "--sizes", "4GB:16GB:x2", "--iters", "2", "--scale", "20000",
               "--ranks", "h0:0,h1:0,h4:0", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    row = re.compile(r"^\s*(\d+)\s+(\d+)\s+float\s+sum\s+-1\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+")
    rows = [m for m in (row.match(line) for line in r.stdout.splitlines()) if m]
    assert [int(m.group(1)) for m in rows] == [4_000_000_000, 8_000_000_000, 16_000_000_000]
    assert all(m.group(6) == "0" for m in rows)
    busbw = [float(m.group(5)) for m in rows]
    avg = float(re.search(r"Avg bus bandwidth\s*:\s*([\d.]+)", r.stdout).group(1))
    assert avg == pytest.approx(sum(busbw) / 3, rel=1e-3)
    # two 200G ports per rank (one channel each): busbw can approach 50 GB/s, never pass it
    assert all(0 < b <= 50.0 * 1.02 for b in busbw), busbw


def test_traffic_run_command_goes_through_the_runner(no_leftovers, hpnlab):
    """`hpnlab traffic run` is a one-job experiment: exact bytes per op, the lossless class on the wire."""
    r = hpnlab("traffic", "run", "--size", "40GB", "--iters", "2", "--scale", "20000", "--ranks", "h0:0,h1:0,h4:0",
               timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "allreduce ring, 3 ranks, 40GB (emulated 2,000,000 bytes)" in " ".join(r.stdout.split())
    rows = [line for line in r.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == 2 and all(line.rstrip(" │").endswith("yes") for line in rows), r.stdout


def test_traffic_run_refuses_bad_ranks_before_starting(no_leftovers, hpnlab):
    r = hpnlab("traffic", "run", "--ranks", "h0:0,h99:0")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "ranks='h99:0': no such host NIC" in r.stderr


@pytest.mark.timing
def test_fidelity_verdict_sees_a_cpu_hog(no_leftovers, hpnlab):
    """Busy loops on every core: the run must be marked unfaithful, and say why."""
    import os
    import subprocess
    import sys

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        r = hpnlab("traffic", "run", "--size", "40GB", "--iters", "1", "--scale", "20000", timeout=300)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert r.returncode == 0, r.stderr[-2000:]
    assert "fidelity: NOT faithful: CPU-bound: idle fell to" in " ".join(r.stdout.split()), r.stdout[-1500:]


@pytest.mark.timing
def test_fidelity_verdict_of_a_quiet_run(no_leftovers, hpnlab):
    import pytest

    # 160 GB: 5.6 s at the ideal rate, so that the emulator's own time per op, the floor of an 8-rank ring's 14
    # steps (~47 ms), is well under 5% of it at D = 1.
    r = hpnlab("traffic", "run", "--size", "160GB", "--iters", "1", "--scale", "40000", timeout=300)
    out = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stderr[-2000:]
    if "NOT faithful: the hypervisor took" in out and "CPU-bound" not in out:
        pytest.skip("the hypervisor's steal made this quiet run unfaithful: " + out[out.index("fidelity:"):][:200])
    assert "fidelity: faithful (CPU idle >=" in out, out[-1500:]


@pytest.mark.slow
def test_traffic_run_simai_takes_any_path_and_replays_training_iterations(tmp_path, no_leftovers, hpnlab):
    """`--simai FILE` with an absolute path outside the working folder (there is no experiment file to be inside
    of), replayed as a training job: compute included, `--iters` iterations, each beside its prediction."""
    import json
    import shutil

    f = tmp_path / "elsewhere" / "two_layers.txt"
    f.parent.mkdir()
    shutil.copy(TWO_LAYERS, f)
    r = hpnlab("traffic", "run", "--simai", str(f), "--iters", "2", "--scale", "20000", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(r.stdout)
    its = rec["iterations"]
    assert [i["iteration"] for i in its] == [0, 1] and all(i["bytes_ok"] for i in its)
    # the file's own compute, in real seconds (traffic/iteration.py: 1 s per rank over both layers' phases)
    assert all(i["compute_s"] == pytest.approx(1.0) for i in its)
    assert all(i["seconds"] >= i["compute_s"] and 0 < i["gpu_utilization"] <= 1 for i in its)
    assert its[0]["predicted_s"] > 1.0 and 0 < its[0]["predicted_gpu_utilization"] < 1
    assert len(rec["ops"]) == 2 * 2  # two layers' all-reduce, twice
    table = hpnlab("traffic", "run", "--simai", str(f), "--scale", "20000", env={"COLUMNS": "220"}, timeout=300)
    assert table.returncode == 0, table.stderr[-2000:]
    assert "training iterations" in table.stdout and "GPU utilization" in table.stdout, table.stdout


def test_an_eight_rail_hpn_shapes_links_past_32_bits_and_runs(no_leftovers, hpnlab):
    """The default HPN with 8 rails at scale 4: 50 Gbit/s classes, above the 32-bit ratespec (a struct.error
    before), encoded with HTB's 64-bit attributes; an all-reduce over every host's NIC 0 delivers its bytes."""
    r = hpnlab("traffic", "run", "-p", "rails=8", "--scale", "4", "--size", "64MB", "--iters", "1", "--dilation", "1",
               "--format", "json", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    run = json.loads(r.stdout)  # the run's record
    assert run["scale"] == 4 and len(run["ops"]) == 1
    op = run["ops"][0]
    assert op["bytes_delivered"] == op["bytes_expected"] == op["bytes_closed_form"] > 0


TP4_FILE = """HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 4 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 8
1
layer0\t-1\t2000000\tALLREDUCE\t67108864\t2000000\tALLREDUCE\t67108864\t1000000\tALLREDUCE\t33554432\t100
"""


def test_tp_inside_a_server_waits_at_nvlink_and_only_dp_crosses_the_fabric(tmp_path, no_leftovers, hpnlab):
    """Two hosts of 4 H800 GPUs, TP 4 x DP 2: the TP all-reduces stay in their server and take their NVLink
    time as waits in the agents; the DP all-reduce is the only traffic on the fabric."""
    from topos.server import nvlink_of
    from traffic.nvlink import nvlink_seconds

    f = tmp_path / "tp4.txt"
    f.write_text(TP4_FILE)
    r = hpnlab("traffic", "run", "--simai", str(f), "-p", "hosts_per_segment=1", "-p", "gpus_per_host=4",
               "-p", "gpu=H800", "--iters", "1", "--json", timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = json.loads(r.stdout)
    (it,) = rec["iterations"]
    link = nvlink_of(build("hpn", gpu="H800").params)
    assert it["nvlink_s"] == pytest.approx(2 * nvlink_seconds("allreduce", 64 << 20, 4, link), rel=1e-4)
    assert it["compute_s"] == pytest.approx(0.005)
    assert it["seconds"] >= it["compute_s"] + it["nvlink_s"]  # the waits happened
    assert it["predicted_s"] >= it["compute_s"] + it["nvlink_s"] and it["bytes_ok"]
    (op,) = rec["ops"]  # the DP all-reduces: one per TP index (4), each GPU t of both hosts; 2 GPUs per NIC
    assert op["label"] == "allreduce/ring" and op["ranks"] == 8
    emulated = int((32 << 20) / rec["scale"])  # the buffer; a ring of two GPUs sends it once each way
    assert op["bytes_delivered"] == op["bytes_expected"] == op["bytes_closed_form"] == 4 * 2 * emulated
