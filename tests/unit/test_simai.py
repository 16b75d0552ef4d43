"""The project's own SimAI files: traffic/simai.py writes them, load_simai reads them back as written."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traffic.simai import SHAPES, Model, Plan, transformer
from traffic.workload import load_simai

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_test_data_is_what_the_generator_writes(name):
    """tests/data/simai_*.txt are never edited by hand: `python -m traffic.simai tests/data` rewrites them."""
    assert (DATA / f"simai_{name}.txt").read_text() == SHAPES[name].text()


def test_every_simai_file_in_test_data_has_a_shape():
    assert {p.name for p in DATA.glob("simai_*.txt")} == {f"simai_{n}.txt" for n in SHAPES}


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2]), ep=st.sampled_from([1, 2, 4]),
       dp=st.integers(1, 8), layers=st.integers(2, 8), layer_ns=st.sampled_from([0, 1_000, 5_000_000]))
def test_any_plan_written_reads_back(tmp_path_factory, tp, pp, ep, dp, layers, layer_ns):
    plan = Plan(tp, tp * pp * dp, ep=ep, pp=pp)
    f = transformer(plan, Model(layers=layers, layer_ns=layer_ns)).write(tmp_path_factory.mktemp("w") / "w.txt")
    w = load_simai(f)
    assert w.plan == {"tp": tp, "ep": ep, "pp": pp, "ga": 1, "all_gpus": tp * pp * dp, "dp": dp}
    per_stage = layers // pp
    ops = Counter((o.op, o.group) for o in w.ops)
    assert ops[("alltoall", "ep")] == (4 * per_stage if ep > 1 else 0)
    halves = per_stage * (3 if ep > 1 else 4)  # attention column/row, MLP column/row or the expert MLP
    # each half all-gathers once (forward or input gradient) and reduce-scatters once, in TP only
    assert ops[("allgather", "tp")] == ops[("reducescatter", "tp")] == (halves if tp > 1 else 0)
    assert ops[("reducescatter", "dp")] == (2 if ep > 1 else 1)
    assert w.compute_s == pytest.approx((3 * halves + 4) * layer_ns * 1e-9 if layer_ns > 1 else 0.0)
