"""`hpnlab doctor --cluster FILE`: each server checked before anything starts on it.

Per server, one SSH command (one login; the first server runs the same script locally) reports its clock, its
`hpnlab doctor --json` (Mininet, OVS, datapath, kernel), whether its kernel makes the cluster's tunnel device
(tried in a throw-away network namespace, so nothing is left), and whether `tunnel_ip` is one of its
addresses. `findings` turns that into verdicts; it is pure, so the rules are unit-tested without servers.
"""

from __future__ import annotations

import json
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .servers import run_once
from .spec import ClusterSpec, Server

CLOCK_SKEW_S = 0.5  # flow times are taken on the sender and the receiver, which may be on different servers
SEPARATOR = "--- hpnlab doctor ---"
TUNNEL_TRIAL = {"vxlan": "ip link add hpnlab-dt type vxlan id 1 dstport 4789",
                "gre": "ip link add hpnlab-dt type gretap remote 127.0.0.2 key 1",
                "ssh": "ip tuntap add dev hpnlab-dt mode tap"}


def script(server: Server, hpnlab_dir: str, tunnel: str, sudo: str = "sudo -E ") -> str:
    """`sudo`: as Mininet's cluster edition runs commands on the other servers (here, already root: '')."""
    trial = TUNNEL_TRIAL[tunnel]
    q = shlex.quote
    return (f"date +%s.%N; cd {q(hpnlab_dir)} && {sudo}.venv/bin/hpnlab doctor --json; echo {q(SEPARATOR)}; "
            f"{sudo}unshare --net sh -c {q(trial + ' && echo tunnel-ok')} 2>&1 | tail -1; "
            f"ip -o -4 addr show | grep -qw {q(str(server.tunnel_ip))} && echo tunnel-ip-ok; date +%s.%N")


@dataclass
class Report:
    server: str
    ok: bool
    checks: list[tuple[str, bool, str]] = field(default_factory=list)  # (what, ok, detail)
    capabilities: dict | None = None


def findings(server: Server, tunnel: str, rc: int, out: str, t0: float, t1: float, local: bool,
             err: str = "") -> Report:
    """Verdicts from one server's answer (its output, its errors), read between wall times t0 and t1 here."""
    checks: list[tuple[str, bool, str]] = []
    lines = out.strip().splitlines()
    if local:
        checks.append(("ssh", True, "this server"))
    else:
        reached = rc != 255 and bool(lines)
        checks.append(("ssh", reached, f"{server.dest} port {server.port}, {t1 - t0:.1f} s" if reached else
                       (err.strip().splitlines() or [f"ssh exit {rc}"])[-1]))
        if not reached:
            return Report(server.name, False, checks)
    try:
        first, last = float(lines[0]), float(lines[-1])
    except (ValueError, IndexError):
        first = last = None
    if first is not None:
        # its clock was read first just after t0 and last just before t1: behind t0 or ahead of t1 is skew
        off = max(t0 - first, last - t1, 0.0)
        checks.append(("clock", off <= CLOCK_SKEW_S, f"within {off * 1e3:.0f} ms of this server's"
                       + ("" if off <= CLOCK_SKEW_S else f" (more than {CLOCK_SKEW_S} s: run chrony or ntpd)")))
    body, _, tail = "\n".join(lines[1:-1]).partition(SEPARATOR)
    try:
        caps = json.loads(body)
    except ValueError:
        checks.append(("hpnlab", False, ((body + err).strip().splitlines() or ["no answer"])[-1][:160]
                       + " (install the same checkout at the same path: sudo scripts/bootstrap.sh)"))
        return Report(server.name, False, checks)
    checks.append(("hpnlab", True, "doctor answered"))
    checks.append(("root", bool(caps.get("root")), "" if caps.get("root") else "sudo must work without a password"))
    checks.append(("Mininet", caps.get("mininet_version") is not None, caps.get("mininet_version") or "missing"))
    checks.append(("Open vSwitch", bool(caps.get("ovs_running")),
                   f"{caps.get('ovs_version')}, datapath {caps.get('datapath')}" if caps.get("ovs_running")
                   else "not running: sudo scripts/bootstrap.sh"))
    checks.append((f"{tunnel} tunnels", "tunnel-ok" in tail, "the kernel makes them" if "tunnel-ok" in tail
                   else f"the kernel refused a {tunnel} device: choose another tunnel kind"))
    checks.append(("tunnel_ip", "tunnel-ip-ok" in tail, f"{server.tunnel_ip} is "
                   + ("" if "tunnel-ip-ok" in tail else "not ") + "an address of this server"))
    return Report(server.name, all(ok for _, ok, _ in checks), checks, caps)


def check(spec: ClusterSpec, hpnlab_dir: str, timeout: float = 180) -> list[Report]:
    def one(i_server: tuple[int, Server]) -> Report:
        i, server = i_server
        sh = script(server, hpnlab_dir, spec.tunnel, "" if i == 0 else "sudo -E ")
        t0 = time.time()
        rc, out, err = run_once(["sh", "-c", sh] if i == 0 else server.ssh_argv(sh), timeout)
        return findings(server, spec.tunnel, rc, out, t0, time.time(), local=i == 0, err=err)

    with ThreadPoolExecutor(len(spec.servers)) as pool:
        return list(pool.map(one, enumerate(spec.servers)))
