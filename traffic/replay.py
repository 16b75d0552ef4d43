"""Run a collective's schedule on a running network, step by step, and measure it like nccl-tests.

A step's flows start together and the step ends when the slowest has been
received (a synchronous collective). Each flow is carried by `channels`
connections (like NCCL channels; by default one per port of the NIC, so both
planes of a dual-ToR NIC are used). In precise routing mode the step's
connections are declared to the controller first, with the source ports they
will use, and pinned to the host port the controller chose.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from topos.addressing import nic_address

from .collectives import Schedule
from .metrics import OpResult
from .transports.tcp import FlowRecord, TcpTransport

SPORT_BASE, SPORT_SPAN = 20000, 30000


@dataclass
class Replayer:
    net: object  # testbed.network.Network
    transport: TcpTransport
    channels: int = 2
    precise: bool = False
    step_timeout: float = 300.0

    def __post_init__(self):
        self._next_sport = 0
        self.records: list[FlowRecord] = []

    def _sport(self) -> int:
        # Fresh source ports: a port still in TIME_WAIT toward the same peer could not be reused.
        self._next_sport = (self._next_sport + 1) % SPORT_SPAN
        return SPORT_BASE + self._next_sport

    def ideal_busbw(self, schedule: Schedule) -> float:
        """What a rank can send at: its NIC's ports in use (one per channel) at their scaled rate."""
        rates = []
        for host, nic in schedule.ranks:
            links = [l for l in self.net.topo.links_of(host) if l.kind == "host-tor" and l.nic == nic]
            per_port = min(self.net.port_rate_bps(l) for l in links)
            rates.append(per_port * min(self.channels, len(links)))
        return min(rates)

    def run(self, schedule: Schedule) -> OpResult:
        topo = self.net.topo
        step_times = []
        delivered = 0
        t_op = time.monotonic()
        for k, step in enumerate(schedule.steps):
            subflows = []
            for i, f in enumerate(step):
                dst_ip = nic_address(topo.nodes[f.dst[0]], f.dst[1]).ip
                base, extra = divmod(f.bytes, self.channels)
                for c in range(self.channels):
                    nbytes = base + (1 if c < extra else 0)
                    if nbytes:
                        subflows.append((f"{k}.{i}.{c}", f.src[0], dst_ip, nbytes, self._sport()))
            declared = []
            if self.precise:
                views = self.net.controller.declare([{"src": s, "dst": d, "proto": "tcp", "sport": sp,
                                                      "dport": 9000} for _, s, d, _, sp in subflows])
                for v in views:
                    self.net.steer(v)
                declared = [v["flow"] for v in views]
            t0 = time.monotonic()
            for fid, src, dst_ip, nbytes, sport in subflows:
                self.transport.send(fid, src, dst_ip, nbytes, sport)
            recs = self.transport.wait([s[0] for s in subflows], self.step_timeout)
            step_times.append(time.monotonic() - t0)
            errors = [r for r in recs if r.error]
            if errors:
                raise RuntimeError(f"step {k}: {len(errors)} flow(s) failed, e.g. {errors[0].error}")
            delivered += sum(r.recv["bytes"] for r in recs)
            self.records += recs
            if declared:
                for v in views:
                    self.net.unsteer(v)
                self.net.controller.withdraw(declared)
        seconds = time.monotonic() - t_op
        return OpResult(schedule.op, schedule.algorithm, len(schedule.ranks), schedule.size, seconds,
                        self.ideal_busbw(schedule), step_times, delivered, schedule.total_bytes)
