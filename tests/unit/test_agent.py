"""The TCP agent's protocol on loopback: planned flows, batched reports, errors (no namespaces, no root)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def agent():
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "traffic.agent", "--port", str(port)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)
    assert json.loads(p.stdout.readline()) == {"event": "ready", "port": port}
    yield p, port
    p.kill()
    p.wait()


def events_until(p, want: int, timeout: float = 20) -> tuple[list[dict], int]:
    """Flow events until `want` of them; also how many output lines carried them."""
    out, lines, deadline = [], 0, time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        ev = json.loads(p.stdout.readline())
        lines += 1
        out += ev["events"] if ev["event"] == "batch" else [ev]
    return out, lines


def test_a_plan_runs_by_its_dependencies_and_reports_in_batches(agent):
    p, port = agent
    flows = [{"id": f"f{i}", "dst": "127.0.0.1", "port": port, "bytes": 300_000 + i, "sport": 0, "tos": 0,
              "after": [f"f{i - 1}"] if i else []} for i in range(40)]
    p.stdin.write(json.dumps({"cmd": "plan", "flows": flows}) + "\n")
    p.stdin.flush()
    evs, lines = events_until(p, 80)
    sent = {e["id"]: e for e in evs if e["event"] == "sent"}
    recv = {e["id"]: e for e in evs if e["event"] == "recv"}
    assert {i: e["bytes"] for i, e in recv.items()} == {f"f{i}": 300_000 + i for i in range(40)}
    assert sent.keys() == recv.keys() and sum(e["new_connection"] for e in sent.values()) == 1
    for i in range(1, 40):  # each flow started only once the one it depends on had arrived
        assert sent[f"f{i}"]["start"] >= recv[f"f{i - 1}"]["end"]
        assert sent[f"f{i}"]["end"] >= recv[f"f{i}"]["end"]  # sent = the receiver acknowledged
    assert lines < 40  # 80 reports, batched


def test_a_flow_to_nowhere_is_an_error(agent):
    p, _port = agent
    flow = {"id": "x", "dst": "127.0.0.1", "port": free_port(), "bytes": 10, "sport": 0, "tos": 0, "after": []}
    p.stdin.write(json.dumps({"cmd": "plan", "flows": [flow]}) + "\n")
    p.stdin.flush()
    (ev,), _ = events_until(p, 1)
    assert ev["event"] == "error" and ev["id"] == "x" and "refused" in ev["error"].lower()
