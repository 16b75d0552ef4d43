"""A host's RoCE NIC in software, for the agents' `roce` transport: queue pairs that send RoCEv2 frames over
UDP (destination port 4791) and go back N, responders that acknowledge, NAK a gap and send CNPs.

Runs inside a Mininet host, in the agent's process (traffic/agent.py hands it flows and hears back when each is
acknowledged or received). The protocol is the pure code of traffic/roce: frames.py (headers, ICRC), gbn.py
(the responder), qp.py (the send queue), dcqcn.py (the notification point). Here are the sockets and threads:

- each QP sends from a UDP socket of its own, bound to the lane's source port (the host's policy routing and
  multipath hashing see it as they see a TCP connection's), with a small send buffer: frames waiting in a paused
  port's queue fill it and the QP stops, as a NIC's paused priority stops its QPs. Unconnected, with don't-
  fragment set, so the kernel gives every frame IP ID 0: the IP header is known and the ICRC computable.
- one raw socket receives this job's frames (a classic BPF filter in the kernel keeps UDP port 4791 and this
  job's QP numbers, whose top byte is the job's index); a UDP socket bound to 4791 beside it takes nothing
  (a filter drops all) and only keeps the kernel from answering "port unreachable".
- QP numbers: no connection manager exchanges them (rdma_cm, NCCL's bootstrap); a QP's two ends share one
  number, chosen by the sender (job << 16 | its count), and the receiver keys a responder by (sender's address,
  QP number). Every QP's first PSN is 0 (the one value a connection manager would have agreed on).

Left out, as this emulates the wire and not the NIC: memory registration and RDMA WRITE/READ (messages go as
SEND), the NIC's pipelines and caches, PFC's own frames at the host (the shaper pauses the host's queue),
the retry limit (a QP retries until the run ends it).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .roce.dcqcn import ReactionPoint, RpParams
from .roce.frames import (
    BTH_LEN,
    ICRC_LEN,
    OP_ACK,
    OP_CNP,
    OP_SEND_FIRST,
    OP_SEND_LAST,
    OP_SEND_ONLY,
    ROCE_PORT,
    ack,
    bth,
    cnp,
    icrc,
    nak_sequence,
    parse,
)
from .roce.gbn import Responder
from .roce.qp import PATH_MTU, SendQueue

SNDBUF = 16 * 1024  # a few frames: a paused port stops the QP within them (the kernel doubles it)
RCVBUF = 8 << 20
_IP, _UDP = struct.Struct("!BBHHHBBH4s4s"), struct.Struct("!HHHH")
_DF, _TTL = 0x4000, 64
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2  # <linux/in.h>; not in Python's socket module
_ECN_CE, _ECT0 = 3, 2
_ZEROS = bytes(PATH_MTU)

Sent = Callable[[object], None]  # (the message's tag), once acknowledged
Received = Callable[[bytes, int, float], None]  # (the message's first bytes, its length, when it began)


def _headers(src: bytes, dst: bytes, sport: int, transport_len: int) -> tuple[bytes, bytes]:
    """The IPv4 and UDP headers the kernel puts before `transport_len` bytes from a UDP socket bound to `sport`
    (unconnected, don't-fragment: IP ID 0), with the fields the ICRC masks left at 0."""
    udp_len = 8 + transport_len
    return (_IP.pack(0x45, 0, 20 + udp_len, 0, _DF, _TTL, socket.IPPROTO_UDP, 0, src, dst),
            _UDP.pack(sport, ROCE_PORT, udp_len, 0))


def with_icrc(src: bytes, dst: bytes, sport: int, transport: bytes) -> bytes:
    """A RoCEv2 UDP payload: the transport headers and payload with their invariant CRC."""
    ip, udp = _headers(src, dst, sport, len(transport) + ICRC_LEN)
    return transport + icrc(ip, udp, transport)


def job_filter(job: int) -> bytes:
    """A classic BPF program for a raw IPv4 socket (the packet from its IP header on, no IP options): UDP to
    port 4791 whose BTH destination QP's top byte is `job`."""
    ins = struct.Struct("HBBI")
    prog = [ins.pack(0x28, 0, 0, 22),  # ldh [22]: the UDP destination port
            ins.pack(0x15, 0, 3, ROCE_PORT),  # jeq 4791, else drop
            ins.pack(0x30, 0, 0, 20 + 8 + 5),  # ldb: the destination QP's top byte
            ins.pack(0x15, 0, 1, job),
            ins.pack(0x06, 0, 0, 0x40000),  # accept the whole frame
            ins.pack(0x06, 0, 0, 0)]  # drop
    return b"".join(prog)


_DROP_ALL = struct.pack("HBBI", 0x06, 0, 0, 0)


def _attach(sock: socket.socket, prog: bytes) -> None:
    """SO_ATTACH_FILTER: a struct sock_fprog pointing at the program (kept alive by the caller's socket)."""
    import ctypes

    buf = ctypes.create_string_buffer(prog)
    fprog = struct.pack("HL", len(prog) // 8, ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, 26, fprog)  # SO_ATTACH_FILTER; the kernel copies the program


def _sender(tos: int, sport: int = 0, sndbuf: int | None = None) -> socket.socket:
    """A UDP socket frames leave by: unconnected, don't-fragment (the kernel's IP ID 0, so the ICRC can be
    computed), in class `tos`, from `sport` (0: any)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if sndbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
    sock.bind(("0.0.0.0", sport))
    return sock


@dataclass
class Counters:
    """What the NIC saw, reported at the end (go-back-N's cost: resent per lost)."""

    sent: int = 0  # data frames put on the wire, resends included (the QPs')
    resent: int = 0  # (the QPs')
    rewinds: int = 0  # NAKs acted on and timeouts (the QPs')
    timeouts: int = 0
    received: int = 0  # data frames that arrived
    out_of_order: int = 0  # dropped by a responder (after a gap, or duplicates)
    naks: int = 0
    acks: int = 0  # ACKs (and NAKs) that reached one of this NIC's QPs
    cnps_sent: int = 0
    cnps_received: int = 0
    ce: int = 0
    icrc_errors: int = 0  # and malformed frames: dropped as a NIC drops them
    rate_cuts: int = 0  # DCQCN's (the QPs' reaction points)


class QueuePair:
    """The send side of one QP: a thread sends its queue's packets, paced, from its own socket."""

    def __init__(self, nic: Nic, qpn: int, dst: str, sport: int, tos: int):
        self.nic, self.qpn, self.dst, self.sport = nic, qpn, dst, sport
        rp = None if nic.dcqcn is None else ReactionPoint(nic.dcqcn)
        self.sq = SendQueue(first_psn=0, line_bps=nic.line_bps, rp=rp)
        self.cv = threading.Condition()
        self.tags: list[tuple[object, bytes]] = []  # per message: the caller's tag, its first bytes
        # ECN-capable under DCQCN, as a RoCE NIC marks its frames for the switches' marking
        self.sock = _sender(tos & ~3 | (_ECT0 if rp is not None else 0), sport, sndbuf=SNDBUF)
        self.src = b""  # this end's address, known once the route is (the first send)
        self._heard = time.monotonic()  # the last ACK that moved the queue, or the last post
        threading.Thread(target=self._run, daemon=True).start()

    def post(self, tag: object, nbytes: int, head: bytes) -> None:
        """A message of `nbytes` whose first bytes are `head` (the rest zeros)."""
        with self.cv:
            self.sq.post(nbytes)
            self.tags.append((tag, head))
            if self.sq.req.una == self.sq.req.next:
                self._heard = time.monotonic()
            self.cv.notify()

    def five_tuple(self) -> list:
        return ["udp", socket.inet_ntoa(self.src) if self.src else "0.0.0.0", self.sport, self.dst, ROCE_PORT]

    def on_frame(self, h) -> None:
        now = time.monotonic()
        with self.cv:
            if h.opcode == OP_CNP:
                self.nic.counters.cnps_received += 1
                self.sq.on_cnp(now)
                return
            una = self.sq.req.una
            done = self.sq.on_ack(h)
            if h.is_nak:
                self.nic.counters.naks += 1
            if self.sq.req.una != una or h.is_nak:
                self._heard = now
            tags = [self.tags[k] for k in done]
            self.cv.notify()
        for tag, _head in tags:
            self.nic.on_sent(tag)

    def _next(self):
        """The next packet to send, once the pacer lets it go; goes back N on the retry timer."""
        rto = self.nic.rto_s
        with self.cv:
            while True:
                now = time.monotonic()
                pkt = self.sq.pop(now)
                if pkt is not None:
                    return pkt, self.tags[pkt.message][1]
                req = self.sq.req
                waits = []
                if req.next < req.total:  # the pacer holds the next one
                    waits.append(self.sq.due(now) - now)
                if req.una < req.next:  # frames out: the retry timer runs
                    left = self._heard + rto - now
                    if left <= 0:
                        self.sq.on_timeout()
                        self.nic.counters.timeouts += 1
                        self._heard = now
                        continue
                    waits.append(left)
                self.cv.wait(min(waits) if waits else None)

    def _run(self) -> None:
        dst = socket.inet_aton(self.dst)
        while True:
            pkt, head = self._next()
            data = head[pkt.offset:pkt.offset + pkt.payload] if pkt.offset < len(head) else b""
            data += _ZEROS[:pkt.payload - len(data)]
            transport = bth(pkt.opcode, self.qpn, pkt.psn, ackreq=pkt.ackreq) + data
            if not self.src:
                self.src = self.nic.source_for(self.dst)
            try:
                self.sock.sendto(with_icrc(self.src, dst, self.sport, transport), (self.dst, ROCE_PORT))
            except OSError:
                pass  # no route (a port down): the retry timer sends it again


@dataclass
class _Incoming:
    """A responder and the message it is taking in."""

    resp: Responder
    np_last: float = float("-inf")
    head: bytearray = field(default_factory=bytearray)
    got: int = 0
    start: float = 0.0


class Nic:
    """This host's QPs for one job (`job`: 0-255, the top byte of its QP numbers)."""

    def __init__(self, job: int, tos: int, on_sent: Sent, on_received: Received, rto_s: float = 1.0,
                 dcqcn: RpParams | None = None, cnp_interval_s: float = 50e-6, cnp_tos: int = 48 << 2,
                 clock: Callable[[], float] = time.time):
        """`dcqcn`: each QP's reaction point (its rates and timers in this machine's units: the emulated line
        rate, wall seconds), None: no congestion control, frames at the line rate the host's queue gives them.
        `cnp_interval_s`: the notification point's, wall seconds; `cnp_tos`: CNPs' class (the high one, as
        NICs send them). `clock`: the time a message's start is reported in (the agent's run clock); the NIC's
        timers run on the monotonic clock."""
        self.job, self.tos, self.rto_s, self.clock = job, tos, rto_s, clock
        self.dcqcn, self.line_bps = dcqcn, dcqcn.line_bps if dcqcn else float("inf")
        self.cnp_interval_s = cnp_interval_s
        self.on_sent, self.on_received = on_sent, on_received
        self.counters = Counters()
        self.qps: dict[int, QueuePair] = {}
        self._incoming: dict[tuple[bytes, int], _Incoming] = {}
        self._lock = threading.Lock()
        self._sources: dict[str, bytes] = {}
        self.raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        self.raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        _attach(self.raw, job_filter(job))
        self.sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sink.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        _attach(self.sink, _DROP_ALL)
        self.sink.bind(("0.0.0.0", ROCE_PORT))
        self.reply, self.notify = _sender(tos & ~3), _sender(cnp_tos)
        self._ports = {s: s.getsockname()[1] for s in (self.reply, self.notify)}
        threading.Thread(target=self._receive, daemon=True).start()

    def queue_pair(self, dst: str, sport: int) -> QueuePair:
        with self._lock:
            qpn = self.job << 16 | len(self.qps) + 1
            if len(self.qps) >= 0xFFFF:
                raise OSError("65,535 queue pairs: this job's QP numbers are used up")
            qp = self.qps[qpn] = QueuePair(self, qpn, dst, sport, self.tos)
        return qp

    def source_for(self, dst: str) -> bytes:
        """The address this host sends from to `dst` (the route's: the NIC of that rail)."""
        if dst not in self._sources:
            probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            try:
                probe.connect((dst, ROCE_PORT))
                self._sources[dst] = socket.inet_aton(probe.getsockname()[0])
            finally:
                probe.close()
        return self._sources[dst]

    def _receive(self) -> None:
        buf = bytearray(65536)
        view = memoryview(buf)
        while True:
            n = self.raw.recv_into(buf)
            if n < 28 + BTH_LEN + ICRC_LEN:
                continue
            try:
                self._frame(view[:n], time.monotonic())
            except ValueError:  # an ACK without its AETH: what a NIC drops as malformed, counted with bad ICRCs
                self.counters.icrc_errors += 1

    def _frame(self, frame: memoryview, now: float) -> None:
        ihl = (frame[0] & 0x0F) * 4
        src, dst, sport = bytes(frame[12:16]), bytes(frame[16:20]), int.from_bytes(frame[ihl:ihl + 2], "big")
        transport, crc = frame[ihl + 8:-ICRC_LEN], bytes(frame[-ICRC_LEN:])
        ip, udp = _headers(src, dst, sport, len(transport) + ICRC_LEN)
        if icrc(ip, udp, bytes(transport)) != crc:
            self.counters.icrc_errors += 1
            return
        h = parse(transport)
        if h.opcode in (OP_ACK, OP_CNP):
            qp = self.qps.get(h.dqpn)
            if qp is not None:
                self.counters.acks += h.opcode == OP_ACK
                qp.on_frame(h)
            return
        self._data(h, src, dst, transport[BTH_LEN:], frame[1] & 3 == _ECN_CE, now)

    def _data(self, h, src: bytes, dst: bytes, payload: memoryview, ce: bool, now: float) -> None:
        c = self.counters
        c.received += 1
        inc = self._incoming.get((src, h.dqpn))
        if inc is None:
            inc = self._incoming[(src, h.dqpn)] = _Incoming(Responder(0))  # every QP's PSNs start at 0
        if ce:
            c.ce += 1
            if now - inc.np_last >= self.cnp_interval_s:
                inc.np_last = now
                c.cnps_sent += 1
                self._send(src, dst, cnp(h.dqpn), self.notify)
        last = h.opcode in (OP_SEND_LAST, OP_SEND_ONLY)
        accepted, reply = inc.resp.on_packet(h.psn, h.ackreq, last_of_message=last)
        if accepted:
            if h.opcode in (OP_SEND_FIRST, OP_SEND_ONLY):
                inc.head, inc.got, inc.start = bytearray(payload[:64]), 0, self.clock()
            inc.got += len(payload)
            if last:
                self.on_received(bytes(inc.head), inc.got, inc.start)
        else:
            c.out_of_order += 1
        if reply is not None:
            frame = (nak_sequence(h.dqpn, reply.psn, reply.msn) if reply.nak else ack(h.dqpn, reply.psn, reply.msn))
            self._send(src, dst, frame, self.reply)

    def _send(self, to: bytes, me: bytes, transport: bytes, sock: socket.socket) -> None:
        try:
            sock.sendto(with_icrc(me, to, self._ports[sock], transport), (socket.inet_ntoa(to), ROCE_PORT))
        except OSError:
            pass  # no route back (a port down): the requester's retry timer covers it

    def totals(self) -> Counters:
        """The counters, with the QPs' own (frames sent and resent, go-back-N episodes, DCQCN's rate cuts) summed
        in."""
        c = Counters(**vars(self.counters))
        with self._lock:
            for qp in self.qps.values():
                with qp.cv:
                    c.sent, c.resent, c.rewinds = (c.sent + qp.sq.req.sent, c.resent + qp.sq.req.resent,
                                                   c.rewinds + qp.sq.req.rewinds)
                    c.rate_cuts += qp.sq.rp.cuts if qp.sq.rp is not None else 0
        return c
