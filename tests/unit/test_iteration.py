"""Iterations with compute: SimAI's order, the closed-form prediction, compute from YAML and plans."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from topos.errors import InputError
from traffic.iteration import Step, predict, transformer_order
from traffic.workload import Op, from_plan, load_simai, load_yaml, parse_duration

WORKLOADS = Path(__file__).resolve().parents[1] / "data"  # written by traffic/simai.py


def test_prediction_overlaps_weight_gradients_with_later_compute():
    a, b = Op("allreduce", 2, "dp"), Op("allreduce", 5, "dp")
    steps = [Step(1.0, a), Step(2.0, None), Step(1.0, b, overlap=True), Step(3.0, None)]
    p = predict(steps, lambda op: float(op.size))  # a takes 2 s, b 5 s
    # gpu: 1, a until 3, compute to 5, to 6, b runs 6..11 while the gpu computes to 9
    assert p.seconds == pytest.approx(11.0) and p.compute_s == pytest.approx(7.0)
    assert p.exposed_comm_s == pytest.approx(4.0) and p.gpu_utilization == pytest.approx(7 / 11)
    blocking = predict([Step(s.compute_s, s.op) for s in steps], lambda op: float(op.size))
    assert blocking.seconds == pytest.approx(14.0)  # the same steps, b blocking: 6 + 5 + 3


def test_transformer_order_is_simais_fwd_in_bckwd():
    rows = [(f"l{i}", (1.0, f"f{i}"), (2.0, f"i{i}"), (3.0, f"w{i}")) for i in range(3)]
    steps = transformer_order(rows)
    assert [s.op for s in steps] == ["f0", "f1", "f2", "i2", "w2", "i1", "w1", "i0", "w0"]
    assert [s.overlap for s in steps] == [False] * 3 + [False, True] * 3


def _rows(path: Path) -> list[list[str]]:
    return [l.split() for l in path.read_text().splitlines()[2:] if l.strip()]


@pytest.mark.parametrize("name", ["simai_tp4_dp4_16g", "simai_moe_tp2_pp2_ep4_32g", "simai_allreduce_8g",
                                  "simai_tp8_dp8_64g", "simai_dp16_two_layers"])
def test_simai_rows_keep_their_compute(name):
    path = WORKLOADS / f"{name}.txt"
    w = load_simai(path)
    rows = _rows(path)
    want = sum(int(r[c]) for r in rows for c in (2, 5, 8) if int(r[c]) > 1) * 1e-9
    assert w.compute_s == pytest.approx(want)
    assert len(w.iteration) == 3 * len(rows)
    assert [s.layer for s in w.iteration[:len(rows)]] == [r[0] for r in rows]  # forward in file order
    assert all(s.overlap == (s.phase == "wg") for s in w.iteration)
    comm = Counter((s.op.op, s.op.size, s.op.group) for s in w.iteration if s.op is not None)
    assert comm == Counter((o.op, o.size, o.group) for o in w.ops)  # the same communication, reordered
    scaled = w.scaled(1000)
    assert scaled.compute_s == pytest.approx(w.compute_s)  # compute stays real time
    assert sum(s.op.size for s in scaled.iteration if s.op) == pytest.approx(
        sum(max(1, int(s.op.size / 1000)) for s in w.iteration if s.op))


def test_compute_columns_of_one_are_no_compute():
    # TP 4: 6 layers x 4 halves x 12 ms forward, as much again for input and weight gradients, + the last row
    assert load_simai(WORKLOADS / "simai_tp4_dp4_16g.txt").compute_s == pytest.approx(
        (6 * 4 * 3 + 1 + 3) * 0.012)
    assert load_simai(WORKLOADS / "simai_tp8_dp8_64g.txt").compute_s == 0.0  # its compute columns are all 1


def test_yaml_compute_and_overlap(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("ops:\n"
                 "  - {op: allreduce, size: 1MB, group: dp, compute: 5ms, repeat: 2}\n"
                 "  - {compute: 20ms}\n"
                 "  - {op: allgather, size: 2MB, group: dp, compute: 0.01, overlap: true}\n")
    w = load_yaml(f)
    assert [(round(s.compute_s, 6), s.op.op if s.op else None, s.overlap) for s in w.iteration] == [
        (0.005, "allreduce", False), (0.0, "allreduce", False), (0.02, None, False), (0.01, "allgather", True)]
    assert w.compute_s == pytest.approx(0.035) and [o.repeat for o in w.ops] == [2, 1]


@pytest.mark.parametrize("value", ["5 minutes", -1, "1e3ms", True, "7200s", float("inf")])
def test_bad_compute_times(value):
    with pytest.raises(InputError):
        parse_duration(value)


def test_plan_compute_from_tflops():
    w = from_plan(tp=8, pp=2, dp=4, ep=2, tflops=150)
    steps = Counter(s.op.label for s in w.iteration if s.op)
    assert steps == Counter(o.label for o in w.ops for _ in range(o.repeat))
    per_layer_fwd = 2 * 7e9 / 32 * 4096 / (8 * 2) / 150e12
    assert w.compute_s == pytest.approx(16 * 3 * per_layer_fwd)  # 16 layers per stage: fwd + ig + wg
    assert from_plan(tp=8, pp=1, dp=8).compute_s == 0.0
    with pytest.raises(InputError):
        from_plan(tp=8, pp=1, dp=8, tflops=-1)
