"""Checks and counters on a running network: all-pairs ping, OVS's own port counters, interface states."""

from __future__ import annotations

import re
from dataclasses import dataclass

from topos.addressing import all_addresses
from topos.model import Topology

from .routes import OFCTL, run
from .workdir import Workdir

_DP_PORT = re.compile(r"^\s*port \d+: ", re.M)
_DP_BYTES = re.compile(r"RX bytes:(\d+).*?TX bytes:(\d+)")  # "RX bytes:133903945 (127.7 MiB)  TX bytes:..."
_PORT_STATS = re.compile(r"port\s+(\d+): rx pkts=(\d+), bytes=(\d+), drop=(\d+).*?tx pkts=(\d+), bytes=(\d+), "
                         r"drop=(\d+)", re.S)


@dataclass
class PingResult:
    sent: int
    received: int
    failures: list[tuple[str, str]]

    @property
    def loss(self) -> float:
        return 1 - self.received / self.sent if self.sent else 0.0


def ping_script(targets: list[str], timeout_s: float) -> list[str]:
    """A shell script pinging every target in parallel, printing `ok IP` or `fail IP` for each.

    A target gets a second ping if the first went unanswered: with hundreds of pings at once on a
    busy machine (128 hosts, 32,512 pairs) a handful of replies outlived the timeout (5 in one run)."""
    def once(ip: str) -> str:
        return f"ping -c1 -W{timeout_s:g} -q {ip} >/dev/null 2>&1"

    return [f"(({once(ip)} || {once(ip)}) && echo ok {ip} || echo fail {ip}) &" for ip in targets] + ["wait"]


def pingall(topo: Topology, node_of, workdir: Workdir, timeout_s: float = 2.0) -> PingResult:
    """Ping every other host's every NIC address from every host, in parallel per host.

    The script goes through a file: Mininet's node.cmd() writes one line to a pty,
    and a line with a ping per target (4.4 KB at 32 hosts) never completed.
    """
    addrs = all_addresses(topo)
    sent = received = 0
    failures: list[tuple[str, str]] = []
    for h in topo.hosts:
        targets = [a.ip for a in addrs if a.host != h.name]
        out = node_of(h.name).cmd(f"sh {workdir.write(h.short + '.ping', ping_script(targets, timeout_s), h.name)}")
        results = dict(reversed(line.split()) for line in out.splitlines() if line.startswith(("ok ", "fail ")))
        for ip in targets:
            sent += 1
            if results.get(ip) == "ok":
                received += 1
            else:
                failures.append((h.name, ip))
    return PingResult(sent, received, failures)


def port_counters(topo: Topology, site_of) -> dict[str, dict[int, dict[str, int]]]:
    """tx/rx bytes and drops of every switch port, read from OVS itself (independent of the controller): one
    shell per site (`site_of(switch)`: this server's, or another server's agent) for all its switches."""
    by_site: dict[object, list[str]] = {}
    for sw in topo.switches:
        by_site.setdefault(site_of(sw.name), []).append(sw.short)
    by_short = {sw.short: sw.name for sw in topo.switches}
    out: dict[str, dict[int, dict[str, int]]] = {}
    for site, bridges in by_site.items():
        rc, text = site.sh("set -e\n" + "".join(f"echo '== {b}'\n{' '.join(OFCTL)} dump-ports {b}\n"
                                                for b in bridges))
        if rc != 0:
            raise RuntimeError(f"ovs-ofctl dump-ports failed on {site.run_id}: {text.strip()[-300:]}")
        for block in text.split("== ")[1:]:
            bridge, body = block.split("\n", 1)
            out[by_short[bridge.strip()]] = {
                int(m[0]): {"rx_packets": int(m[1]), "rx_bytes": int(m[2]), "rx_dropped": int(m[3]),
                            "tx_packets": int(m[4]), "tx_bytes": int(m[5]), "tx_dropped": int(m[6])}
                for m in _PORT_STATS.findall(body)}
    return out


def datapath_counters() -> dict[str, tuple[int, int]]:
    """Interface name -> (rx bytes, tx bytes) of every port of OVS's datapath, in one call (about 10 ms for a
    few hundred ports, where dump-ports costs a call per bridge)."""
    out = {}
    for block in _DP_PORT.split(run(["ovs-appctl", "dpctl/show", "-s"]).stdout)[1:]:
        m = _DP_BYTES.search(block)
        if m:
            out[block.split()[0]] = (int(m[1]), int(m[2]))
    return out


def operstate(ifname: str) -> str:
    """The kernel's view of a root-namespace interface: "up", "down" (admin-down or no carrier), or "gone"."""
    try:
        with open(f"/sys/class/net/{ifname}/operstate") as f:
            return f.read().strip()
    except FileNotFoundError:
        return "gone"
