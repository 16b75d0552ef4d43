"""The PFC agent's hot path on raw netlink: queue statistics in one dump, class rate switches.

The agent polls hundreds of queues every few milliseconds and may pause and
resume dozens of classes per poll. Through pyroute2's generic machinery a qdisc
costs ~100 us to parse (a 256-qdisc dump ~30 ms) and a class change ~0.8 ms
round trip, which made the agent miss its period and eat a core. So here:

- `QdiscDumper` sends the same RTM_GETQDISC dump as `tc -s qdisc` on a raw
  NETLINK_ROUTE socket and reads only fixed-layout fields (handle, bytes,
  packets, backlog, drops), skipping qdiscs it was not asked for;
- `ClassSwitch` pre-encodes, once per port, the two RTM_NEWTCLASS messages
  (HTB parameters for "paused" and "running") and sends them without waiting
  for an acknowledgement; the kernel only answers on error, and those answers
  are drained and raised on the next call.

Setting up and removing qdiscs, classes and filters still goes through pyroute2.
"""

from __future__ import annotations

import math
import socket
import struct
from dataclasses import dataclass

from testbed.system.netns import in_netns

RTM_NEWQDISC, RTM_GETQDISC, RTM_NEWTCLASS = 36, 38, 40
NLMSG_DONE, NLMSG_ERROR = 3, 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
TCA_KIND, TCA_STATS2 = 1, 7
TCA_STATS_BASIC, TCA_STATS_QUEUE = 1, 3
NLA_TYPE_MASK = 0x3FFF

_NLMSG = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=BxxxiIII")
_RTA = struct.Struct("=HH")
_BASIC = struct.Struct("=QI")
_QUEUE = struct.Struct("=IIIII")
_HANDLE = struct.Struct("=I")
_IFINDEX = struct.Struct("=i")
_HANDLE_AT = _NLMSG.size + 8  # tcmsg: family, 3 pad bytes, ifindex, then handle


@dataclass(frozen=True)
class QdiscStats:
    ifindex: int
    handle: int
    parent: int
    kind: str
    bytes: int
    packets: int
    qlen: int
    backlog: int
    drops: int
    overlimits: int


def _attrs(buf: bytes, start: int, end: int):
    while start + 4 <= end:
        length, typ = _RTA.unpack_from(buf, start)
        if length < 4:
            return
        yield typ & NLA_TYPE_MASK, start + 4, start + length
        start += (length + 3) & ~3


class QdiscDumper:
    """A netlink socket bound in the namespace that was current when it was made."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 0))
        self.seq = 0
        # Reused: a reply is consumed before the next is read. The kernel fills a dump datagram to
        # about 32 KB; MSG_TRUNC below reports a longer one instead of losing its tail.
        self._buf = bytearray(64 << 10)

    def close(self) -> None:
        self.sock.close()

    def _replies(self, handles: frozenset[int] | None):
        """(buffer, start, end) of each RTM_NEWQDISC of a fresh dump, only those with one of `handles` if given."""
        self.seq += 1
        body = _TCMSG.pack(0, 0, 0, 0, 0)
        self.sock.send(_NLMSG.pack(_NLMSG.size + len(body), RTM_GETQDISC, NLM_F_REQUEST | NLM_F_DUMP, self.seq, 0)
                       + body)
        data = self._buf
        while True:
            n = self.sock.recv_into(data, 0, socket.MSG_TRUNC)
            if n > len(data):
                raise RuntimeError(f"netlink dump datagram of {n} bytes exceeds the {len(data)}-byte buffer")
            off = 0
            while off + _NLMSG.size <= n:
                length, typ, _flags, seq, _pid = _NLMSG.unpack_from(data, off)
                if length < _NLMSG.size:
                    raise RuntimeError("malformed netlink message")
                if seq == self.seq:
                    if typ == NLMSG_DONE:
                        return
                    if typ == NLMSG_ERROR:
                        raise OSError(-struct.unpack_from("=i", data, off + _NLMSG.size)[0], "qdisc dump failed")
                    if typ == RTM_NEWQDISC and (handles is None
                                                or _HANDLE.unpack_from(data, off + _HANDLE_AT)[0] in handles):
                        yield data, off + _NLMSG.size, off + length
                off += (length + 3) & ~3

    def dump(self, handle: int | None = None) -> list[QdiscStats]:
        """Every qdisc of the namespace, or only those with this handle (the rest are not parsed)."""
        return [self._parse(*reply) for reply in self._replies(None if handle is None else frozenset((handle,)))]

    def backlogs(self, handles: frozenset[int]) -> list[tuple[int, int, int, int, int]]:
        """(ifindex, handle, backlog bytes, drops, bytes sent) of the qdiscs with these handles: the PFC agent's
        poll, and its watchdog's (a paused queue that sends nothing).

        Reads only the statistics, with no objects per qdisc: at 64 hosts (2,050 qdiscs in the
        root namespace, 512 of them lossless) this about halves the CPU of a poll against `dump`."""
        out = []
        for buf, start, end in self._replies(handles):
            for typ, a, b in _attrs(buf, start + _TCMSG.size, end):
                if typ == TCA_STATS2:
                    sent = backlog = drops = 0
                    for t2, c, _end in _attrs(buf, a, b):
                        if t2 == TCA_STATS_QUEUE:
                            _qlen, backlog, drops, _r, _o = _QUEUE.unpack_from(buf, c)
                        elif t2 == TCA_STATS_BASIC:
                            sent, _packets = _BASIC.unpack_from(buf, c)
                    out.append((_IFINDEX.unpack_from(buf, start + 4)[0], _HANDLE.unpack_from(buf, start + 8)[0],
                                backlog, drops, sent))
                    break
        return out

    @staticmethod
    def _parse(buf: bytes, start: int, end: int) -> QdiscStats:
        _fam, ifindex, handle, parent, _info = _TCMSG.unpack_from(buf, start)
        kind = ""
        nbytes = packets = qlen = backlog = drops = overlimits = 0
        for typ, a, b in _attrs(buf, start + _TCMSG.size, end):
            if typ == TCA_KIND:
                kind = buf[a:b].rstrip(b"\0").decode()
            elif typ == TCA_STATS2:
                for t2, c, _end in _attrs(buf, a, b):
                    if t2 == TCA_STATS_BASIC:
                        nbytes, packets = _BASIC.unpack_from(buf, c)
                    elif t2 == TCA_STATS_QUEUE:
                        qlen, backlog, drops, _requeues, overlimits = _QUEUE.unpack_from(buf, c)
        return QdiscStats(ifindex, handle, parent, kind, nbytes, packets, qlen, backlog, drops, overlimits)


def dumper_in(netns_path: str | None) -> QdiscDumper:
    return in_netns(netns_path, QdiscDumper)


# -- HTB class changes ----------------------------------------------------------------
TCA_OPTIONS, TCA_HTB_PARMS, TCA_HTB_RATE64, TCA_HTB_CEIL64 = 2, 1, 6, 7
U32_MAX = 0xFFFFFFFF  # tc_ratespec's rate is 32-bit bytes/s (34.4 Gbit/s); faster classes add the 64-bit attributes
_U64 = struct.Struct("=Q")
_U32 = struct.Struct("=I")
TC_LINKLAYER_ETHERNET = 1  # with a link layer set, the kernel needs no rate table
NLA_F_NESTED = 0x8000
_RATESPEC = struct.Struct("=BBHhHI")  # cell_log, linklayer, overhead, cell_align, mpu, rate (bytes/s)
_HTB_OPT_TAIL = struct.Struct("=IIIII")  # buffer, cbuffer (ticks), quantum, level, prio


def _nla(typ: int, payload: bytes) -> bytes:
    head = _RTA.pack(4 + len(payload), typ)
    return head + payload + b"\0" * ((-len(payload)) % 4)


NLM_F_EXCL, NLM_F_CREATE = 0x200, 0x400
CLASS_CHANGE = NLM_F_REQUEST  # no ack: the PFC agent's pause and resume
CLASS_ADD = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL


def xmit_ticks(rate: int, size: int) -> int:
    """The time `size` bytes take at `rate` bytes/s, in the kernel's packet-scheduler ticks, rounded up. tc (and
    pyroute2 after it) truncates to whole microseconds first, which makes a two-frame burst 0 above 25 Gbit/s:
    such a class could never send two frames back to back."""
    from pyroute2.netlink.rtnl.tcmsg.common import tick_in_usec  # ticks per microsecond, from /proc/net/psched

    return math.ceil(1e6 * size / rate * tick_in_usec)


def htb_class_message(ifindex: int, handle: int, parent: int, rate_bps: int, ceil_bps: int, burst: int,
                      cburst: int, quantum: int, prio: int, flags: int = CLASS_CHANGE, seq: int = 0) -> bytes:
    """An RTM_NEWTCLASS for one HTB class: a change without ack (default), or an add (CLASS_ADD).

    With the link layer set the kernel needs no rate table, which is what makes pyroute2's encoding of
    the same class slow (a 256-entry table computed in Python per rate). A rate above 32 bits of bytes/s goes
    in TCA_HTB_RATE64 / TCA_HTB_CEIL64 with the ratespec's field at its maximum, as tc sends it."""
    rate, ceil = rate_bps // 8, ceil_bps // 8
    if not (0 < rate < 1 << 64 and 0 < ceil < 1 << 64):
        raise ValueError(f"HTB class rates are 1 to 2^64 - 1 bytes/s, not {rate} and {ceil}")
    opt = (_RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, 0, 0, min(rate, U32_MAX))
           + _RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, 0, 0, min(ceil, U32_MAX))
           + _HTB_OPT_TAIL.pack(xmit_ticks(rate, burst), xmit_ticks(ceil, cburst), quantum, 0, prio))
    attrs = _nla(TCA_HTB_PARMS, opt)
    for kind, value in ((TCA_HTB_RATE64, rate), (TCA_HTB_CEIL64, ceil)):
        if value > U32_MAX:
            attrs += _nla(kind, _U64.pack(value))
    body = (_TCMSG.pack(0, ifindex, handle, parent, 0) + _nla(TCA_KIND, b"htb\0")
            + _nla(TCA_OPTIONS | NLA_F_NESTED, attrs))
    return _NLMSG.pack(_NLMSG.size + len(body), RTM_NEWTCLASS, flags, seq, 0) + body


# -- TBF qdiscs: the lossless leaves' gate ---------------------------------------------------
TCA_TBF_PARMS, TCA_TBF_RATE64, TCA_TBF_BURST = 1, 4, 6
QDISC_CHANGE = NLM_F_REQUEST  # no ack: the PFC agent's pause and resume (tc qdisc change)
_TBF_QOPT_TAIL = struct.Struct("=III")  # limit (bytes), buffer, mtu (ticks; unused when TCA_TBF_BURST is given)


def tbf_qdisc_message(ifindex: int, handle: int, parent: int, rate_bps: int, burst: int, limit: int,
                      flags: int = QDISC_CHANGE, seq: int = 0) -> bytes:
    """An RTM_NEWQDISC for a TBF: a change without ack (default), or an add (CLASS_ADD's flags).

    The burst goes in bytes (TCA_TBF_BURST), which the kernel turns into time with 64-bit arithmetic: the
    ratespec's 32-bit tick count overflows at a paused gate's 1 byte/s (tc then prints "burst 4b"). A rate
    past 32 bits of bytes/s goes in TCA_TBF_RATE64. pyroute2's TBF has neither and computes a rate table."""
    rate = rate_bps // 8
    if not 0 < rate < 1 << 64 or not 0 < burst < 1 << 32 or not 0 <= limit < 1 << 32:
        raise ValueError(f"TBF rate 1 to 2^64 - 1 bytes/s, burst and limit 32-bit: not {rate}, {burst}, {limit}")
    opt = (_RATESPEC.pack(0, TC_LINKLAYER_ETHERNET, 0, 0, 0, min(rate, U32_MAX))
           + _RATESPEC.pack(0, 0, 0, 0, 0, 0)  # no peak rate
           + _TBF_QOPT_TAIL.pack(limit, 0, 0))
    attrs = _nla(TCA_TBF_PARMS, opt) + _nla(TCA_TBF_BURST, _U32.pack(burst))
    if rate > U32_MAX:
        attrs += _nla(TCA_TBF_RATE64, _U64.pack(rate))
    body = (_TCMSG.pack(0, ifindex, handle, parent, 0) + _nla(TCA_KIND, b"tbf\0")
            + _nla(TCA_OPTIONS | NLA_F_NESTED, attrs))
    return _NLMSG.pack(_NLMSG.size + len(body), RTM_NEWQDISC, flags, seq, 0) + body


class ClassSwitch:
    """Sends pre-encoded class and qdisc changes on a raw socket of one namespace."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.sock.setblocking(False)

    def send(self, message: bytes) -> None:
        self._raise_pending()
        self.sock.send(message)

    def _raise_pending(self) -> None:
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        _l, typ, _f, _s, _p = _NLMSG.unpack_from(data, 0)
        if typ == NLMSG_ERROR:
            err = struct.unpack_from("=i", data, _NLMSG.size)[0]
            if err:
                raise OSError(-err, "a class or qdisc change refused by the kernel")

    def close(self) -> None:
        self.sock.close()


class BatchSender:
    """Sends many pre-encoded rtnetlink requests (e.g. pyroute2's IPBatch) in few writes, checks every ack.

    One request at a time through pyroute2 costs a round trip each (about 1 ms: 8.4 s for the 64-host
    HPN's 6,000 tc changes); the kernel takes a buffer of many messages in one send and acks each.
    """

    CHUNK = 32 << 10

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind((0, 0))
        self.sock.settimeout(10)

    def close(self) -> None:
        self.sock.close()

    @staticmethod
    def messages(buf: bytes) -> list[tuple[int, int, int]]:
        """(offset, length, seq) of each netlink message in a buffer."""
        out, off = [], 0
        while off + _NLMSG.size <= len(buf):
            length, _typ, flags, seq, _pid = _NLMSG.unpack_from(buf, off)
            if length < _NLMSG.size:
                raise ValueError("malformed netlink batch")
            if not flags & NLM_F_ACK:
                raise ValueError("every request of a batch must ask for an ack")
            out.append((off, length, seq))
            off += (length + 3) & ~3
        return out

    def send(self, buf: bytes) -> int:
        """Send every message; raise OSError at the first one the kernel refused. Returns how many."""
        msgs = self.messages(buf)
        i = 0
        while i < len(msgs):
            start, size, waiting = msgs[i][0], 0, set()
            while i < len(msgs) and (not waiting or size + msgs[i][1] <= self.CHUNK):
                waiting.add(msgs[i][2])
                size = msgs[i][0] + msgs[i][1] - start
                i += 1
            self.sock.send(buf[start:start + size])
            while waiting:
                data = self.sock.recv(1 << 20)
                off = 0
                while off + _NLMSG.size <= len(data):
                    length, typ, _flags, seq, _pid = _NLMSG.unpack_from(data, off)
                    if typ == NLMSG_ERROR and seq in waiting:
                        err = struct.unpack_from("=i", data, off + _NLMSG.size)[0]
                        if err:
                            raise OSError(-err, f"netlink request {seq} of the batch refused")
                        waiting.discard(seq)
                    off += (length + 3) & ~3
        return len(msgs)
