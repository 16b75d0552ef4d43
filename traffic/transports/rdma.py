"""RDMA transport: each flow is a real RDMA WRITE over soft-RoCE (rdma_rxe), run by perftest's ib_write_bw.

Every host interface gets its own rxe device, created inside the host's network
namespace (`rdma link add rxe-h1-eth0 type rxe netdev h1-eth0`); rxe sends out
of the netdev it sits on, so the device chooses the NIC port, that is the plane.
Both ports of a dual-ToR NIC carry the same IP, and an incoming packet only
finds its queue pair on the device of the port it arrives on: a flow therefore
uses channel c's port at both ends (on a dual-plane fabric plane c stays plane c
end to end), or, in precise mode, the ports at the two ends of the path the
controller chose.

The UDP source port of a RoCEv2 queue pair is what ECMP hashes and what precise
routing pins. rxe derives it from the flow label (rdma_get_udp_sport:
0xC000 | low 14 bits, xor the high 6); the client is started with
`--flow_label`, so the port is known before the first byte and is declared with
the flow. The VM tier checks it against a capture.
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field

from topos.addressing import nic_address

from .listening import wait_listening
from .tcp import FlowRecord, wait_for_flows

ROCE_PORT = 4791
SPORT_MIN = 0xC000
GID_INDEX = 1  # RoCE v2, ::ffff:a.b.c.d
CTRL_PORT_BASE = 18515  # perftest's out-of-band TCP port; one per concurrent flow into a host
MAX_MSG = 1 << 20
MIN_ITERS = 5  # perftest refuses fewer iterations
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", re.M)


def flow_label_for(sport: int) -> int:
    """The flow label whose RoCEv2 UDP source port (as rxe computes it) is `sport`."""
    if not SPORT_MIN <= sport <= 0xFFFF:
        raise ValueError(f"RoCEv2 source ports are 0xC000-0xFFFF, not {sport}")
    return sport - SPORT_MIN


def udp_sport(flow_label: int, lqpn: int = 0, rqpn: int = 0) -> int:
    """rdma_get_udp_sport() of include/rdma/ib_verbs.h: what rxe puts in the UDP source port."""
    fl = flow_label
    if not fl:
        v = lqpn * rqpn
        v ^= v >> 20
        v ^= v >> 40
        fl = v & 0xFFFFF
    low, high = fl & 0x3FFF, fl & 0xFC000
    return (low ^ (high >> 14)) | SPORT_MIN


def split_bytes(nbytes: int) -> tuple[int, int]:
    """(message size, iterations) with size x iterations == nbytes where a divisor allows, else just above."""
    if nbytes <= 0:
        raise ValueError("a flow carries at least one byte")
    lo = max(MIN_ITERS, -(-nbytes // MAX_MSG))
    for n in range(lo, lo + 4096):
        if nbytes % n == 0:
            return nbytes // n, n
    n = lo
    return -(-nbytes // n), n


def parse_perftest(out: str) -> dict | None:
    """The result row of ib_write_bw --report_gbits: bytes per message, iterations, peak and average Gbit/s."""
    m = _ROW.findall(out)
    if not m:
        return None
    size, iters, peak, avg, mpps = m[-1]
    return {"msg": int(size), "iters": int(iters), "peak_gbps": float(peak), "avg_gbps": float(avg)}


@dataclass
class RdmaTransport:
    net: object  # testbed.net.network.Network
    tos: int = 0
    port: int = ROCE_PORT  # what a declared flow's destination port is
    dport: int = ROCE_PORT
    proto: str = "udp"
    sport_base: int = SPORT_MIN
    sport_span: int = 0x4000
    ctrl_base: int = CTRL_PORT_BASE  # jobs side by side: disjoint perftest control ports
    records: dict[str, FlowRecord] = field(default_factory=dict)

    def __post_init__(self):
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._news: list[str] = []  # ids finished since the waiter last looked
        self._ctrl_ports: dict[str, set[int]] = {}
        self._pins: dict[tuple[str, str, int], tuple[int, int]] = {}  # (src, dst ip, sport) -> (src port, dst port)
        self.devices: dict[tuple[str, int, int], str] = {}  # (host, nic, port) -> rxe device
        self._created: list[tuple[str, str]] = []  # (host, device) this transport added and deletes

    # -- devices ---------------------------------------------------------------
    def _rdma(self, host: str, *args: str) -> tuple[int, str]:
        p = self.net.popen(host, ["rdma", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out, _ = p.communicate(timeout=30)
        return p.returncode, out

    def start(self) -> None:
        """An rxe device on every host port, from inside the host's namespace (a second job reuses them)."""
        topo = self.net.topo
        self.net.static_neighbours()
        for h in topo.hosts:
            have = self._rdma(h.name, "link", "show")[1]
            for l in topo.links_of(h.name):
                if l.kind != "host-tor":
                    continue
                ifname = self.net.intf_name(h.name, l.a_port)
                dev = f"rxe-{ifname}"
                if f"link {dev}/" not in have:
                    rc, out = self._rdma(h.name, "link", "add", dev, "type", "rxe", "netdev", ifname)
                    if rc != 0:
                        raise RuntimeError(f"rxe on {h.name}:{ifname}: {out.strip()} (is rdma_rxe loaded?)")
                    self._created.append((h.name, dev))
                self.devices[h.name, l.nic, l.nic_port] = dev

    def stop(self) -> None:
        for host, dev in self._created:
            self._rdma(host, "link", "delete", dev)
        self._created.clear()
        self.devices.clear()

    def pin(self, view: dict) -> None:
        """A precise path: the source port the controller chose and the destination port the path ends on."""
        e, path = view.get("egress"), view.get("path")
        if not e or not path:
            return
        topo, last = self.net.topo, path[-1]
        # the egress is the source host's interface index; devices are keyed by NIC port
        src_link = next(l for l in topo.links_of(view["src"]) if l.a == view["src"] and l.a_port == e["port"])
        dst_link = next(l for l in topo.links_of(last["switch"]) if l.port_of(last["switch"]) == last["port"])
        self._pins[view["src"], view["dst"], int(view["sport"])] = (src_link.nic_port, dst_link.nic_port)

    # -- flows -----------------------------------------------------------------
    def _ports(self, src: str, dst_ip: str, sport: int, channel: int) -> tuple[int, int]:
        pinned = self._pins.get((src, dst_ip, sport))
        if pinned:
            return pinned
        p = self.net.topo.params
        if p.get("dual_tor") and not p.get("dual_plane"):
            # one plane, two ToRs: a hash upstream may deliver to the NIC's other port, whose rxe device
            # has no such queue pair (a real NIC bonds its ports into one RDMA device)
            raise RuntimeError("the rdma transport on a single-plane dual-ToR fabric needs routing precise "
                               "(the controller's path fixes the receiving port)")
        return channel, channel  # dual-plane: the plane a flow enters is the plane it leaves

    def _ctrl_port(self, dst: str) -> int:
        with self._lock:
            used = self._ctrl_ports.setdefault(dst, set())
            p = next(p for p in range(self.ctrl_base, self.ctrl_base + 1000) if p not in used)
            used.add(p)
            return p

    def _release(self, dst: str, port: int) -> None:
        with self._lock:
            self._ctrl_ports[dst].discard(port)

    def send(self, fid: str, src: str, dst_ip: str, nbytes: int, sport: int = 0, nic: int = 0,
             channel: int = 0) -> FlowRecord:
        rec = FlowRecord(fid, src, dst_ip, nbytes, sport)
        with self._lock:
            self.records[fid] = rec
        threading.Thread(target=self._run, args=(rec, nic, channel), daemon=True).start()
        return rec

    def _output(self, host: str, cmd: list[str]) -> str:
        # a short query waited for right here: not worth an ownership record per poll
        p = self.net.node(host).popen(cmd, stdout=subprocess.PIPE, text=True)
        return p.communicate(timeout=30)[0]

    def _run(self, rec: FlowRecord, src_nic: int, channel: int) -> None:
        try:
            self._transfer(rec, src_nic, channel)
        except Exception as exc:  # noqa: BLE001 - a flow that cannot run is a failed flow, not a hung step
            self._finish(rec, error=f"{type(exc).__name__}: {exc}")

    def _transfer(self, rec: FlowRecord, src_nic: int, channel: int) -> None:
        dst_addr = self.net.graph.by_ip[rec.dst_ip]
        dst, dst_nic = dst_addr.host, dst_addr.nic
        sp, dp = self._ports(rec.src, rec.dst_ip, rec.sport, channel)
        try:
            sdev = self.devices[rec.src, src_nic, sp]
            ddev = self.devices[dst, dst_nic, dp]
        except KeyError as exc:
            return self._finish(rec, error=f"no rxe device for {exc}")
        msg, iters = split_bytes(rec.bytes)
        ctrl = self._ctrl_port(dst)
        tclass = ["--tclass", str(self.tos)] if self.tos else []
        base = ["ib_write_bw", "-x", str(GID_INDEX), "-s", str(msg), "-n", str(iters), "-p", str(ctrl), "-F",
                "--report_gbits", *tclass]
        server = client = None
        try:
            server = self.net.popen(dst, [*base, "-d", ddev], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            if not wait_listening(lambda cmd: self._output(dst, cmd), ctrl, server, timeout=60):
                server.kill()
                return self._finish(rec, error=f"ib_write_bw server on {dst} did not listen: "
                                               f"{server.communicate()[0].strip()[-200:]}")
            start = time.time()
            label = flow_label_for(rec.sport) if rec.sport else 0
            client = self.net.popen(rec.src, [*base, "-d", sdev, "--flow_label", str(label), rec.dst_ip],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            cout, cerr = client.communicate()
            end = time.time()
            try:  # its own table, and its errors if it failed; the client's report says what moved
                sout, _ = server.communicate(timeout=60 if client.returncode == 0 else 5)
            except subprocess.TimeoutExpired:
                # Under TCG a server that saw every write sometimes never exits: the flow is the
                # client's to judge, and a failed client is reported as such, not as a server timeout.
                sout = "(the server did not exit)"
        finally:
            for p in (client, server):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
            self._release(dst, ctrl)
        row = parse_perftest(cout)
        if client.returncode != 0 or row is None:
            why = (cerr.strip() or cout.strip()[-300:]).replace("\n", " | ")
            return self._finish(rec, error=f"ib_write_bw {rec.src} -> {rec.dst_ip} failed (exit {client.returncode}): "
                                           f"{why}; server: {sout.strip()[-200:]}")
        moved = row["msg"] * row["iters"]
        src_ip = nic_address(self.net.topo.nodes[rec.src], src_nic).ip
        sport = udp_sport(label)
        common = {"bytes": moved, "start": start, "end": end}
        self._finish(rec, sent=common | {"five_tuple": [src_ip, sport, rec.dst_ip, ROCE_PORT, "udp"],
                                         "device": sdev, "gbps": row["avg_gbps"], "perftest": row},
                     recv=common | {"device": ddev, "server_exit": server.returncode})

    def _finish(self, rec: FlowRecord, error: str | None = None, sent: dict | None = None,
                recv: dict | None = None) -> None:
        with self._done:
            rec.error, rec.sent, rec.recv = error, sent, recv
            self._news.append(rec.id)
            self._done.notify_all()

    def wait(self, ids: list[str], timeout: float) -> list[FlowRecord]:
        def news(s: float) -> list[str]:
            with self._done:
                if not self._news:
                    self._done.wait(s)
                out, self._news = self._news, []
                return out

        return wait_for_flows(ids, timeout, self._lock, self.records, news)
