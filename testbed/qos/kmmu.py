"""802.1Qbb's ingress accounting in the kernel (`pfc.model: ingress`, bpf/mmu.bpf.h): each switch's buffer and
ports planned from the run's ports (`plan_mmu`, pure), the maps set from the plan (`load_mmu`), and the accounts
read back (`IngressAccounts`).

Numbers per switch, as ns-3's switch MMU keeps them (testbed/qos/mmu.py; HPCC's defaults, `qos.pfc.mmu`), in
emulated bytes:
    headroom of an ingress port = its link's rate x the reaction the headroom covers + what the emulator adds
                                  (spec.fixed_headroom for one link: an OVS batch, two frames, the gate's frame)
    reserve, resume offset      = the configured figures scaled like the links, at least 2 frames and 1 frame
    buffer                      = buffer_bytes scaled; auto: HPCC's 32 MiB scaled, or where that is less, every
                                  port's headroom and reserve plus a shared part in which one port alone reaches the
                                  XOFF the egress model would give it (threshold = free / 2^shift, so a lone port
                                  pauses at shared / (2^shift + 1))
    a switch port's lossless queue limit = its switch's buffer: the accounts, not the queue, decide the pause

Which ingress port a frame came by: its source MAC, a host NIC's (read from the kernel here) or, between
switches, the upstream port's own (`port_mac`), which that port's egress program writes as a router does.
"""

from __future__ import annotations

import fcntl
import mmap
import socket
import struct
from dataclasses import dataclass, replace

from testbed.system.bpf import BpfObject
from testbed.system.netns import in_netns
from topos.errors import InputError
from traffic.transports.tcp import AGENT_PORTS

from .mmu import MmuConfig, alpha_shift
from .ports import Port, queue_key
from .spec import MTU, QosSpec, fixed_headroom

PRIORITIES = 8
MAX_LOCAL = 256  # mmu.bpf.h: ports of one switch, at most
HPCC_BUFFER = MmuConfig().buffer_bytes
_ACCOUNT = struct.Struct("=QQQQIIIIII")  # struct ingress_account
_BYTES, _MAX_BYTES, _MAX_OVER, _LAST_NS, _WATCHED, _PAUSED, _XOFF_EVENTS, _SHIFT, _BUFFER, _PAD = range(10)
_PAUSED_AT = 4 * 8 + 4  # its byte offset: after four u64s and `watched`
_BUFFER_S = struct.Struct("=QQII")  # struct switch_buffer
_SLOT = struct.Struct("=II")  # struct slot_info
_U32 = struct.Struct("=I")
SIOCGIFHWADDR = 0x8927


@dataclass(frozen=True)
class IngressPort:
    """A switch port as its switch's MMU sees it."""

    slot: int  # its slot in the kernel's maps (the order of the ports the programs watch)
    switch: int  # its switch's index in MmuPlan.switches
    local: int  # its number among its switch's ports
    shift: int  # alpha = 2^-shift
    headroom: dict[int, int]  # per lossless priority, bytes


@dataclass(frozen=True)
class SwitchBuffer:
    node: str
    buffer: int
    free_base: int  # the buffer less every port's headroom and reserve
    reserve: int
    resume_offset: int


@dataclass(frozen=True)
class MmuPlan:
    ports: dict[str, IngressPort]  # switch ports by key
    switches: list[SwitchBuffer]
    per_switch: int  # the most ports of one switch (the held bytes' stride)
    acks_high: int = 0  # ack_priority: 0x100 | the agents' port high byte (bpf/mmu.bpf.h to_high_class); 0: off


def _headroom(p: Port, spec: QosSpec) -> dict[int, int]:
    derived = int(p.plan.rate_bps / 8 * spec.pfc.reaction_s()) + fixed_headroom(1)
    return {c.priority: next(v for v in (c.headroom_bytes, spec.pfc.headroom_bytes, derived) if v is not None)
            for c in spec.lossless}


def _buffer(node: str, ports: list[Port], plan: dict[str, IngressPort], spec: QosSpec) -> SwitchBuffer:
    m, scale = spec.pfc.mmu, spec.scale
    reserve = max(2 * MTU, round(m.reserve_bytes / scale))
    resume = max(MTU, round(m.resume_offset_bytes / scale))
    fixed = sum(h + reserve for p in ports for h in plan[p.key].headroom.values())
    if m.buffer_bytes != "auto":
        buffer = round(m.buffer_bytes / scale)
    else:
        xoff = max(q.xoff for p in ports for q in p.plan.lossless.values())
        buffer = max(round(HPCC_BUFFER / scale), fixed + ((1 << m.alpha_shift) + 1) * xoff)
    if buffer <= fixed:
        raise InputError(f"switch {node}'s ports take {fixed:,} B of headroom and reserve, the whole buffer "
                         f"({buffer:,} B emulated)", f"a buffer_bytes above {fixed * scale:,.0f}, or auto",
                         field="qos.pfc.mmu.buffer_bytes", value=m.buffer_bytes)
    return SwitchBuffer(node, buffer, buffer - fixed, reserve, resume)


def plan_mmu(ports: list[Port], spec: QosSpec) -> MmuPlan:
    """Every switch's buffer and ports (`ports`: the order the kernel's slots take)."""
    by_switch: dict[str, list[Port]] = {}
    for p in ports:
        if not p.is_host:
            by_switch.setdefault(p.node, []).append(p)
    per_switch = max((len(ps) for ps in by_switch.values()), default=1)
    if per_switch > MAX_LOCAL:
        raise InputError(f"a switch with {per_switch} ports: model ingress counts at most {MAX_LOCAL} per switch",
                         "model: egress", field="qos.pfc.model", value="ingress")
    local = {p.key: i for ps in by_switch.values() for i, p in enumerate(sorted(ps, key=lambda q: q.port))}
    nic = min((p.plan.rate_bps for p in ports if p.is_host), default=None)
    slot = {p.key: i for i, p in enumerate(ports)}
    index = {node: i for i, node in enumerate(by_switch)}
    plan = {p.key: IngressPort(slot[p.key], index[node], local[p.key],
                               alpha_shift(p.plan.rate_bps, nic or p.plan.rate_bps, spec.pfc.mmu.alpha_shift),
                               _headroom(p, spec)) for node, ps in by_switch.items() for p in ps}
    switches = [_buffer(node, ps, plan, spec) for node, ps in by_switch.items()]
    # the acknowledgements the shaper sends to the high class are no lossless queue's (shaper.agent_ack_keys)
    acks_high = 0x100 | AGENT_PORTS[0] >> 8 if spec.ack_priority else 0
    return MmuPlan(plan, switches, per_switch, acks_high)


def with_mmu_limits(ports: list[Port], plan: MmuPlan) -> list[Port]:
    """The ports with each switch port's lossless queue as deep as its switch's buffer."""
    out = []
    for p in ports:
        if p.key in plan.ports:
            buffer = plan.switches[plan.ports[p.key].switch].buffer
            lossless = {prio: replace(q, limit=buffer) for prio, q in p.plan.lossless.items()}
            p = replace(p, plan=replace(p.plan, lossless=lossless))
        out.append(p)
    return out


def mmu_line(plan: MmuPlan, spec: QosSpec) -> str:
    """The buffers as a run states them before it starts."""
    sizes = [b.buffer for b in plan.switches]
    rooms = [h for ip in plan.ports.values() for h in ip.headroom.values()]
    return (f"PFC model ingress: switch buffers {min(sizes):,}-{max(sizes):,} B emulated "
            f"({min(sizes) * spec.scale / 2**20:,.1f}-{max(sizes) * spec.scale / 2**20:,.1f} MiB in the fabric's "
            f"bytes), alpha 2^-{spec.pfc.mmu.alpha_shift} at the NIC rate, headroom per ingress port "
            f"{min(rooms):,}-{max(rooms):,} B")


def map_sizes(ports: list[Port], plan: MmuPlan | None) -> dict[str, int]:
    """The maps' max_entries for these ports (1 each without the MMU: it costs nothing unused; never 0, which
    the kernel refuses: `hpnlab doctor` loads the programs for no port)."""
    n, switches, k = max(1, len(ports)), len(plan.switches) if plan else 1, plan.per_switch if plan else 1
    big = plan is not None
    return {"accounts": n * PRIORITIES if big else 1, "slots": n, "buffers": switches,
            "local_slot": switches * k if big else 1, "senders": n, "held": n * k * PRIORITIES if big else 1}


def nic_mac(netns: str | None, ifname: str) -> bytes:
    """An interface's MAC address, read in its namespace."""
    def read() -> bytes:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            return fcntl.ioctl(s.fileno(), SIOCGIFHWADDR, struct.pack("256s", ifname.encode()[:15]))[18:24]
    return in_netns(netns, read)


def port_mac(slot: int) -> bytes:
    """The source MAC a switch port writes on the lossless frames it sends (mmu.bpf.h's port_mac)."""
    return bytes([0x0A, ord("H"), ord("P")]) + slot.to_bytes(3, "big")


def load_mmu(obj: BpfObject, accounts: mmap.mmap, ports: list[Port], plan: MmuPlan, priorities: list[int]) -> None:
    """The plan into the programs' maps (before any port's egress program is attached)."""
    obj.update("mmu", _U32.pack(0), struct.pack("=II", plan.per_switch, plan.acks_high))
    for i, b in enumerate(plan.switches):
        obj.update("buffers", _U32.pack(i), _BUFFER_S.pack(0, b.free_base, b.reserve, b.resume_offset))
    by_key = {p.key: p for p in ports}
    for key, ip in plan.ports.items():
        obj.update("slots", _U32.pack(ip.slot), _SLOT.pack(ip.switch + 1, ip.local))
        obj.update("local_slot", _U32.pack(ip.switch * plan.per_switch + ip.local), _U32.pack(ip.slot))
        for prio in priorities:
            _ACCOUNT.pack_into(accounts, (ip.slot * PRIORITIES + prio) * _ACCOUNT.size,
                               0, 0, 0, 0, 1, 0, 0, ip.shift, ip.switch, 0)
        p = by_key[key]
        sender = by_key.get(f"{p.peer}:{p.peer_port}")  # the port at the other end, which sends into this one
        if sender is not None:
            mac = nic_mac(sender.netns, sender.ifname) if sender.is_host else port_mac(plan.ports[sender.key].slot)
            obj.update("senders", struct.pack("=I6sH", ip.switch + 1, mac, 0), _U32.pack(ip.slot))


def account_paused(mem: mmap.mmap, slot: int, prio: int) -> bool:
    """The `paused` flag of one account: the kernel's own state of that port's pause."""
    return bool(_U32.unpack_from(mem, (slot * PRIORITIES + prio) * _ACCOUNT.size + _PAUSED_AT)[0])


@dataclass(frozen=True)
class AccountFigures:
    bytes: int
    max_bytes: int
    max_over: int  # the most it stood past the dynamic threshold: what its headroom took
    paused: bool
    xoff_events: int


class IngressAccounts:
    """The accounts as the kernel keeps them (shared memory: a read is no system call)."""

    def __init__(self, mem: mmap.mmap, plan: MmuPlan, priorities: list[int]):
        self.mem, self.plan, self.priorities = mem, plan, priorities

    def figures(self, key: str, prio: int) -> AccountFigures:
        v = _ACCOUNT.unpack_from(self.mem, (self.plan.ports[key].slot * PRIORITIES + prio) * _ACCOUNT.size)
        return AccountFigures(v[_BYTES], v[_MAX_BYTES], v[_MAX_OVER], bool(v[_PAUSED]), v[_XOFF_EVENTS])

    def report(self) -> dict:
        """Per (ingress port, priority) that held anything: its figures and headroom; per switch its buffer."""
        queues = {}
        for key, ip in self.plan.ports.items():
            for prio in self.priorities:
                f = self.figures(key, prio)
                if f.max_bytes:
                    queues[queue_key(key, prio)] = {"max_bytes": f.max_bytes, "max_over": f.max_over,
                                                    "headroom": ip.headroom[prio], "xoff_events": f.xoff_events,
                                                    "bytes": f.bytes}
        return {"accounts": queues, "buffers": {b.node: {"buffer": b.buffer, "shared": b.free_base,
                                                        "reserve": b.reserve, "resume_offset": b.resume_offset}
                                               for b in self.plan.switches}}
