"""Every check that can refuse a run, before anything on the system changes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed.qos.fit import require_shapeable
from testbed.qos.spec import QosSpec
from testbed.system.capabilities import Capabilities
from testbed.system.ownership import live_runs, tagged_bridges
from topos.errors import InputError
from topos.model import Topology

from .naming import switch_intfs

# What shaped runs need from userspace OVS's one packet socket (what bootstrap.sh gives it): every
# frame queued in any switch egress qdisc counts against it, at about twice its size (skb truesize).
OVS_SEND_BUFFER_NEEDED = 32 << 20
# Hosts one server emulates: each is a namespace with its own agent process (~30 MB), and the largest fabrics
# measured here (128 hosts on 2 cores) already ran CPU-bound. A paper-scale fabric (2,040 hosts) is refused at
# once instead of being planned for minutes; `topo show` and `topo export` take any size.
MAX_HOSTS_PER_SERVER = 256


def require_emulable(topo: Topology, servers: int = 1) -> None:
    hosts = len(topo.hosts)
    if hosts > MAX_HOSTS_PER_SERVER * servers:
        raise InputError(f"{hosts:,} hosts, more than the {MAX_HOSTS_PER_SERVER * servers:,} this testbed emulates "
                         f"on {servers} server(s)", "fewer hosts (a smaller preset, hosts_per_segment, "
                         "segments_per_pod), or more servers (--cluster)", field="topology", value=topo.kind)


def preflight(topo: Topology, caps: Capabilities, delay_ms: float | None = None, qos: QosSpec | None = None,
              servers: int = 1, kernel_reaction_ms: float | None = None) -> None:
    require_emulable(topo, servers)
    if qos is not None:
        require_shapeable(topo, qos, kernel_reaction_ms)
    require_features(caps, delay_ms, qos)
    _refuse_what_is_taken(topo)


def require_features(caps: Capabilities, delay_ms: float | None = None, qos: QosSpec | None = None,
                     server: str | None = None) -> None:
    """What the kernel and OVS of a server (this one, or another of a cluster from its agent) must have."""
    try:
        _require(caps, delay_ms, qos)
    except InputError as exc:
        if server is None:
            raise
        raise InputError(f"on server {server}: {exc.what}", exc.fix, field=exc.field, value=exc.value) from None


def _require(caps: Capabilities, delay_ms: float | None, qos: QosSpec | None) -> None:
    caps.require_root("starting a network")
    caps.require_ovs()
    if delay_ms:
        caps.require_qdisc("netem", "link delay (--delay-ms)")
    if qos is not None:
        caps.require_qdisc("htb", "link shaping")
        caps.require_ovs_send_buffer(OVS_SEND_BUFFER_NEEDED)
        if qos.delay_ms:
            caps.require_qdisc("netem", "link delay (qos.delay_ms)")
        if qos.loss_pct:
            caps.require_qdisc("netem", "link loss (qos.loss_pct)")
        if qos.ecn.enabled:
            _require_bpf("ECN marking (qos.ecn)")


def _require_bpf(purpose: str) -> None:
    from testbed.system.bpf import missing_tools

    if missing := missing_tools():
        raise InputError(f"{purpose} needs BPF programs built here; missing: {', '.join(missing)}",
                         "run make bootstrap (apt-get install clang llvm libbpf-dev libbpf1 bpftool), or set "
                         "qos.ecn.enabled: false")


def _refuse_what_is_taken(topo: Topology) -> None:
    others = live_runs()
    if others:
        r = others[0]
        raise InputError("another hpnlab network is running", "stop it first (or 'hpnlab clean --force')",
                         field="run", value=f"{r.run_id} pid {r.data['owner_pid']}")
    ours = tagged_bridges()
    out = subprocess.run(["ovs-vsctl", "list-br"], capture_output=True, text=True).stdout.split()
    for sw in topo.switches:
        if sw.short in out:
            fix = "run 'hpnlab clean' (left over from a crashed run)" if sw.short in ours else \
                "rename or remove that bridge; hpnlab will not touch what it did not create"
            raise InputError("an OVS bridge with a name this topology needs already exists", fix,
                             field="bridge", value=sw.short)
        if Path(f"/sys/class/net/{sw.short}").exists():  # a userspace bridge's tap, named like the bridge
            raise InputError("an interface named like a switch of this topology exists (a deleted userspace "
                             "bridge's tap OVS has not removed yet, or another program's)",
                             "wait a few seconds and retry; if it stays, remove it", field="interface",
                             value=sw.short)
        taken = next((i for i in switch_intfs(topo, sw.name) if Path(f"/sys/class/net/{i}").exists()), None)
        if taken is not None:
            raise InputError("an interface with a name this topology needs already exists",
                             "run 'hpnlab clean' or remove it", field="interface", value=taken)
