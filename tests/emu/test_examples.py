"""The scripts in examples/ run as a user would run them, and show what they say they show."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, *args: str, cwd: Path = ROOT) -> str:
    r = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=cwd, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_fail_a_port_keeps_every_pair_reachable(no_leftovers):
    out = run_example("fail_a_port.py")
    pairs = [tuple(map(int, m)) for m in re.findall(r"(\d+)/(\d+) replies", out)]
    assert pairs == [(112, 112), (112, 112)], out  # 8 hosts x 7 others x 2 NICs, before and after
    assert "link-down h5:nic0:p0" in out


@pytest.mark.slow
def test_replay_collective_delivers_the_closed_form(no_leftovers, cpu_window):
    out = run_example("replay_collective.py")
    got, want = (int(x.replace(",", "")) for x in re.search(r"bytes delivered ([\d,]+) of ([\d,]+)", out).groups())
    assert got == want == 8 * 2 * 7 * 1_000_000  # 8 ranks x 2(n-1)/n x 8 MB
    fraction = float(re.search(r"= ([\d.]+)% of ideal", out).group(1)) / 100
    cpu_window.rates_are_meaningful()
    assert fraction > 0.6, out


@pytest.mark.slow
def test_run_experiment_from_python_leaves_a_results_folder(no_leftovers, tmp_path):
    out = run_example("run_experiment.py", "--quick", cwd=tmp_path)
    folder = tmp_path / re.search(r"results: (\S+)", out).group(1)
    data = json.loads((folder / "results.json").read_text())
    assert [r["variant"] for r in data["runs"]] == ["precise", "ecmp"]
    for r in data["runs"]:
        assert [f["links"] for f in r["failures"]] == [["tor-p0-s0-r0-a:5-agg-p0-pl0-0:1"]]
        assert r["ops"] and all(o["bytes_delivered"] == o["bytes_expected"] for o in r["ops"])
    assert (folder / "spec.yaml").read_text().startswith("name: example")
