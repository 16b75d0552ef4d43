"""The TCP transport's per-host engine: runs inside one Mininet host, driven over stdin/stdout.

    python -m traffic.agent --port 9000

Reads JSON commands, one per line:
    {"cmd": "plan", "flows": [{"id": ..., "dst": ..., "port": ..., "bytes": ..., "sport": ..., "tos": ...,
                               "after": ["1.0.3.0.0", ...]}, ...]}
    {"cmd": "quit"}
and writes JSON events, one per line:
    {"event": "ready", "port": 9000}
    {"event": "batch", "events": [{"event": "sent", "id": ..., "bytes": ..., "start": t, "end": t,
                                   "five_tuple": [...]},
                                  {"event": "recv", "id": ..., "bytes": ..., "start": t, "end": t}, ...]}
    {"event": "error", "id": ..., "error": "..."}
    {"event": "tcp", "counters": {"RetransSegs": n, "TCPTimeouts": n, ...}}   (at quit: this host's TCP)

A sender keeps one connection per (destination, port, source port) and reuses
it for later flows, as NCCL keeps its connections for the life of a
communicator (no handshake or slow start per step; the 5-tuple a precise path
was pinned to stays the same). Each flow is a small header and the payload; the
sender reports `sent` once the receiver acknowledged the last byte (without
waiting for that before the next flow), the receiver reports `recv` when it
has them all.

A `plan` is this rank's whole part of a collective (traffic/plan.py): its
flows run per lane (a thread each, so lanes run concurrently), in the given
order, each as soon as every flow in its `after` list has been received here,
with no word from the coordinator in between (no barrier per step). A flow
with `compute_until` (wall time) waits until then too: the rank's compute
before the op, as a timed wait. A lane is
one connection (`sport`), or, when a flow lists `sports` (several connections
to the same peer) and its `lane`, the flow goes on whichever of those
connections has the fewest bytes outstanding (sent or queued, not yet
acknowledged) when it is ready: HPN's connection choice at the host.
"""

from __future__ import annotations

import argparse
import json
import queue
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


_batch: list[dict] = []
FLUSH_S = 0.02  # the coordinator starts a job's next op on these reports: their lag is dead time


def emit(event: dict) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def report(event: dict) -> None:
    """A flow's `sent` or `recv`: batched, at most FLUSH_S late, as one `batch` line.

    A 64-rank ring all-reduce is 16,000 flows an op; a line each kept the coordinator's readers and
    the agents' output busy. The timestamps inside say when things happened, not the line's arrival."""
    with _out_lock:
        _batch.append(event)


def flush() -> None:
    with _out_lock:
        if _batch:
            sys.stdout.write(json.dumps({"event": "batch", "events": _batch}) + "\n")
            sys.stdout.flush()
            _batch.clear()


def _flush_forever() -> None:
    while True:
        time.sleep(FLUSH_S)
        flush()


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
                report({"event": "recv", "id": fid, "bytes": got, "start": start, "end": end})
                with _arrived_cv:
                    _arrived.add(fid)
                    _arrived_cv.notify_all()
    except OSError as exc:
        emit({"event": "error", "id": fid, "error": f"receive: {exc}"})


class _Connection:
    """One sender connection: flows go out back to back; a reader thread takes the receiver's
    one-byte acknowledgements in order and reports each flow `sent` at its acknowledgement. The
    next flow does not wait for the previous one's acknowledgement (that round trip, behind the
    queue of the reverse direction, cost every flow of a pipelined plan a gap on the wire)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.lock = threading.Lock()
        self.outstanding = 0  # bytes handed to this connection and not yet acknowledged (under _conns_lock)
        self.acks: queue.SimpleQueue = queue.SimpleQueue()  # (id, bytes, start, new, five-tuple) per flow
        threading.Thread(target=self._read_acks, daemon=True).start()

    def _read_acks(self) -> None:
        broken: Exception | None = None
        while True:
            fid, total, start, new, five = self.acks.get()
            if broken is None:
                try:
                    _recv_exact(self.sock, 1)
                except OSError as exc:
                    broken = exc
            if broken is not None:
                emit({"event": "error", "id": fid, "error": f"send: {broken}"})
                continue
            with _conns_lock:
                self.outstanding -= total
            report({"event": "sent", "id": fid, "bytes": total, "start": start, "end": time.time(),
                    "new_connection": new, "five_tuple": five})


_conns: dict[tuple, _Connection] = {}
_conns_lock = threading.Lock()


def _connection(dst: str, port: int, sport: int, tos: int) -> tuple[_Connection, bool]:
    key = (dst, port, sport, tos)
    with _conns_lock:
        if key in _conns:
            return _conns[key], False
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tos:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        if sport:
            s.bind(("0.0.0.0", sport))
        s.connect((dst, port))
        _conns[key] = _Connection(s)
        return _conns[key], True


def _least_outstanding(cmd: dict) -> tuple[_Connection, bool]:
    """The connection to this peer, among the flow's `sports`, with the fewest bytes outstanding; the
    flow's bytes count against it from now on."""
    dst, port, tos = cmd["dst"], int(cmd["port"]), int(cmd.get("tos") or 0)
    opened = [_connection(dst, port, int(s), tos) for s in cmd["sports"]]
    with _conns_lock:
        c, new = min(opened, key=lambda cn: cn[0].outstanding)
        c.outstanding += int(cmd["bytes"])
    return c, new


def _send(cmd: dict) -> None:
    fid = cmd["id"]
    try:
        start = time.time()
        if cmd.get("sports"):
            c, new = _least_outstanding(cmd)
        else:
            c, new = _connection(cmd["dst"], int(cmd["port"]), int(cmd.get("sport") or 0), int(cmd.get("tos") or 0))
            with _conns_lock:
                c.outstanding += int(cmd["bytes"])
        with c.lock:  # one flow at a time on the wire of a connection
            local = c.sock.getsockname()
            total = int(cmd["bytes"])
            first = min(total, CHUNK)  # the header rides with the first bytes: one segment less per flow
            c.sock.sendall(HEADER.pack(fid.encode()[:16], total) + _PAYLOAD[:first])
            left = total - first
            while left:
                left -= c.sock.send(_PAYLOAD[: min(CHUNK, left)])
            c.acks.put((fid, total, start, new, ["tcp", local[0], local[1], cmd["dst"], int(cmd["port"])]))
    except OSError as exc:
        emit({"event": "error", "id": fid, "error": f"send: {exc}"})


def _run_connection(flows: list[dict]) -> None:
    """One connection's planned flows, in order, each once what it depends on has arrived here (and, for a
    rank's first flows of an op, once its compute is done: a timed wait, the GPU being busy)."""
    for cmd in flows:
        after = cmd.get("after") or ()
        with _arrived_cv:
            _arrived_cv.wait_for(lambda after=after: _arrived.issuperset(after))
        if cmd.get("compute_until"):
            time.sleep(max(0.0, float(cmd["compute_until"]) - time.time()))
        _send(cmd)


def plan(cmd: dict) -> None:
    queues: dict[tuple, list[dict]] = {}
    for f in cmd["flows"]:
        lane = ("lane", f["lane"]) if f.get("sports") else int(f.get("sport") or 0)
        queues.setdefault((f["dst"], int(f["port"]), lane, int(f.get("tos") or 0)), []).append(f)
    for flows in queues.values():
        threading.Thread(target=_run_connection, args=(flows,), daemon=True).start()


# retransmissions and why (timeouts, probes, fast retransmits), what showed them spurious or reordered
# (DSACKs, reordering seen), and what the receiver itself threw away (out-of-order queue, receive queue)
TCP_COUNTERS = ("RetransSegs", "TCPTimeouts", "TCPSpuriousRTOs", "TCPLossProbes", "TCPFastRetrans", "TCPDSACKRecv",
                "TCPSACKReorder", "TCPTSReorder", "TCPOFODrop", "TCPRcvQDrop", "PruneCalled")


def tcp_counters(snmp: str, netstat: str) -> dict[str, int]:
    """This network namespace's TCP retransmission counters, from /proc/net/snmp and /proc/net/netstat (pairs of
    lines: names, then values): what tells a fabric's loss from the transport's own timers going off."""
    out: dict[str, int] = {}
    for text in (snmp, netstat):
        lines = text.splitlines()
        for names, values in zip(lines[::2], lines[1::2], strict=False):
            out.update({k: int(v) for k, v in zip(names.split()[1:], values.split()[1:], strict=False)
                        if k in TCP_COUNTERS})
    return out


def _emit_tcp_counters() -> None:
    try:
        with open("/proc/net/snmp") as a, open("/proc/net/netstat") as b:
            emit({"event": "tcp", "counters": tcp_counters(a.read(), b.read())})
    except (OSError, ValueError) as exc:
        emit({"event": "error", "id": None, "error": f"tcp counters: {exc}"})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m traffic.agent")
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--tos", type=int, default=0, help="IP TOS of the receiver's side (its ACKs)")
    a = ap.parse_args(argv)
    threading.Thread(target=serve, args=(a.port, a.tos), daemon=True).start()
    threading.Thread(target=_flush_forever, daemon=True).start()
    for line in sys.stdin:
        try:
            cmd = json.loads(line)
        except ValueError:
            emit({"event": "error", "id": None, "error": f"bad command: {line.strip()[:80]}"})
            continue
        if cmd.get("cmd") == "quit":
            _emit_tcp_counters()
            break
        if cmd.get("cmd") == "plan":
            plan(cmd)
    flush()


if __name__ == "__main__":
    main()
