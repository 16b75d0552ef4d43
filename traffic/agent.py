"""The TCP transport's per-host engine: runs inside one Mininet host, driven over stdin/stdout.

    python -m traffic.agent --port 9000

Reads JSON commands, one per line:
    {"cmd": "plan", "flows": [{"id": ..., "dst": ..., "port": ..., "bytes": ..., "sport": ..., "tos": ...,
                               "after": ["1.0.3.0.0", ...]}, ...]}
    {"cmd": "quit"}
and writes JSON events, one per line:
    {"event": "ready", "port": 9000}
    {"event": "sent", "id": ..., "bytes": ..., "start": t, "end": t, "five_tuple": [...]}
    {"event": "recv", "id": ..., "bytes": ..., "start": t, "end": t}
    {"event": "error", "id": ..., "error": "..."}

A sender keeps one connection per (destination, port, source port) and reuses
it for later flows, as NCCL keeps its connections for the life of a
communicator (no handshake or slow start per step; the 5-tuple a precise path
was pinned to stays the same). Each flow is a small header and the payload; the
sender reports `sent` once the receiver acknowledged the last byte, the
receiver reports `recv` when it has them all.

A `plan` is this rank's whole part of a collective (traffic/plan.py): its
flows run per connection (a thread each, so connections run concurrently), in
the given order, each as soon as every flow in its `after` list has been
received here, with no word from the coordinator in between (no barrier per
step).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time

HEADER = struct.Struct("!16sQ")  # flow id, bytes
CHUNK = 256 * 1024
_PAYLOAD = memoryview(bytes(CHUNK))
_out_lock = threading.Lock()
_arrived: set[str] = set()  # flow ids received here: what planned flows wait for
_arrived_cv = threading.Condition()


def emit(event: dict) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            raise ConnectionError("peer closed early")
        buf += part
    return bytes(buf)


def serve(port: int, tos: int = 0) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if tos:
        # Accepted sockets inherit it: the receiver's ACKs ride the data's class, as RoCE's ACKs do.
        # (In the default class they would starve behind strict-priority lossless data.)
        srv.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    srv.bind(("0.0.0.0", port))
    srv.listen(512)
    emit({"event": "ready", "port": port})
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_receive, args=(conn,), daemon=True).start()


def _receive(conn: socket.socket) -> None:
    fid = "?"
    buf = bytearray(CHUNK)
    try:
        with conn:
            while True:
                try:
                    head = _recv_exact(conn, HEADER.size)
                except ConnectionError:
                    return  # the sender closed between flows
                raw_id, total = HEADER.unpack(head)
                fid = raw_id.rstrip(b"\0").decode()
                start = time.time()
                got = 0
                while got < total:
                    n = conn.recv_into(buf, min(CHUNK, total - got))
                    if not n:
                        raise ConnectionError(f"peer closed after {got} of {total} bytes")
                    got += n
                end = time.time()
                conn.sendall(b"\1")  # the sender's completion is the receiver's, not its own send buffer's
                emit({"event": "recv", "id": fid, "bytes": got, "start": start, "end": end})
                with _arrived_cv:
                    _arrived.add(fid)
                    _arrived_cv.notify_all()
    except OSError as exc:
        emit({"event": "error", "id": fid, "error": f"receive: {exc}"})


_conns: dict[tuple, tuple[socket.socket, threading.Lock]] = {}
_conns_lock = threading.Lock()


def _connection(dst: str, port: int, sport: int, tos: int) -> tuple[socket.socket, threading.Lock, bool]:
    key = (dst, port, sport, tos)
    with _conns_lock:
        if key in _conns:
            return (*_conns[key], False)
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tos:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        if sport:
            s.bind(("0.0.0.0", sport))
        s.connect((dst, port))
        _conns[key] = (s, threading.Lock())
        return (*_conns[key], True)


def _send(cmd: dict) -> None:
    fid = cmd["id"]
    try:
        start = time.time()
        s, lock, new = _connection(cmd["dst"], int(cmd["port"]), int(cmd.get("sport") or 0), int(cmd.get("tos") or 0))
        with lock:  # one flow at a time per connection
            local = s.getsockname()
            total = int(cmd["bytes"])
            s.sendall(HEADER.pack(fid.encode()[:16], total))
            left = total
            while left:
                left -= s.send(_PAYLOAD[: min(CHUNK, left)])
            _recv_exact(s, 1)
        end = time.time()
        emit({"event": "sent", "id": fid, "bytes": total, "start": start, "end": end, "new_connection": new,
              "five_tuple": ["tcp", local[0], local[1], cmd["dst"], int(cmd["port"])]})
    except OSError as exc:
        emit({"event": "error", "id": fid, "error": f"send: {exc}"})


def _run_connection(flows: list[dict]) -> None:
    """One connection's planned flows, in order, each once what it depends on has arrived here."""
    for cmd in flows:
        after = cmd.get("after") or ()
        with _arrived_cv:
            _arrived_cv.wait_for(lambda after=after: _arrived.issuperset(after))
        _send(cmd)


def plan(cmd: dict) -> None:
    queues: dict[tuple, list[dict]] = {}
    for f in cmd["flows"]:
        queues.setdefault((f["dst"], int(f["port"]), int(f.get("sport") or 0), int(f.get("tos") or 0)), []).append(f)
    for flows in queues.values():
        threading.Thread(target=_run_connection, args=(flows,), daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m traffic.agent")
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--tos", type=int, default=0, help="IP TOS of the receiver's side (its ACKs)")
    a = ap.parse_args(argv)
    threading.Thread(target=serve, args=(a.port, a.tos), daemon=True).start()
    for line in sys.stdin:
        try:
            cmd = json.loads(line)
        except ValueError:
            emit({"event": "error", "id": None, "error": f"bad command: {line.strip()[:80]}"})
            continue
        if cmd.get("cmd") == "quit":
            break
        if cmd.get("cmd") == "plan":
            plan(cmd)


if __name__ == "__main__":
    main()
