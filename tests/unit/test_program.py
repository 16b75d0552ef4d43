"""A training iteration as each rank's program (traffic/program.py), and an agent running one on loopback."""

from __future__ import annotations

import json
import time

import pytest

from traffic.collectives import build_schedule
from traffic.plan import pieces
from traffic.program import op_spans, rank_programs

RANKS = [("h0", 0), ("h1", 0), ("h2", 0)]


def test_each_rank_gets_its_sends_receipts_and_the_compute_before_each_of_its_ops():
    ring = pieces(build_schedule("allreduce", RANKS, 3000, "ring"), 2, "1")
    pair = pieces(build_schedule("sendrecv", RANKS[:2], 1000), 1, "2")
    progs = rank_programs([(0.5, False, None), (0.25, False, ring), (0.125, True, pair), (1.0, False, None)])
    assert set(progs) == set(RANKS)
    h0, h2 = progs[("h0", 0)], progs[("h2", 0)]
    assert [(s.op, s.compute_s, s.overlap) for s in h0.stages] == [(1, 0.75, False), (2, 0.125, True)]
    assert h0.tail_s == 1.0
    # h2 takes no part in the send/recv: its compute goes on to the end of the iteration
    assert [(s.op, s.compute_s) for s in h2.stages] == [(1, 0.75)] and h2.tail_s == 1.125
    for k, ps in ((1, ring), (2, pair)):  # every piece sent by its source and expected by its destination
        sent = [p.id for prog in progs.values() for s in prog.stages if s.op == k for p in s.sends]
        expected = [i for prog in progs.values() for s in prog.stages if s.op == k for i in s.expects]
        assert sorted(sent) == sorted(expected) == sorted(p.id for p in ps)
    assert all(p.src == ("h0", 0) for p in h0.stages[0].sends)


def test_an_op_spans_from_its_first_release_to_its_last_arrival():
    ps = pieces(build_schedule("sendrecv", RANKS[:2], 1000), 1, "7")
    spans = op_spans({("h0", 0): {3: 10.0}, ("h1", 0): {3: 9.5}}, {p.id: 12.0 for p in ps}, {3: ps})
    assert spans == {3: (9.5, 12.0)}


def run_program(p, prog: dict, lead: float = 0.1) -> tuple[float, dict, list[dict]]:
    """Load and start one rank's program; (its start, its `program` event, the flow events before that)."""
    p.stdin.write(json.dumps({"cmd": "program", "programs": [prog]}) + "\n")
    p.stdin.flush()
    assert json.loads(p.stdout.readline()) == {"event": "loaded", "ranks": 1}
    t0 = time.time() + lead
    p.stdin.write(json.dumps({"cmd": "go", "at": t0}) + "\n")
    p.stdin.flush()
    seen: list[dict] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        ev = json.loads(p.stdout.readline())
        if ev["event"] == "program":
            return t0, ev, seen
        seen += ev["events"] if ev["event"] == "batch" else [ev]
    pytest.fail("the program never ended")


def test_an_agent_chains_a_ranks_ops_with_the_compute_between_them(agent):
    """Compute 0.2 s, a blocking op (a flow to itself), compute 0.1 s, an overlapping op, 0.3 s of compute
    after it: each op released when its compute is done and the op before it is, the rank's end after the
    trailing compute; no word from outside between the ops."""
    p, port = agent

    def flow(i: str) -> dict:
        return {"id": i, "dst": "127.0.0.1", "port": port, "bytes": 200_000, "sport": 0, "tos": 0, "after": []}

    prog = {"rank": "h0:0", "tail": 0.3, "stages": [
        {"op": 0, "compute": 0.2, "overlap": False, "flows": [flow("a")], "expect": ["a"]},
        {"op": 1, "compute": 0.1, "overlap": True, "flows": [flow("b")], "expect": ["b"]}]}
    t0, ev, evs = run_program(p, prog)
    rel = {int(k): t for k, t in ev["released"].items()}
    acked = {e["id"]: e["end"] for e in evs if e["event"] == "sent"}
    assert t0 + 0.2 <= rel[0] < t0 + 0.2 + 0.05
    assert acked["a"] + 0.1 <= rel[1] < acked["a"] + 0.1 + 0.05  # compute after op 0's part was done
    assert ev["end"] == pytest.approx(acked["a"] + 0.1 + 0.3, abs=1e-6)  # the trailing compute, op 1 under it


def test_a_program_whose_flow_fails_ends_with_an_error(agent):
    p, _port = agent
    dead = {"id": "x", "dst": "127.0.0.1", "port": 1, "bytes": 10, "sport": 0, "tos": 0, "after": []}
    _t0, ev, _evs = run_program(p, {"rank": "h0:0", "tail": 0, "stages": [
        {"op": 0, "compute": 0, "overlap": False, "flows": [dead], "expect": []}]})
    assert "error" in ev and "op 0" in ev["error"]
