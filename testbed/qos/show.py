"""`hpnlab qos show`: every shaped port's classes, rates, backlogs, drops and pause state.

Works from another process: a run with QoS writes its port list next to its
ownership record (RUN_DIR/<run>.qos.json) and the PFC agent its pause state
(<run>.pfc.json); the queue counters are read live from the kernel, and with ECN
marking the packets marked CE per lossless queue from the kernel programs' own
map (named by <run>.ecn.json; kqueues.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from testbed.system.bpf import BpfUnavailable
from testbed.system.ownership import RUN_DIR, live_runs
from topos.inputs import write_file

from .kqueues import QueueMaps
from .netlink import dumper_in
from .ports import queue_key
from .spec import class_of_minor, lossless_class


def write_ports(run_id: str, ports) -> Path:
    path = RUN_DIR / f"{run_id}.qos.json"
    write_file(path, json.dumps([{"key": p.key, "ifname": p.ifname, "netns": p.netns, "ifindex": p.ifindex,
                                 "rate_bps": p.plan.rate_bps, "buffer": p.plan.buffer_bytes,
                                 "lossless": {lossless_class(prio): {"priority": prio, "xoff": q.xoff, "xon": q.xon,
                                                                     "limit": q.limit, "headroom": q.headroom}
                                              for prio, q in p.plan.lossless.items()}}
                                for p in ports]), "qos record")
    return path


def snapshot(run_id: str | None = None, node: str | None = None) -> list[dict]:
    """One row per (port, class) of a running network (the only live run if run_id is None)."""
    if run_id is None:
        runs = [r for r in live_runs() if (RUN_DIR / f"{r.run_id}.qos.json").exists()]
        if not runs:
            return []
        run_id = runs[0].run_id
    ports = json.loads((RUN_DIR / f"{run_id}.qos.json").read_text())
    pfc_file = RUN_DIR / f"{run_id}.pfc.json"
    pfc = json.loads(pfc_file.read_text()) if pfc_file.exists() else {}
    paused, events, by = set(pfc.get("paused", ())), pfc.get("pause_events", {}), pfc.get("paused_by", {})
    marks = ecn_marks(run_id)
    if node is not None:
        ports = [p for p in ports if p["key"].split(":")[0] == node]
    by_ns: dict[str | None, dict[int, dict]] = {}
    for p in ports:
        by_ns.setdefault(p["netns"], {})[p["ifindex"]] = p
    rows = []
    for ns, idx in by_ns.items():
        d = dumper_in(ns)
        try:
            stats = d.dump()
        finally:
            d.close()
        for q in stats:
            p = idx.get(q.ifindex)
            cls = class_of_minor(q.handle >> 16)
            if p is None or cls is None or q.handle & 0xFFFF:
                continue
            lossless = p["lossless"].get(cls)
            qkey = queue_key(p["key"], lossless["priority"]) if lossless else None
            rows.append({"port": p["key"], "ifname": p["ifname"], "class": cls, "rate_bps": p["rate_bps"],
                         "sent_bytes": q.bytes, "backlog": q.backlog, "drops": q.drops,
                         "paused": qkey in paused, "pause_events": events.get(qkey, 0),
                         "paused_by": by.get(qkey, []),  # the queues (model ingress: ingress ports) holding it
                         "xoff": lossless["xoff"] if lossless else None,
                         "headroom": lossless.get("headroom") if lossless else None,
                         "ecn_marks": None if marks is None or qkey is None else marks.get(qkey, 0)})
    rows.sort(key=lambda r: (r["port"], r["class"]))
    return rows


def ecn_marks(run_id: str) -> dict[str, int] | None:
    """Packets marked CE so far per lossless queue (`port/p<priority>`) of a run that marks; None without
    marking (or once its programs are gone)."""
    path = RUN_DIR / f"{run_id}.ecn.json"
    try:
        maps = QueueMaps.published(path)
    except (FileNotFoundError, BpfUnavailable):
        return None
    try:
        return {queue_key(*k): f.marks for k, f in maps.snapshot().items()}
    finally:
        maps.close()
