"""Host-side set-up inside each Mininet host: sysctls, addresses on both NIC ports, static neighbours.

Both ports of a NIC carry the NIC's IP and MAC (HPN's non-stacked dual-ToR);
routes are the RouteInstaller's business.
"""

from __future__ import annotations

from topos.addressing import NicAddress, all_addresses, nic_address
from topos.model import Topology

from .links import host_offloads_line
from .naming import host_intfs
from .static_routes import pin_rules
from .workdir import Workdir

HOST_SYSCTLS = [
    "sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1",
    # one IP on two ports: reverse-path filtering would drop the asymmetric half
    "sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0",
    "sysctl -qw net.ipv4.conf.all.ignore_routes_with_linkdown=1",
    # hash flows (5-tuple), not host pairs, over a NIC's two ports, as RoCE NICs do
    "sysctl -qw net.ipv4.fib_multipath_hash_policy=1",
    # collectives reuse idle connections between steps: keep their window, as RDMA QPs do
    "sysctl -qw net.ipv4.tcp_slow_start_after_idle=0",
]


TCP_RTO_MIN_US = 200_000  # Linux's TCP_RTO_MIN
TCP_RTO_MAX_US = 120_000_000  # TCP_RTO_MAX: no timeout waits longer


def neighbour_lines(host: str, nic: int, ifname: str, addrs: list[NicAddress]) -> list[str]:
    return [f"neigh replace {d.ip} lladdr {d.mac} dev {ifname} nud permanent"
            for d in addrs if d.nic == nic and d.host != host]


class Hosts:
    """Configures the hosts of a started Mininet network (`node_of(name)` gives a Mininet host)."""

    def __init__(self, topo: Topology, node_of, workdir: Workdir, mtu: int | None = None):
        self.topo, self.node_of, self.workdir = topo, node_of, workdir
        self.mtu = mtu  # spread over servers: what a tunnel between them carries (a frame never meets a smaller one)
        self.addrs = all_addresses(topo)

    def _run(self, host, what: str, sh: str) -> None:
        out = self.node_of(host.name).cmd(sh)
        if out.strip():
            raise RuntimeError(f"{what} on {host.name}: {out.strip()}")

    def configure(self, static_neighbours: bool) -> None:
        """Addresses, MACs and sysctls; with static routing also every neighbour (the fabric carries no ARP)."""
        for h in self.topo.hosts:
            sh = list(HOST_SYSCTLS)
            batch = []
            node = self.node_of(h.name)
            for (nic, _port), ifname in sorted(host_intfs(self.topo, h.name).items()):
                a = nic_address(h, nic)
                sh += [f"sysctl -qw net.ipv4.conf.{ifname}.rp_filter=0 "
                       f"net.ipv4.conf.{ifname}.ignore_routes_with_linkdown=1",
                       host_offloads_line(ifname)]
                batch += [f"addr flush dev {ifname}", f"link set dev {ifname} address {a.mac}",
                          f"addr add {a.ip}/32 dev {ifname}",
                          f"link set dev {ifname}" + (f" mtu {self.mtu}" if self.mtu else "") + " up"]
                if static_neighbours:
                    batch += neighbour_lines(h.name, nic, ifname, self.addrs)
                node.intf(ifname).ip = a.ip
                node.intf(ifname).prefixLen = 32
            batch += pin_rules(max(l.nic_port for l in self.topo.links_of(h.name)) + 1)
            self._run(h, "configuring", f"sh {self.workdir.write(h.short + '.sh', sh, h.name)}; "
                                        f"ip -batch {self.workdir.write(h.short + '.ip', batch, h.name)} 2>&1")

    def dilate_tcp_timers(self, dilation: float) -> list[str]:
        """TCP's minimum retransmission timeout x `dilation` in every host (capped at TCP's 120 s maximum); returns
        the hosts whose kernel has no per-namespace tcp_rto_min_us (Linux 6.11+) and kept theirs.

        The hosts' TCP runs on the wall clock: under time dilation D its 200 ms minimum RTO is 200/D ms of the
        fabric's time, while the queues it waits behind are D times longer in wall time. Measured at D = 1000: an
        all-reduce ran at 30-50% of its ideal rate in 5 of 8 runs, with 3-5 TCP timeouts and spurious RTOs and
        nothing dropped in the shapers. (A delayed ACK's 40 ms stays wall time: an emulator latency, shrunk by D.)"""
        return self._sysctl("tcp_rto_min_us", min(int(TCP_RTO_MIN_US * dilation), TCP_RTO_MAX_US))

    def cap_tcp_rto(self, max_s: float, dilation: float) -> list[str]:
        """TCP's retransmission timeout never above `max_s` of the fabric's time in every host (its backoff
        stops doubling there, as a RoCE NIC retries on a fixed timer: NCCL_IB_TIMEOUT 18 is 1.07 s); returns the
        hosts whose kernel has no per-namespace tcp_rto_max_ms (Linux 6.15+) and kept theirs."""
        return self._sysctl("tcp_rto_max_ms", max(1000, min(int(max_s * dilation * 1000), TCP_RTO_MAX_US // 1000)))

    def _sysctl(self, knob: str, value: int) -> list[str]:
        """net.ipv4.`knob` = value in every host's namespace; the hosts whose kernel has no such knob."""
        path = f"/proc/sys/net/ipv4/{knob}"
        kept = []
        for h in self.topo.hosts:
            out = self.node_of(h.name).cmd(f"[ -e {path} ] && sysctl -qw net.ipv4.{knob}={value} || echo missing")
            if "missing" in out:
                kept.append(h.name)
            elif out.strip():
                raise RuntimeError(f"{knob} on {h.name}: {out.strip()}")
        return kept

    def static_neighbours(self) -> None:
        """Every host port knows its rail's peers' MACs (as static routing sets up anyway).

        soft-RoCE resolves the peer's MAC when a queue pair connects, with a short
        timeout; an ARP answer from the controller can come later than that on a
        slow machine, and the connect fails ("Failed to modify QP to RTR").
        """
        for h in self.topo.hosts:
            batch = [line for (nic, _port), ifname in sorted(host_intfs(self.topo, h.name).items())
                     for line in neighbour_lines(h.name, nic, ifname, self.addrs)]
            self._run(h, "neighbours", f"ip -batch {self.workdir.write(h.short + '.neigh', batch, h.name)} 2>&1")
