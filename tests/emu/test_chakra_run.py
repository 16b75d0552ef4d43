"""Chakra traces replayed on the emulated fabric (`workload: {chakra: PREFIX}`): a data-parallel iteration with
compute and overlapped gradient all-reduces, and a ring written out as sends and receives, with the bytes of the
closed forms, the iteration report and a verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.traces import dp_iteration, ring, write

HPNLAB = str(Path(sys.executable).parent / "hpnlab")
EXPERIMENT = """
name: chakra_replay
topology: {name: hpn}
routing: ecmp
qos: {scale: 10000}
workload: {chakra: traces/dp, iterations: 2}
variants:
  - {label: dp-iteration}
  - {label: p2p-ring, workload: {chakra: traces/ring, iterations: 1}}
"""


@pytest.mark.slow
def test_traces_replay_with_the_closed_forms_bytes_an_iteration_report_and_a_verdict(tmp_path, no_leftovers):
    (tmp_path / "traces").mkdir()
    write(tmp_path / "traces" / "dp", [dp_iteration()] * 4)  # 4 ranks: two hosts of the mini HPN's 2 GPUs
    write(tmp_path / "traces" / "ring", ring(4, 4 << 20))
    (tmp_path / "e.yaml").write_text(EXPERIMENT)
    r = subprocess.run([HPNLAB, "run", "e.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (out,) = list((tmp_path / "results").iterdir())
    runs = {run["variant"]: run for run in json.loads((out / "results.json").read_text())["runs"]}
    dp, p2p = runs["dp-iteration"], runs["p2p-ring"]
    assert all(o["bytes_delivered"] == o["bytes_expected"] == o["bytes_closed_form"] for run in runs.values()
               for o in run["ops"])
    assert [o["op"] for o in dp["ops"]] == ["allreduce"] * 4 and len(dp["iterations"]) == 2
    assert all(i["compute_s"] > 0 and i["predicted_s"] > 0 for i in dp["iterations"])
    # the ring: rank r's GPU sends to r+1's, across the two hosts only (GPU pairs inside a host go over NVLink)
    assert [o["op"] for o in p2p["ops"]] == ["sendrecv"] and p2p["ops"][0]["ranks"] == 4
    assert {run["fidelity"]["status"] for run in runs.values()} <= {"faithful", "not faithful", "unknown"}
    assert "chakra_replay" in (out / "summary.md").read_text()
