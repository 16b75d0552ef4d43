"""Every lossless queue watched per packet in the kernel (bpf/queues.bpf.c), for the PFC agent.

Two programs on the qdisc enqueue and dequeue tracepoints re-read, at every
packet into or out of a watched port, the backlog of each of its lossless
leaves (the leaf qdisc's own figure) into an array this side maps into memory,
with the maximum; a queue crossing XOFF upward or XON downward puts an event on
a ring buffer. The agent sleeps on the ring buffer's descriptor; nothing is
polled. Reading `snapshot()` is a read of shared memory, no system call. Two more
on the qdisc reset and destroy tracepoints empty a watched leaf's figure when the
kernel empties it without a dequeue (a link set down resets its qdiscs), with an
XON crossing if it was above XOFF: no stale pause.

A queue is watched when its port is registered here: its (network namespace,
ifindex) in the `ports` map, its slot in `queues` marked watched with its
thresholds. A host's queue gets XOFF 0: its depth is kept, it raises no events
(a host pauses nobody).

With `mark_ecn`, a third program at each switch port's egress marks ECN-capable
lossless packets CE from the same figures (RED, or DCTCP's step) as they join the
queue; with `ecn.mark_at: dequeue`, an XDP program at the far end of each switch
port's link marks them as they leave it, on the queue behind them.

With `pfc.model: ingress` the same tracepoints also count each lossless frame's
bytes on the switch port it came in by, against the switch's shared buffer, and
the crossings are those ports' XOFF and XON (kmmu.py, bpf/mmu.bpf.h); a program
at every switch port's egress (switch_egress) names that port and marks ECN.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from pyroute2 import IPRoute

from testbed.system.bpf import BpfObject, BpfUnavailable, RingBuffer, build, mmap_by_id, mmap_fd
from testbed.system.netns import in_netns
from topos.inputs import write_file

from .kmmu import IngressAccounts, MmuPlan, account_paused, load_mmu, map_sizes, plan_mmu
from .ports import Port
from .shaper import Shaper
from .spec import LOSSLESS_MINOR, QosSpec

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("bpf") / "queues.bpf.c"
PRIORITIES = 8  # queue slot = port number * PRIORITIES + 802.1p priority
_QUEUE = struct.Struct("=IIIIIIIIIIIIQQQ")  # struct lossless_queue
_EVENT = struct.Struct("=QIIII")  # struct event
_PORT_KEY = struct.Struct("=II")
_U32 = struct.Struct("=I")
_U64 = struct.Struct("=Q")
XOFF, XON = 1, 2  # event kinds
LOST, NO_LEAF, DRAINED, UNFOLLOWED, UNNAMED, COUNTED, DISCARDED = range(7)  # counters (queues.bpf.c)
(_WATCHED, _XOFF, _XON, _ABOVE, _BACKLOG, _MAX, _XOFF_EVENTS, _KMIN, _KMAX, _PMAX, _MARKS, _MARK_AT, _LEAF,
 _READ_NS, _HELD) = range(15)
PMAX_ONE = 1 << 32  # pmax in 1/2^32
_FIELDS = {"xoff": _XOFF, "xon": _XON, "kmin": _KMIN, "kmax": _KMAX, "pmax": _PMAX, "mark_at": _MARK_AT}
MARK_ENQUEUE, MARK_DEQUEUE = 0, 1  # where a queue marks (queues.bpf.c)


@dataclass(frozen=True)
class Crossing:
    t_ns: int  # CLOCK_MONOTONIC (time.monotonic_ns) when the packet crossed the threshold
    port: str  # the queue's port key
    priority: int
    backlog: int
    xoff: bool  # True: crossed XOFF upward; False: XON downward


@dataclass(frozen=True)
class QueueFigures:
    backlog: int
    max_backlog: int
    xoff_events: int
    read_ns: int  # CLOCK_MONOTONIC of the last packet into or out of the port (when backlog was read)
    marks: int  # packets marked CE at this queue (ECN on)


@dataclass(frozen=True)
class Red:
    """ECN marking of one queue, as DCQCN's switches do it: none at or below kmin bytes, probability rising to
    pmax just below kmax, every ECN-capable packet at or above kmax."""

    kmin: int
    kmax: int
    pmax: float


def why_unavailable() -> str | None:
    """None when this machine can build, load and attach the programs (tried now, with no port watched, and
    taken out again); otherwise why not, as `hpnlab doctor` prints it."""
    try:
        KernelQueues([], []).close()
    except BpfUnavailable as exc:
        return str(exc)
    return None


def ipv4_of(port: Port) -> str:
    """The IPv4 address on a host port's interface (its NIC's), "" if it has none."""
    with in_netns(port.netns, IPRoute) as ipr:
        for a in ipr.get_addr(family=socket.AF_INET, index=port.ifindex):
            return a.get_attr("IFA_ADDRESS")
    return ""


def netns_inode(netns: str | None) -> int:
    """The inode the kernel names a network namespace by (`ns.inum`): a host's from /proc/PID/ns/net, the
    root namespace's (every switch port) from this process's own."""
    return os.stat(netns or "/proc/self/ns/net").st_ino


class QueueMaps:
    """The watched queues as their maps show them: thresholds set, crossings read, figures read. The process
    that loaded the programs has one (KernelQueues); the PFC agent's own process gets one over the same maps
    from their descriptors (`handoff`, `from_handoff`), so both see the same memory and the programs stay the
    loader's to take out."""

    def __init__(self, keys: list[str], priorities: list[int], mem: mmap.mmap, events_fd: int | None,
                 accounts: mmap.mmap | None = None):
        """accounts: the ingress accounts' memory (pfc.model ingress), slots as the queues'."""
        self.keys = keys
        self._slot = {k: i for i, k in enumerate(keys)}
        self.priorities = priorities
        self._mem = mem
        self._events_fd = events_fd
        self._accounts = accounts
        self._ring: RingBuffer | None = None  # made by the first reader: one consumer of the crossings only
        self._events: list[Crossing] = []

    @classmethod
    def from_handoff(cls, handoff: dict) -> QueueMaps:
        """Over the maps of another process's KernelQueues.handoff(), whose descriptors this process inherited."""
        accounts = handoff.get("accounts_fd")
        return cls(handoff["keys"], handoff["priorities"], mmap_fd(handoff["queues_fd"]), handoff["events_fd"],
                   None if accounts is None else mmap_fd(accounts))

    @classmethod
    def published(cls, path: Path) -> QueueMaps:
        """Read-only, the figures of a run's queues that KernelQueues.publish() named (`hpnlab qos show`, the web
        view: other processes); BpfUnavailable when they are gone."""
        d = json.loads(path.read_text())
        return cls(d["keys"], d["priorities"], mmap_by_id(d["map_id"], "queues"), None)

    def _set(self, key: str, priority: int, **fields: int) -> None:
        """Only the named fields (u32s ahead of the u64s): the kernel writes the others meanwhile."""
        at = self._at(self._slot[key], priority)
        for name, value in fields.items():
            _U32.pack_into(self._mem, at + 4 * _FIELDS[name], value)

    def pause_at(self, thresholds: dict[tuple[str, int], tuple[int, int]]) -> None:
        """(port key, priority) -> (XOFF, XON) bytes for the queues that pause someone: their crossings come
        as events."""
        for (key, prio), (xoff, xon) in thresholds.items():
            self._set(key, prio, xon=xon, xoff=xoff)  # XON first: a crossing is judged with both in place

    @staticmethod
    def _at(port: int, priority: int) -> int:
        return (port * PRIORITIES + priority) * _QUEUE.size

    def _on_event(self, raw: bytes) -> None:
        t_ns, index, backlog, kind, _ = _EVENT.unpack_from(raw)
        port, prio = divmod(index, PRIORITIES)
        self._events.append(Crossing(t_ns, self.keys[port], prio, backlog, kind == XOFF))

    @property
    def ring(self) -> RingBuffer:
        if self._ring is None:
            self._ring = RingBuffer(self._events_fd, self._on_event)
        return self._ring

    def fileno(self) -> int:
        """Readable when crossings wait (an epoll descriptor: select and poll take it)."""
        return self.ring.fileno()

    def crossings(self) -> list[Crossing]:
        """The crossings since the last call, oldest first."""
        self.ring.consume()
        out, self._events = self._events, []
        return out

    def figures(self, key: str, priority: int) -> QueueFigures:
        v = _QUEUE.unpack_from(self._mem, self._at(self._slot[key], priority))
        return QueueFigures(v[_BACKLOG], v[_MAX], v[_XOFF_EVENTS], v[_READ_NS], v[_MARKS])

    def snapshot(self) -> dict[tuple[str, int], QueueFigures]:
        """Every watched queue's figures now."""
        return {(key, prio): self.figures(key, prio) for key in self.keys for prio in self.priorities}

    def ingress_paused(self, key: str, priority: int) -> bool:
        """Whether the ingress account of switch port `key` holds its neighbour paused now (model ingress)."""
        return account_paused(self._accounts, self._slot[key], priority)

    def close(self) -> None:
        if self._accounts is not None:
            self._accounts.close()
            self._accounts = None
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        self._mem.close()


class KernelQueues(QueueMaps):
    """The programs loaded and attached for these ports; `close()` takes them out of the kernel."""

    def __init__(self, ports: list[Port], priorities: list[int], mmu: MmuPlan | None = None,
                 dscp_priority: dict[int, int] | None = None):
        """priorities: the lossless ones (every port has a queue for each). Every queue is watched for depth;
        `pause_at` gives some thresholds, `mark_ecn` some marking. mmu: count ingress ports (pfc.model
        ingress), whose crossings are then the events; dscp_priority: the lossless priorities' DSCPs."""
        self.ports = {p.key: p for p in ports}
        self._published: Path | None = None
        self.mmu = mmu
        self.accounts: IngressAccounts | None = None
        n = max(1, len(ports))
        self.obj = BpfObject(build(SOURCE, {"LOSSLESS_MINOR": LOSSLESS_MINOR}),
                             {"ports": n, "queues": n * PRIORITIES, "switch_ports": n, "far_switch_ends": n,
                              "far_host_ends": n} | map_sizes(ports, mmu),
                             tc=("mark_ecn", "switch_egress", "mark_departed", "mark_departed_host"))
        try:
            super().__init__([p.key for p in ports], priorities, self.obj.mmap("queues"), self.obj.map_fd("events"),
                             self.obj.mmap("accounts") if mmu is not None else None)
            for i in range(len(ports)):
                for prio in priorities:
                    _QUEUE.pack_into(self._mem, self._at(i, prio), 1, *[0] * _HELD)  # watched; all else 0
            for dscp, prio in (dscp_priority or {}).items():
                self.obj.update("dscp_priority", _U32.pack(dscp), _U32.pack(prio + 1))
            if mmu is not None:
                self.accounts = IngressAccounts(self._accounts, mmu, priorities)
                load_mmu(self.obj, self._accounts, ports, mmu, priorities)
            # every slot is in place before any packet can find its port
            for i, p in enumerate(ports):
                self.obj.update("ports", _PORT_KEY.pack(netns_inode(p.netns), p.ifindex), _U32.pack(i))
            if mmu is not None:  # then the frames are named by the port they came in by
                for key in mmu.ports:
                    self._egress_program(key, "switch_egress")
        except BaseException:
            self.close()
            raise

    def _egress_program(self, key: str, program: str) -> None:
        p = self.ports[key]
        if p.netns is not None:
            raise ValueError(f"{program} goes on switch ports (the root namespace); {key} is a host's")
        self.obj.update("switch_ports", _U32.pack(p.ifindex), _U32.pack(self._slot[key]))
        self.obj.attach_tc(program, p.ifindex)

    def publish(self, path: Path) -> None:
        """Where other processes find these queues' figures (QueueMaps.published): the map's id, the queues'
        keys and priorities; removed by close()."""
        write_file(path, json.dumps({"map_id": self.obj.map_id("queues"), "keys": self.keys,
                                     "priorities": self.priorities}), "queue maps record")
        self._published = path

    def handoff(self) -> dict:
        """What another process needs for a QueueMaps over these maps; it must inherit the descriptors named
        `*_fd` (subprocess pass_fds)."""
        return {"keys": self.keys, "priorities": self.priorities, "queues_fd": self.obj.map_fd("queues"),
                "events_fd": self._events_fd} | ({"accounts_fd": self.obj.map_fd("accounts")} if self.mmu else {})

    def mark_ecn(self, red: dict[tuple[str, int], Red], at_dequeue: bool = False) -> None:
        """ECN marking at these (switch) ports, for packets whose DSCP maps to a lossless priority (the DSCPs
        given at construction). At enqueue, the `tc` program goes on every port named (in this process's
        namespace: the root one), unless switch_egress, which marks too, is on every switch port already. At
        dequeue (`at_dequeue`), the XDP program goes on the far end of each port's link; a port whose far end is
        not here (another server's) marks at enqueue."""
        far = self._far_ends({k for k, _ in red}) if at_dequeue else {}
        for (key, prio), r in red.items():
            self._set(key, prio, kmin=r.kmin, kmax=r.kmax, pmax=min(PMAX_ONE - 1, int(r.pmax * PMAX_ONE)),
                      mark_at=MARK_DEQUEUE if key in far else MARK_ENQUEUE)
        for key, (end, daddr) in sorted(far.items()):
            slot = _U32.pack(self._slot[key])
            if end.netns is None:
                self.obj.update("far_switch_ends", _U32.pack(end.ifindex), slot)
            else:
                self.obj.update("far_host_ends", _U32.pack(end.ifindex) + socket.inet_aton(daddr), slot)
            self.obj.attach_xdp("mark_departed" if end.netns is None else "mark_departed_host", end.ifindex,
                                end.netns)
        if self.mmu is None:
            for key in sorted({k for k, _ in red} - far.keys()):
                self._egress_program(key, "mark_ecn")

    def _far_ends(self, keys: set[str]) -> dict[str, tuple[Port, str]]:
        """Port key -> the port at the other end of its link and, for a host's, the address frames to it are
        for (its NIC's), for those of `keys` whose other end is shaped here (not another server's) and known by
        those (queues.bpf.c)."""
        out = {}
        for key in keys:
            p = self.ports[key]
            end = self.ports.get(f"{p.peer}:{p.peer_port}")
            daddr = "" if end is None or end.netns is None else ipv4_of(end)
            if end is not None and (end.netns is None or daddr):
                out[key] = (end, daddr)
        return out

    def counter(self, which: int) -> int:
        """LOST: crossings the ring buffer had no room for; NO_LEAF: lossless classes not found under a
        watched port's root (a port shaped otherwise than shaper.py does); DRAINED: bytes a queue held by the
        ingress count when its qdisc said it was empty (frames no tracepoint saw leave); DISCARDED: bytes a reset
        or destroyed queue held (a link set down);
        UNFOLLOWED: bulk dequeues too long to follow frame by frame; UNNAMED: lossless frames whose source MAC could
        not be made their switch port's (the next switch could not count them); COUNTED: bytes counted on ingress
        ports."""
        return _U64.unpack(self.obj.lookup("counters", _U32.pack(which), 8))[0]

    def close(self) -> None:
        if self._published is not None:
            self._published.unlink(missing_ok=True)
        if hasattr(self, "_mem"):
            super().close()
        self.obj.close()


def watch_queues(shaper: Shaper, detect: str) -> tuple[KernelQueues | None, str]:
    """The shaper's lossless queues watched in the kernel, or None and why not: `detect` poll never tries, auto
    falls back (the reason logged), kernel insists (BpfUnavailable raised), and so does pfc.model ingress."""
    if detect == "poll":
        return None, ""
    spec = shaper.spec
    ports = list(shaper.ports.values())
    ingress = spec.pfc.enabled and spec.pfc.model == "ingress"
    try:
        return KernelQueues(ports, [c.priority for c in spec.lossless], plan_mmu(ports, spec) if ingress else None,
                            {c.dscp: c.priority for c in spec.lossless}), ""
    except BpfUnavailable as exc:
        if detect == "kernel" or ingress:
            raise
        log.warning("lossless queues polled instead of watched in the kernel: %s", exc)
        return None, str(exc)


def mark_ecn(shaper: Shaper, spec: QosSpec) -> KernelQueues:
    """The shaper's lossless queues watched in the kernel, with ECN marking at every switch port (spec.ecn):
    RED on each lossless queue's backlog, its thresholds the port's plan (testbed/qos/ecn.py, or as given), as
    packets join it or as they leave it (spec.ecn.mark_at)."""
    kq, _ = watch_queues(shaper, "kernel")
    try:
        red = {(p.key, c.priority): Red(p.plan.lossless[c.priority].kmin, p.plan.lossless[c.priority].kmax,
                                        spec.ecn.pmax)
               for p in shaper.ports.values() if not p.is_host for c in spec.lossless}
        kq.mark_ecn(red, at_dequeue=spec.ecn.mark_at == "dequeue")
    except BaseException:
        kq.close()
        raise
    return kq
