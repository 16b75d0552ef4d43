"""What this kernel and machine can do, found by trying, not by guessing.

Every probe that changes anything runs inside a throw-away network namespace
(`unshare --net`): the namespace, its veths and qdiscs vanish when the probe
process exits, so probing leaves nothing behind even if it is killed. Only the
two-namespace soft-RoCE check needs named namespaces; it removes them itself.

The rest of the code asks `probe()` (or the `require_*` helpers) and turns a
missing feature into an InputError that names it and where it exists.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field, fields

from topos.errors import InputError

log = logging.getLogger(__name__)

VM_HINT = ("run it in a full-kernel VM (Debian trixie with its backports kernel, as the project VM will be: "
           "see README, 'What is on this machine'), whose kernel has it")

# Minimal arguments that make each qdisc valid on a fresh veth.
QDISC_TRIALS = {
    "htb": "htb default 1",
    "tbf": "tbf rate 1mbit burst 10k latency 50ms",
    "pfifo": "pfifo",
    "bfifo": "bfifo",
    "netem": "netem delay 1ms",
    "red": "red limit 100000 min 10000 max 30000 avpkt 1000 burst 20 probability 0.02 bandwidth 10mbit",
    "prio": "prio",
    "mqprio": "mqprio num_tc 2 map 0 1 queues 1@0 1@1 hw 0",
    "plug": "plug limit 1000",
    "fq_codel": "fq_codel",
}


@dataclass
class Capabilities:
    root: bool
    kernel: str
    ovs_running: bool
    ovs_version: str | None
    ovs_kernel_datapath: bool
    qdiscs: dict[str, bool | None]
    ingress: bool | None
    bonding: bool | None
    rdma_rxe: bool | None
    rxe_in_netns: bool | None  # None: not tried (no rxe at all, or not root)
    kvm_device: bool
    kvm_hw_virt: bool
    mininet_version: str | None
    ovs_send_buffer: int | None = None  # bytes: userspace OVS's packet socket (or the default it will get)
    notes: list[str] = field(default_factory=list)

    @property
    def datapath(self) -> str:
        """OVS datapath the network layer uses: 'kernel' where the module is, else 'user'."""
        return "kernel" if self.ovs_kernel_datapath else "user"

    @property
    def rdma_transport(self) -> bool:
        return bool(self.rxe_in_netns)

    def to_dict(self) -> dict:
        return asdict(self) | {"datapath": self.datapath}

    @classmethod
    def from_dict(cls, data: dict) -> Capabilities:
        """What to_dict gave (another server's, from its agent); keys this version does not know are left out."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    # -- preconditions ------------------------------------------------------
    def require_root(self, purpose: str) -> None:
        if not self.root:
            raise InputError(f"{purpose} needs root (network namespaces, OVS, tc)", "run it with sudo",
                             field="user", value=os.environ.get("USER") or os.getuid())

    def require_ovs(self) -> None:
        if not self.ovs_running:
            raise InputError(
                "Open vSwitch is not running (ovs-vsctl cannot reach ovsdb-server)",
                "run 'sudo scripts/bootstrap.sh' or '/usr/share/openvswitch/scripts/ovs-ctl start'",
                field="ovs", value="down")

    def require_ovs_send_buffer(self, needed: int) -> None:
        """Userspace OVS charges every packet queued in any egress qdisc to one socket's send buffer."""
        if self.datapath == "user" and self.ovs_send_buffer is not None and self.ovs_send_buffer < needed:
            raise InputError(
                f"userspace OVS's packet socket can hold {self.ovs_send_buffer} bytes in flight, less than the "
                f"{needed} the emulated switch buffers need (beyond it OVS drops silently)",
                "run 'sudo scripts/bootstrap.sh' (raises net.core.wmem_default and restarts Open vSwitch)",
                field="ovs_send_buffer", value=self.ovs_send_buffer)

    def require_qdisc(self, kind: str, purpose: str) -> None:
        if not self.qdiscs.get(kind):
            raise InputError(f"{purpose} needs the '{kind}' qdisc, which kernel {self.kernel} lacks",
                             f"{VM_HINT}, or leave out the {purpose}", field="qdisc", value=kind)


def _run(cmd: list[str], timeout: float = 10, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def ovs_db_target() -> list[str]:
    """ovs-vsctl options; HPNLAB_OVS_DB points the testbed at another ovsdb (tests use it)."""
    db = os.environ.get("HPNLAB_OVS_DB")
    return [f"--db={db}"] if db else []


def ovs_running() -> tuple[bool, str | None]:
    if not shutil.which("ovs-vsctl"):
        return False, None
    try:
        r = _run(["ovs-vsctl", *ovs_db_target(), "--timeout=3", "get", "Open_vSwitch", ".", "ovs_version"],
                 timeout=5)
    except subprocess.TimeoutExpired:
        return False, None
    return r.returncode == 0, (r.stdout.strip().strip('"') or None) if r.returncode == 0 else None


def _genl_family(name: str) -> bool:
    from pyroute2.netlink import genlmsg
    from pyroute2.netlink.generic import GenericNetlinkSocket

    sock = GenericNetlinkSocket()
    try:
        sock.bind(name, genlmsg)  # the kernel autoloads the module for a known family
        return True
    except Exception:  # noqa: BLE001 - whatever the bind raises, the family is not there
        return False
    finally:
        sock.close()


def _scratch_probe() -> dict[str, bool]:
    """Try qdiscs, bonding and rxe in a private, anonymous network namespace."""
    lines = ["ip link add v0 numtxqueues 4 type veth peer name v1 numtxqueues 4 && ip link set v0 up || exit 3"]
    for kind, args in QDISC_TRIALS.items():
        lines.append(f"tc qdisc add dev v0 root {args} 2>/dev/null && echo qdisc:{kind} && tc qdisc del dev v0 root")
    lines.append("tc qdisc add dev v0 ingress 2>/dev/null && echo ingress")
    lines.append("ip link add b0 type bond 2>/dev/null && echo bonding")
    lines.append("rdma link add hpnprobe0 type rxe netdev v0 2>/dev/null && echo rdma_rxe")
    r = _run(["unshare", "--net", "sh", "-c", "\n".join(lines)], timeout=30)
    if r.returncode == 3:
        raise RuntimeError(f"capability probe could not make a veth: {r.stderr.strip()}")
    return {line.strip(): True for line in r.stdout.splitlines()}


def _rxe_between_namespaces() -> bool:
    """An RDMA WRITE between two namespaces over rxe, as the rdma transport will do it."""
    tag = f"hpnlab-probe-{os.getpid()}"
    ns = [f"{tag}-a", f"{tag}-b"]
    server = None
    try:
        for n in ns:
            _run(["ip", "netns", "add", n], check=True)
        _run(["ip", "link", "add", "hpnpa", "netns", ns[0], "type", "veth", "peer", "name", "hpnpb", "netns", ns[1]],
             check=True)
        for n, dev, ip in ((ns[0], "hpnpa", "192.0.2.1"), (ns[1], "hpnpb", "192.0.2.2")):
            for c in (["ip", "addr", "add", f"{ip}/24", "dev", dev], ["ip", "link", "set", dev, "up"],
                      ["rdma", "link", "add", f"rxe_{dev}", "type", "rxe", "netdev", dev]):
                _run(["ip", "netns", "exec", n, *c], check=True)
        base = ["ib_write_bw", "-x", "1", "-s", "4096", "-n", "20", "-F"]
        server = subprocess.Popen(["ip", "netns", "exec", ns[0], *base, "-d", "rxe_hpnpa"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        r = _run(["ip", "netns", "exec", ns[1], *base, "-d", "rxe_hpnpb", "192.0.2.1"], timeout=30)
        return r.returncode == 0
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        log.info("rxe between namespaces failed: %s", exc)
        return False
    finally:
        if server is not None:
            server.kill()
            server.wait()
        for n in ns:
            _run(["ip", "netns", "del", n])


def _ovs_send_buffer() -> int | None:
    """tb of ovs-vswitchd's AF_PACKET socket; before its first send, the default it will be created with."""
    try:
        out = _run(["ss", "-0", "-m", "-p"]).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    for line in out.splitlines():
        if "ovs-vswitchd" in line and ",tb" in line:
            return int(line.split(",tb", 1)[1].split(",", 1)[0])
    try:
        return int(open("/proc/sys/net/core/wmem_default").read())
    except OSError:
        return None


def _mininet_version() -> str | None:
    try:
        from mininet.net import VERSION  # noqa: PLC0415 - optional, only for reporting

        return VERSION
    except ImportError:
        return None


@functools.lru_cache(maxsize=1)
def probe() -> Capabilities:
    root = os.geteuid() == 0
    running, version = ovs_running()
    notes: list[str] = []
    found: dict[str, bool] = {}
    if root:
        found = _scratch_probe()
    else:
        notes.append("not root: qdisc, bonding and rxe checks skipped")
    unknown = None if not root else False
    qdiscs = {k: found.get(f"qdisc:{k}", unknown) for k in QDISC_TRIALS}
    rxe = found.get("rdma_rxe", unknown)
    rxe_ns = None
    if rxe and shutil.which("ib_write_bw"):
        rxe_ns = _rxe_between_namespaces()
    kvm_hw = False
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
        kvm_hw = " vmx" in flags or " svm" in flags
    except OSError:
        pass
    caps = Capabilities(
        root=root, kernel=platform.release(), ovs_running=running, ovs_version=version,
        ovs_kernel_datapath=_genl_family("ovs_datapath"), qdiscs=qdiscs, ingress=found.get("ingress", unknown),
        bonding=found.get("bonding", unknown), rdma_rxe=rxe, rxe_in_netns=rxe_ns,
        kvm_device=os.path.exists("/dev/kvm"), kvm_hw_virt=kvm_hw, mininet_version=_mininet_version(),
        ovs_send_buffer=_ovs_send_buffer() if running else None, notes=notes)
    if not caps.ovs_kernel_datapath:
        caps.notes.append("OVS uses the userspace datapath (netdev); offloads are turned off on every interface")
    if not caps.qdiscs.get("netem"):
        caps.notes.append("no netem: link delay/loss only in the VM")
    if not caps.rxe_in_netns:
        caps.notes.append("no soft-RoCE between namespaces: transport 'auto' uses TCP")
    if caps.kvm_device and not kvm_hw:
        caps.notes.append("/dev/kvm without vmx/svm: the VM tier runs under TCG emulation")
    return caps
