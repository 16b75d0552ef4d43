"""A PFC deadlock formed by failures and broken by the watchdog (experiments/pfc_deadlock.yaml, --quick): two
failed links make the routes between two leaves bounce through the other two, the lossless traffic closes the
cyclic buffer dependency the run predicted, and the PFC agent's samples see it closed (testbed/experiment/
deadlocks.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

EXPERIMENT = Path(__file__).resolve().parents[2] / "experiments" / "pfc_deadlock.yaml"


@pytest.fixture(scope="module")
def runs(quick_results) -> dict[str, dict]:
    r, cwd = quick_results("pfc_deadlock")
    assert r.returncode == 0, r.stderr[-2000:]
    (out,) = [p for p in (cwd / "results").iterdir() if "-pfc_deadlock-quick-" in p.name]
    return {run["variant"]: run for run in json.loads((out / "results.json").read_text())["runs"]} | {
        "summary": (out / "summary.md").read_text()}


def _cycle_ports(run: dict) -> set[str]:
    """The switch ports of the cycles the run predicted, as the watchdog names queues (without the priority)."""
    from controllers.deadlock import Queue
    from testbed.experiment.deadlocks import queue_ports
    from testbed.experiment.spec import load

    topo = load(EXPERIMENT).topology.build()
    hops = {hop for state in run["pfc"]["buffer_cycles"] for cycle in state["cycles"] for hop in cycle.split(" -> ")}
    return {port for hop in hops for port in queue_ports(topo, Queue(*hop.split("->")))}


@pytest.mark.slow
def test_without_the_watchdog_the_predicted_cycle_closes_and_holds_until_the_job_halts(runs):
    run = runs["deadlock"]
    (state,) = run["pfc"]["buffer_cycles"]
    assert state["t"] == 0.0 and state["count"] >= 1 and len(state["down"]) == 2
    assert run["halted"] is not None and not run["ops"], run["halted"]  # not one op ended: held from the start
    held = [d for d in run["pfc"]["deadlocks"] if d["to_end"]]
    assert held and held[0]["cycle"] in state["cycles"], run["pfc"]["deadlocks"]
    assert held[0]["longest_s"] >= 3.0, held  # of the 5 s the step waited before the job was called halted
    assert run["drops"]["lossless"] == 0  # a deadlock loses nothing: it holds everything
    assert "still held when the traffic ended: a PFC deadlock" in runs["summary"]


@pytest.mark.slow
def test_the_watchdog_breaks_each_deadlock_and_the_jobs_finish(runs):
    run = runs["watchdog"]
    assert run["halted"] is None and run["ops"], run["halted"]
    assert all(o["bytes_delivered"] == o["bytes_expected"] for o in run["ops"])
    found = run["pfc"]["deadlocks"]
    assert found and not any(d["to_end"] for d in found), found  # it formed, and was broken every time
    # broken within the watchdog's detection (2 polls of 100 ms) and the restore that follows
    assert max(d["longest_s"] for d in found) < 1.0, found
    stormed = {q.split("/")[0] for q in run["pfc"]["watchdog"]["queues"]}
    assert stormed & _cycle_ports(run), (stormed, _cycle_ports(run))  # it found the stalled queues of the cycle
    assert "broken each time" in runs["summary"]


@pytest.mark.slow
def test_on_up_down_routes_the_same_traffic_has_no_cycle_to_close(runs):
    run = runs["healthy"]
    assert run["pfc"]["buffer_cycles"] == [] and run["pfc"]["deadlocks"] == []
    assert run["halted"] is None and all(o["bytes_delivered"] == o["bytes_expected"] for o in run["ops"])
    assert run["drops"]["lossless"] == 0
