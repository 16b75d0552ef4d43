"""The TCP agent's protocol on loopback: planned flows, batched reports, errors (no namespaces, no root)."""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest


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


def test_a_flow_to_nowhere_is_an_error(agent, free_port):
    p, _port = agent
    flow = {"id": "x", "dst": "127.0.0.1", "port": free_port(), "bytes": 10, "sport": 0, "tos": 0, "after": []}
    p.stdin.write(json.dumps({"cmd": "plan", "flows": [flow]}) + "\n")
    p.stdin.flush()
    (ev,), _ = events_until(p, 1)
    assert ev["event"] == "error" and ev["id"] == "x" and "refused" in ev["error"].lower()


class Receiver:
    """A receiver speaking the agent's flow protocol that reads the connection from `slow_sport` at about
    1 MB/s and every other one at full speed."""

    def __init__(self, slow_sport: int):
        from traffic.agent import HEADER

        self.header, self.slow = HEADER, slow_sport
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            conn, (_ip, sport) = self.srv.accept()
            threading.Thread(target=self._serve, args=(conn, sport == self.slow), daemon=True).start()

    def _serve(self, conn, slow):
        buf = bytearray(64 * 1024)
        with conn:
            while True:
                head = conn.recv(self.header.size, socket.MSG_WAITALL)
                if len(head) < self.header.size:
                    return
                _fid, total = self.header.unpack(head)
                while total:
                    total -= conn.recv_into(buf, min(len(buf), total))
                    if slow:
                        time.sleep(0.06)
                conn.sendall(b"\1")


@pytest.mark.parametrize("choice", ["channel", "least-outstanding"])
def test_least_outstanding_choice_moves_chunks_off_a_slow_connection(agent, choice, free_port):
    """Two lanes of 10 chunks each, chunk i of both ready when trigger i reaches the agent (one per 50 ms,
    as a collective's steps become ready). With the channel choice each lane keeps its connection; with
    least-outstanding a chunk goes where fewer bytes wait for their acknowledgement: the fast one, mostly."""
    from traffic.agent import HEADER

    p, port = agent
    fast, slow = free_port(), free_port()
    rx = Receiver(slow_sport=slow)
    flows = []
    for lane, sport in enumerate((fast, slow)):
        for i in range(10):
            f = {"id": f"{lane}.{i}", "dst": "127.0.0.1", "port": rx.port, "bytes": 200_000, "sport": sport,
                 "tos": 0, "after": [f"t{i}"]}
            if choice == "least-outstanding":
                f.update(sports=[fast, slow], lane=lane)
            flows.append(f)
    p.stdin.write(json.dumps({"cmd": "plan", "flows": flows}) + "\n")
    p.stdin.flush()
    with socket.create_connection(("127.0.0.1", port)) as trig:
        for i in range(10):
            trig.sendall(HEADER.pack(f"t{i}".encode(), 1) + b"x")
            time.sleep(0.05)
        evs, _ = events_until(p, 30, timeout=60)
    by_sport = {fast: 0, slow: 0}
    for e in evs:
        if e["event"] == "sent":
            by_sport[e["five_tuple"][2]] += e["bytes"]
    assert sum(by_sport.values()) == 20 * 200_000
    if choice == "channel":
        assert by_sport[fast] == by_sport[slow]  # each lane keeps its own connection
    else:
        assert by_sport[fast] >= 3 * by_sport[slow] > 0, by_sport  # the slow one holds its bytes longer
