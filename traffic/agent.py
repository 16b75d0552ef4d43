"""The TCP transport's per-host engine: runs inside one Mininet host, driven over stdin/stdout.

    python -m traffic.agent --port 9000

Reads JSON commands, one per line:
    {"cmd": "plan", "flows": [{"id": ..., "dst": ..., "port": ..., "bytes": ..., "sport": ..., "tos": ...,
                               "after": ["1.0.3.0.0", ...]}, ...]}
    {"cmd": "program", "programs": [{"rank": "h0:0", "tail": s,
                                     "stages": [{"op": k, "compute": s, "overlap": b, "flows": [...],
                                                 "expect": [id, ...]}, ...]}, ...]}
    {"cmd": "go", "at": t}
    {"cmd": "skip", "skipped": s}     (the run's clock now runs s wall seconds ahead of the machine's)
    {"cmd": "quit"}
and writes JSON events, one per line:
    {"event": "ready", "port": 9000}
    {"event": "batch", "events": [{"event": "sent", "id": ..., "bytes": ..., "start": t, "end": t,
                                   "five_tuple": [...]},
                                  {"event": "recv", "id": ..., "bytes": ..., "start": t, "end": t}, ...]}
    {"event": "error", "id": ..., "error": "..."}
    {"event": "loaded", "ranks": n}              (a `program` read, every connection it sends on opened)
    {"event": "program", "rank": "h0:0", "released": {k: t}, "end": t}  (a rank's iteration done)
    {"event": "computing", "rank": "h0:0", "until": t}   (computing, nothing of its own in flight)
    {"event": "roce", "counters": {...}}, {"event": "tcp", "counters": {"RetransSegs": n, ...}},
    {"event": "cpu", "seconds": s}     (at quit: the roce NIC's, this host's TCP, this agent's CPU time)

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
with no word from the coordinator in between (no barrier per step). A lane is
one connection (`sport`), or, when a flow lists `sports` (several connections
to the same peer) and its `lane`, the flow goes on whichever of those
connections has the fewest bytes outstanding (sent or queued, not yet
acknowledged) when it is ready: HPN's connection choice at the host.

A `program` is a rank's whole training iteration (traffic/program.py): per op it takes part in, the compute
before it (wall seconds), its flows and the ids it receives. From `go`'s time on, a thread per rank computes
(a timed wait), releases the op's flows as a plan, and starts its next op once its own part of this one is done
(its flows acknowledged, its receipts arrived), as NCCL's stream does: no word from the coordinator between
ops. It reports when it released each op and when it ended.

Every time here is the run's clock (`_now`): the machine's plus what the run skipped (traffic/skip.py). A rank
that starts a compute wait with nothing of its own in flight says until when; if every rank does, the run
jumps its clock (`skip`) and the waits end that much sooner.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import queue
import socket
import struct
import sys
import threading
import time

from .agent_out import emit, emit_final, flush, flush_forever, report
from .roce.dcqcn import RpParams
from .roce.gbn import NCCL_IB_TIMEOUT_S
from .rocenic import Nic

HEADER = struct.Struct("!16sQ")  # flow id, bytes
CHUNK = 256 * 1024
_PAYLOAD = memoryview(bytes(CHUNK))
_arrived: dict[str, float] = {}  # flow id -> when its last byte was received here: what planned flows wait for
_acked: dict[str, float] = {}  # flow id sent from here -> when its receiver acknowledged it
_failed: set[str] = set()  # flow ids sent from here that failed: a program waiting on one ends
_arrived_cv = threading.Condition()  # guards the three above
_loaded: list[dict] = []  # programs read, waiting for `go`
_skipped = 0.0  # wall seconds the run's clock is ahead of the machine's (traffic/skip.py)
_clock_cv = threading.Condition()  # a skip wakes the compute waits
REPORT_COMPUTE_S = 0.002  # a compute wait shorter than this is not worth a `computing` report


def _now() -> float:
    """The run's clock (epoch seconds): the machine's plus what was skipped."""
    return time.time() + _skipped


def _sleep_until(t: float) -> None:
    """Until the run's clock reaches t; a skip brings it sooner."""
    with _clock_cv:
        while (left := t - _now()) > 0:
            _clock_cv.wait(left)


def _skip(total: float) -> None:
    global _skipped
    with _clock_cv:
        _skipped = total
        _clock_cv.notify_all()


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        part = conn.recv(n - len(buf))
        if not part:
            raise ConnectionError("peer closed early")
        buf += part
    return bytes(buf)


_NIC: Nic | None = None  # the roce transport's (--transport roce): its queue pairs are the connections
_CC: bytes | None = None  # the congestion control every socket of this agent chooses (--cc), None: the default


def _choose_cc(s: socket.socket) -> None:
    """Both ends choose it: DCTCP's receiver echoes CE marks its own way (testbed/qos/cc.py)."""
    if _CC is not None:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, _CC)


def serve(port: int, tos: int = 0) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _choose_cc(srv)  # accepted sockets inherit it
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
    # The one-byte acknowledgement goes out at once: under Nagle it waited for the sender's delayed ACK of the
    # one before (40 ms), and a rank's next op waits for it (measured: 38-45 ms of wall time per op)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        with conn:
            while True:
                try:
                    head = _recv_exact(conn, HEADER.size)
                except ConnectionError:
                    return  # the sender closed between flows
                raw_id, total = HEADER.unpack(head)
                fid = raw_id.rstrip(b"\0").decode()
                start = _now()
                got = 0
                while got < total:
                    n = conn.recv_into(buf, min(CHUNK, total - got))
                    if not n:
                        raise ConnectionError(f"peer closed after {got} of {total} bytes")
                    got += n
                end = _now()
                conn.sendall(b"\1")  # the sender's completion is the receiver's, not its own send buffer's
                _flow_received(fid, got, start, end)
    except OSError as exc:
        emit({"event": "error", "id": fid, "error": f"receive: {exc}"})


def _flow_received(fid: str, got: int, start: float, end: float) -> None:
    report({"event": "recv", "id": fid, "bytes": got, "start": start, "end": end})
    with _arrived_cv:
        _arrived[fid] = end
        _arrived_cv.notify_all()


def _flow_sent(fid: str, total: int, start: float, new: bool, five: list) -> None:
    """A flow's receiver has it all (its acknowledgement came)."""
    end = _now()
    with _arrived_cv:
        _acked[fid] = end
        _arrived_cv.notify_all()
    report({"event": "sent", "id": fid, "bytes": total, "start": start, "end": end, "new_connection": new,
            "five_tuple": five})


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
                _send_failed(fid, f"send: {broken}")
                continue
            with _conns_lock:
                self.outstanding -= total
            _flow_sent(fid, total, start, new, five)

    def send(self, fid: str, total: int, start: float, new: bool, dst: str, port: int) -> None:
        """A flow's header and payload onto the connection (blocks while its send buffer is full)."""
        local = self.sock.getsockname()
        first = min(total, CHUNK)  # the header rides with the first bytes: one segment less per flow
        self.sock.sendall(HEADER.pack(fid.encode()[:16], total) + _PAYLOAD[:first])
        left = total - first
        while left:
            left -= self.sock.send(_PAYLOAD[: min(CHUNK, left)])
        self.acks.put((fid, total, start, new, ["tcp", local[0], local[1], dst, port]))


class _RoceLane:
    """The roce transport's connection: a queue pair; a flow is one message (its header and payload), reported
    `sent` when the responder's ACK covers its last packet."""

    def __init__(self, qp):
        self.qp, self.lock, self.outstanding = qp, threading.Lock(), 0

    def send(self, fid: str, total: int, start: float, new: bool, _dst: str, _port: int) -> None:
        self.qp.post((self, fid, total, start, new), HEADER.size + total, HEADER.pack(fid.encode()[:16], total))


def _roce_sent(tag: tuple) -> None:
    lane, fid, total, start, new = tag
    with _conns_lock:
        lane.outstanding -= total
    _flow_sent(fid, total, start, new, lane.qp.five_tuple())


def _roce_received(head: bytes, got: int, start: float) -> None:
    raw_id, total = HEADER.unpack_from(head)
    _flow_received(raw_id.rstrip(b"\0").decode(), got - HEADER.size, start, _now())


_conns: dict[tuple, _Connection | _RoceLane] = {}
_conns_lock = threading.Lock()


def _connection(dst: str, port: int, sport: int, tos: int) -> tuple[_Connection, bool]:
    key = (dst, port, sport, tos)
    with _conns_lock:
        if key in _conns:
            return _conns[key], False
        if _NIC is not None:
            _conns[key] = _RoceLane(_NIC.queue_pair(dst, sport))
            return _conns[key], True
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _choose_cc(s)
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
        start = _now()
        if cmd.get("sports"):
            c, new = _least_outstanding(cmd)
        else:
            c, new = _connection(cmd["dst"], int(cmd["port"]), int(cmd.get("sport") or 0), int(cmd.get("tos") or 0))
            with _conns_lock:
                c.outstanding += int(cmd["bytes"])
        with c.lock:  # one flow at a time on the wire of a connection
            c.send(fid, int(cmd["bytes"]), start, new, cmd["dst"], int(cmd["port"]))
    except OSError as exc:
        _send_failed(fid, f"send: {exc}")


def _send_failed(fid: str, error: str) -> None:
    with _arrived_cv:
        _failed.add(fid)
        _arrived_cv.notify_all()
    emit({"event": "error", "id": fid, "error": error})


def _run_connection(flows: list[dict]) -> None:
    """One connection's planned flows, in order, each once what it depends on has arrived here."""
    for cmd in flows:
        after = cmd.get("after") or ()
        with _arrived_cv:
            _arrived_cv.wait_for(lambda after=after: all(a in _arrived for a in after))
        _send(cmd)


def plan(cmd: dict) -> None:
    queues: dict[tuple, list[dict]] = {}
    for f in cmd["flows"]:
        lane = ("lane", f["lane"]) if f.get("sports") else int(f.get("sport") or 0)
        queues.setdefault((f["dst"], int(f["port"]), lane, int(f.get("tos") or 0)), []).append(f)
    for flows in queues.values():
        threading.Thread(target=_run_connection, args=(flows,), daemon=True).start()


class _Failed(Exception):
    pass


def _own_part_done(stage: dict, released: float) -> float:
    """Wait until this rank's part of an op is done: its flows acknowledged, its receipts arrived; when that
    was (the last of those times, not this thread's wake-up; not before the rank released the op). Each
    wake-up looks at the lists from their end (the last pieces arrive last), so an op of n pieces costs O(n)
    checks, not one scan per arrival."""
    sends, expects = [f["id"] for f in stage["flows"]], list(stage["expect"])
    mine = set(sends)
    last = [released]

    def done() -> bool:
        if _failed and not _failed.isdisjoint(mine):
            return True
        for left, times in ((sends, _acked), (expects, _arrived)):
            while left and left[-1] in times:
                last[0] = max(last[0], times[left.pop()])
        return not sends and not expects

    with _arrived_cv:
        _arrived_cv.wait_for(done)
        if _failed and not _failed.isdisjoint(mine):
            raise _Failed(f"op {stage['op']}: a flow failed")
    return last[0]


def _run_program(prog: dict, t0: float) -> None:
    """One rank's iteration from wall time t0 (traffic/program.py has the rules)."""
    gpu = net = t0
    released: dict[int, float] = {}
    pending = None  # an overlapping op still running
    try:
        for st in prog["stages"]:
            gpu += float(st["compute"])
            if pending is not None:  # one stream: an op starts after the one before it
                net, pending = _own_part_done(pending, released[pending["op"]]), None
            _compute_until(prog["rank"], max(gpu, net))
            released[st["op"]] = _now()
            plan({"flows": st["flows"]})
            if st["overlap"]:
                pending = st
            else:
                gpu = net = _own_part_done(st, released[st["op"]])
        if pending is not None:
            net = _own_part_done(pending, released[pending["op"]])
        gpu += float(prog["tail"])
        _compute_until(prog["rank"], gpu)  # trailing compute: nothing to send
        emit({"event": "program", "rank": prog["rank"], "released": released, "end": max(gpu, net)})
    except _Failed as exc:
        emit({"event": "program", "rank": prog["rank"], "error": str(exc)})


def _connect_all(programs: list[dict]) -> None:
    """Open every connection the programs will send on before they start, as a communicator's set-up does:
    opened at a first send they cost the first op the handshakes and this process's CPU for their threads (a
    32-rank all-to-all: 14 connections a rank, CPU idle 0% in the warm-up iteration's first ops)."""
    for prog in programs:
        for st in prog["stages"]:
            for f in st["flows"]:
                tos = int(f.get("tos") or 0)
                for sport in f.get("sports") or [f.get("sport") or 0]:
                    try:
                        _connection(f["dst"], int(f["port"]), int(sport), tos)
                    except OSError:
                        pass  # the flow's own send tries again and reports what failed, with the flow's id


def _compute_until(rank: str, t: float) -> None:
    """The rank computes until t with nothing of its own in flight: said (compute skipping), then waited."""
    if t - _now() > REPORT_COMPUTE_S:
        emit({"event": "computing", "rank": rank, "until": t})
    _sleep_until(t)


def go(at: float) -> None:
    """Start the loaded programs, each in a thread of its own, from wall time `at`."""
    progs, _loaded[:] = list(_loaded), []
    for prog in progs:
        threading.Thread(target=_run_program, args=(prog, at), daemon=True).start()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m traffic.agent")
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--tos", type=int, default=0, help="IP TOS of the receiver's side (its ACKs)")
    ap.add_argument("--cc", default=None, help="TCP congestion control of every socket (default: the kernel's)")
    ap.add_argument("--transport", choices=("tcp", "roce"), default="tcp")
    ap.add_argument("--job", type=int, default=0, help="roce: the job's index, its QP numbers' top byte")
    ap.add_argument("--rto", type=float, default=NCCL_IB_TIMEOUT_S, help="roce: the QPs' retry timer, wall seconds")
    ap.add_argument("--dcqcn", default=None, help="roce: DCQCN's reaction point (RpParams as JSON, with "
                    "cnp_interval_s), in this machine's units")
    ap.add_argument("--cnp-tos", type=int, default=48 << 2, help="roce: the IP TOS of CNPs")
    a = ap.parse_args(argv)
    global _CC, _NIC
    _CC = a.cc.encode() if a.cc else None
    if a.transport == "roce":
        dcqcn = json.loads(a.dcqcn) if a.dcqcn else None
        _NIC = Nic(a.job, a.tos, on_sent=_roce_sent, on_received=_roce_received, rto_s=a.rto, clock=_now,
                   cnp_tos=a.cnp_tos, **({"cnp_interval_s": dcqcn.pop("cnp_interval_s"),
                                          "dcqcn": RpParams(**dcqcn)} if dcqcn else {}))
        emit({"event": "ready", "port": a.port})
    else:
        threading.Thread(target=serve, args=(a.port, a.tos), daemon=True).start()
    threading.Thread(target=flush_forever, daemon=True).start()
    for line in sys.stdin:
        try:
            cmd = json.loads(line)
        except ValueError:
            emit({"event": "error", "id": None, "error": f"bad command: {line.strip()[:80]}"})
            continue
        if cmd.get("cmd") == "quit":
            emit_final(None if _NIC is None else dataclasses.asdict(_NIC.totals()))
            break
        if cmd.get("cmd") == "plan":
            plan(cmd)
        elif cmd.get("cmd") == "program":
            _connect_all(cmd["programs"])
            _loaded.extend(cmd["programs"])
            emit({"event": "loaded", "ranks": len(cmd["programs"])})
        elif cmd.get("cmd") == "go":
            go(float(cmd["at"]))
        elif cmd.get("cmd") == "skip":
            _skip(float(cmd["skipped"]))
    flush()


if __name__ == "__main__":
    main()
