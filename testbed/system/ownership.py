"""Ownership of every system change a run makes, so that it can always be undone.

A run writes a record under /run/hpnlab/<run-id>.json *before* it creates each
thing (bridges, root-namespace interfaces, network namespaces) and right after
it starts each process (with the process start time, so a reused PID is never
killed). `undo()` removes what the record lists *and can prove is the run's*:
a bridge carries the run id in its external_ids from the moment it is created,
a root-namespace interface sits in the run's own link group (or on one of its
bridges), a network namespace is named `hpnlab-<run-id>-...`, a process has the
recorded start time. A record is only a list of candidates: a stale or edited
one naming `lo`, another run's bridge or a live PID removes nothing of theirs.
`hpnlab clean` undoes the records of runs whose owner process is gone, plus any
OVS bridge tagged with an hpnlab run id that has no record any more. Nothing is
found or killed by a broad name.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import uuid
import zlib
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from topos.inputs import write_file

from .capabilities import ovs_db_target
from .linkgroup import iproute, unless_vanished

log = logging.getLogger(__name__)

RUN_DIR = Path(os.environ.get("HPNLAB_RUN_DIR", "/run/hpnlab"))
BRIDGE_TAG = "hpnlab-run"
RUN_ID = r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}"  # also a file name and a glob prefix: no '.', '/', '*', '?', '['
IFNAME = r"[A-Za-z0-9_.:-]{1,15}"


class _Process(BaseModel):
    model_config = ConfigDict(strict=True)
    pid: int = Field(gt=1)
    start: int | None
    what: str = ""
    netns: bool = False  # it made its own network namespace (a host's shell): what else runs there goes with it


class RunRecord(BaseModel):
    """What a record file must hold to be acted on at all."""

    model_config = ConfigDict(strict=True)
    run_id: str = Field(pattern=f"^{RUN_ID}$")
    owner_pid: int
    owner_start: int | None = None
    started: float = 0.0
    bridges: list[Annotated[str, Field(pattern=f"^{IFNAME}$")]] = []
    interfaces: list[Annotated[str, Field(pattern=f"^{IFNAME}$")]] = []
    netns: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]] = []
    processes: list[_Process] = []


def _proc_start(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def alive(pid: int, start: int | None) -> bool:
    now = _proc_start(pid)
    return now is not None and (start is None or now == start)


def _netns_inode(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _in_their_namespaces(processes: list[dict]) -> list[dict]:
    """The other processes inside the namespaces that recorded processes made (never the root namespace's)."""
    shared = {_netns_inode(1), _netns_inode("self")}
    owners = {}
    for p in processes:
        if p.get("netns") and p.get("start") is not None and alive(p["pid"], p["start"]):
            ino = _netns_inode(p["pid"])
            if ino is not None and ino not in shared:
                owners[ino] = p
    if not owners:
        return []
    recorded = {p["pid"] for p in processes}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in recorded:
            continue
        owner = owners.get(_netns_inode(entry.name))
        start = _proc_start(int(entry.name)) if owner is not None else None
        if start is not None:
            found.append({"pid": int(entry.name), "start": start, "what": f"in the namespace of {owner['what']}"})
    return found


def _sh(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)


def _vsctl(*args: str) -> subprocess.CompletedProcess:
    return _sh("ovs-vsctl", *ovs_db_target(), "--timeout=10", *args)


def _kill(processes: list[dict]) -> list[str]:
    """SIGKILL each process that is still the one recorded (same start time), and wait until it is gone."""
    done, killed = [], []
    for p in processes:
        if p.get("start") is not None and alive(p["pid"], p["start"]):  # no start time: no proof it is ours
            try:
                os.kill(p["pid"], signal.SIGKILL)
                done.append(f"process {p['pid']} ({p['what']})")
                killed.append(p)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 2
    while killed and time.monotonic() < deadline:  # gone, not just signalled, before we report done
        killed = [p for p in killed if alive(p["pid"], p["start"]) and not _zombie(p["pid"])]
        time.sleep(0.01)
    return done


class Ownership:
    """The record of one run's system changes."""

    def __init__(self, run_id: str | None = None, data: dict[str, Any] | None = None):
        if data is None:
            run_id = run_id or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
            data = {"run_id": run_id, "owner_pid": os.getpid(), "owner_start": _proc_start(os.getpid()),
                    "started": time.time(), "bridges": [], "interfaces": [], "netns": [], "processes": []}
        self.data = data
        self.path = RUN_DIR / f"{self.data['run_id']}.json"
        self._lock = threading.Lock()  # transports start processes from several threads

    @property
    def run_id(self) -> str:
        return self.data["run_id"]

    @property
    def link_group(self) -> int:
        """A link group number of this run's own (for batched interface deletion), from its id."""
        return 0x10000000 | zlib.crc32(self.run_id.encode()) & 0x0FFFFFFF

    def _save(self) -> None:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        write_file(tmp, json.dumps(self.data), "run record")
        tmp.replace(self.path)

    @property
    def scratch(self) -> Path:
        """The run's scratch folder: its name comes from the run id, so the record names it before it exists
        and cleanup after a kill -9 finds it without trusting a path from a file."""
        return Path(tempfile.gettempdir()) / f"hpnlab-{self.run_id}"

    def make_scratch(self) -> Path:
        """The scratch folder, created after the record that owns it is on disk."""
        self.begin()
        self.scratch.mkdir(mode=0o700)
        return self.scratch

    def begin(self) -> None:
        """Write the record now, before anything exists (a server agent: the record names it as the owner)."""
        with self._lock:
            self._save()

    def intend(self, kind: str, names: list[str]) -> None:
        """Record things about to be created (bridges, interfaces, netns)."""
        with self._lock:
            new = [n for n in names if n not in self.data[kind]]
            self.data[kind].extend(new)
            self._save()

    def process(self, pid: int, what: str, netns: bool = False) -> None:
        """A process this run started; `netns`: it made its own network namespace (a Mininet host's shell), so
        every process found in that namespace at undo is this run's too (one started there over SSH, say)."""
        with self._lock:
            self.data["processes"].append({"pid": pid, "start": _proc_start(pid), "what": what}
                                          | ({"netns": True} if netns else {}))
            self._save()

    def spawn(self, args: list[str], what: str, **popen_kw) -> subprocess.Popen:
        """Start a process that runs only once it is recorded: it waits on a pipe until its record is written,
        and exits without running if this process dies first (CI: a kill -9 landing between a controller's start
        and its record left the controller behind, where `hpnlab clean` could not prove it ours)."""
        gate_r, gate_w = os.pipe()  # neither end inheritable (PEP 446): pass_fds hands the child gate_r alone
        gate = ["/bin/bash", "-c", f'read -r -u {gate_r} _ || exit 70; exec {gate_r}<&- "$@"', "gate", *args]
        try:
            proc = subprocess.Popen(gate, pass_fds=(*popen_kw.pop("pass_fds", ()), gate_r), **popen_kw)
        finally:
            os.close(gate_r)
        try:  # if the record fails, the pipe closes unwritten and the child ends without running
            self.process(proc.pid, what)
            os.write(gate_w, b"\n")
        finally:
            os.close(gate_w)
        return proc

    def owner_alive(self) -> bool:
        return alive(self.data["owner_pid"], self.data.get("owner_start"))

    def end_namespace_processes(self) -> list[str]:
        """End what else runs in the hosts' namespaces (a server a user daemonized from the CLI, `iperf3 -s -D`)
        while the hosts' shells still prove those namespaces are this run's: once the shells are gone, a
        process that outlived them holds a namespace nothing here can tell from anyone else's."""
        return _kill(_in_their_namespaces(self.data["processes"]))

    def undo(self) -> list[str]:
        """Remove what the record lists and this run provably made; idempotent; returns what was removed."""
        done = _kill(self.data["processes"] + _in_their_namespaces(self.data["processes"]))
        # Decide what is ours before removing anything: deleting a bridge detaches its ports.
        tags = ovs_bridges() if self.data["bridges"] else {}
        bridges = [b for b in self.data["bridges"] if tags.get(b) == self.run_id]
        gone = [b for b in self.data["bridges"] if b not in tags]
        interfaces = _proven_interfaces(self.data["interfaces"], self.link_group, bridges)
        if bridges:
            args: list[str] = []
            for b in bridges:
                args += ["--", "--if-exists", "del-br", b]
            _vsctl(*args)
            done += [f"bridge {b}" for b in bridges]
        # Userspace bridges leave a tap named like the bridge; veth peers die with their pair.
        for ifname in interfaces + [b for b in bridges if Path(f"/sys/class/net/{b}").exists()]:
            if Path(f"/sys/class/net/{ifname}").exists():
                _sh("ip", "link", "del", ifname)
                done.append(f"interface {ifname}")
        if gone:
            _await_taps_gone(gone, last_bridge=set(tags) <= set(bridges))
        for ns in self.data["netns"]:
            if ns.startswith(f"hpnlab-{self.run_id}-") and Path(f"/run/netns/{ns}").exists():
                _sh("ip", "netns", "del", ns)
                done.append(f"netns {ns}")
        if _ours(self.scratch):
            shutil.rmtree(self.scratch, ignore_errors=True)
            done.append(f"folder {self.scratch}")
        skipped = (set(self.data["bridges"]) - set(bridges)) | (set(self.data["interfaces"]) - set(interfaces))
        left = sorted(n for n in skipped if Path(f"/sys/class/net/{n}").exists())
        if left:
            log.warning("run %s: left %s, not provably this run's (no tag or link group of it)", self.run_id,
                        ", ".join(left))
        for f in RUN_DIR.glob(f"{self.run_id}.*"):  # the record and its companions (e.g. PFC state)
            if f.name.split(".", 1)[0] == self.run_id and not f.is_symlink():
                f.unlink(missing_ok=True)
        return done

    @classmethod
    def load_all(cls) -> list[Ownership]:
        if not RUN_DIR.is_dir():
            return []
        out = []
        for f in sorted(RUN_DIR.glob("*.json")):
            if f.name.count(".") != 1:  # <run>.pfc.json, <run>.qos.json: companions, not records
                continue
            try:
                rec = RunRecord.model_validate(json.loads(f.read_text()))
                if rec.run_id != f.stem:
                    raise ValueError(f"run_id {rec.run_id!r} is not its file's name")
            except (OSError, ValueError, RecursionError) as exc:  # pydantic's ValidationError is a ValueError
                log.warning("ignoring run record %s: %s", f, str(exc).splitlines()[0][:120])
                continue
            out.append(cls(data=rec.model_dump()))
        return out


def _ours(folder: Path) -> bool:
    """A real folder (not a link to elsewhere) owned by this user: what a run's scratch folder is."""
    try:
        st = folder.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()


def _proven_interfaces(names: list[str], group: int, bridges: list[str]) -> list[str]:
    """The named root-namespace interfaces that sit in this run's link group or on one of its bridges (one that
    vanishes while it is looked at is gone: `unless_vanished`)."""
    on_bridges = {p for b in bridges for p in _vsctl("list-ifaces", b).stdout.split()}
    out = []
    with iproute() as ipr:
        for name in names:
            with unless_vanished():
                idx = ipr.link_lookup(ifname=name)
                if idx and (name in on_bridges or ipr.get_links(idx[0])[0].get_attr("IFLA_GROUP") == group):
                    out.append(name)
    return out


def ovs_bridges() -> dict[str, str | None]:
    """Every OVS bridge: name -> the hpnlab run id it is tagged with (None: untagged)."""
    r = _vsctl("--format=json", "--columns=name,external_ids", "list", "Bridge")
    if r.returncode != 0:
        return {}
    out = {}
    for name, ext in json.loads(r.stdout)["data"]:
        ids = dict(ext[1]) if ext and ext[0] == "map" else {}
        out[name] = ids.get(BRIDGE_TAG)
    return out


def tagged_bridges() -> dict[str, str]:
    """OVS bridges carrying an hpnlab run tag: name -> run id."""
    return {name: run for name, run in ovs_bridges().items() if run is not None}


TAP_GONE_S = 10.0


def _await_taps_gone(bridges: list[str], last_bridge: bool) -> None:
    """Wait (bounded) until userspace OVS has removed the taps of bridges already deleted from its database.

    ovs-vswitchd removes a deleted bridge's tap (and with the last bridge its datapath's `ovs-netdev`) after
    its reconfiguration and an RCU grace period: up to seconds under load. A run killed during its own
    teardown leaves exactly that in flight, and `clean` then found taps of bridges no longer tagged (a CI
    run listed seven). They are not provably ours to delete, so we let OVS finish and only report what
    is still there after TAP_GONE_S."""
    names = bridges + (["ovs-netdev"] if last_bridge else [])
    deadline = time.monotonic() + TAP_GONE_S
    while any(Path(f"/sys/class/net/{n}").exists() for n in names) and time.monotonic() < deadline:
        time.sleep(0.05)


def clean(force: bool = False) -> tuple[list[str], list[str]]:
    """Undo runs whose owner died (all runs with force). Returns (removed, skipped-live-runs)."""
    removed: list[str] = []
    skipped: list[str] = []
    known = set()
    for rec in Ownership.load_all():
        known.add(rec.run_id)
        if rec.owner_alive() and not force:
            skipped.append(f"{rec.run_id} (pid {rec.data['owner_pid']} still running)")
            continue
        removed += rec.undo()
    orphans: dict[str, list[str]] = {}
    for b, run in tagged_bridges().items():
        if (run not in known or force) and re.fullmatch(RUN_ID, run):
            orphans.setdefault(run, []).append(b)
    for run, bridges in orphans.items():  # each under its own run id, so the tag proves it; ports go with them
        ports = [p for b in bridges for p in _vsctl("list-ifaces", b).stdout.split()]
        removed += Ownership(data={"run_id": run, "owner_pid": -1, "bridges": bridges, "interfaces": ports,
                                   "netns": [], "processes": []}).undo()
    return removed, skipped


def live_runs() -> list[Ownership]:
    return [r for r in Ownership.load_all() if r.owner_alive() and r.data["owner_pid"] != os.getpid()]
