"""The server agent: on each server of a cluster run but the first, the owner of what the run changes there.

    python -m testbed.cluster.agent RUN_ID      (started by the master over SSH, one per server and run)

It holds the server's ownership record (/run/hpnlab/RUN_ID.json, with itself as the owner process) and a
scratch folder, and answers one JSON request per line on stdin with one JSON line on stdout:

    {"op": "hello"}                          -> this server's capabilities and versions (for the results)
    {"op": "intend", "kind": k, "names": []} -> recorded before the master creates them (bridges, interfaces)
    {"op": "process", "pid": p, "what": w, "netns": b} -> a node shell the master started here (b: a host's,
                                             whose namespace's other processes are the run's too)
    {"op": "group", "names": []}             -> interfaces put in the record's link group (the proof)
    {"op": "delete_links", "names": []}      -> those interfaces deleted in one request
    {"op": "write", "name": n, "text": t}    -> a file in the scratch folder; its path
    {"op": "sh", "script": s}                -> a root-namespace shell script's exit status and output
    {"op": "shape", "spec": q, "ports": []}  -> this server's share of the egress ports shaped (testbed.qos)
    {"op": "qos_stats", "handle": h, "keys": []} -> their qdiscs' counters, by port key
    {"op": "pfc_bind", "run_id": r, "key": k, "me": m, "bind_ip": a, "ports": [], "server_of": {}}
                                             -> this server's PFC agent made over its shaped ports (the others'
                                                ports given: it may pause them), its pause-message UDP port
    {"op": "pfc_start", "peers": {}}          -> the agents' message addresses known; it runs (pauses.py)
    {"op": "pfc_stop"} / {"op": "pfc_report", "ago": s} -> it stops; its report (polls of the last s seconds)
    {"op": "unshape"}                        -> the qdiscs removed (the PFC agent stopped first); how many
    {"op": "stop"}                           -> everything in the record undone; what was removed

When stdin ends without "stop" (the master crashed, was killed or lost its SSH connection) or on SIGTERM,
it undoes the record all the same. If the agent itself is killed, `hpnlab clean` on the server (or
`hpnlab clean --cluster FILE` from anywhere) finds its record with a dead owner and undoes it.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path

from testbed.qos.pfc import PfcAgent
from testbed.qos.ports import ports_from_json
from testbed.qos.shaper import Shaper
from testbed.qos.spec import QosSpec
from testbed.system.capabilities import probe
from testbed.system.ownership import RUN_DIR, RUN_ID, Ownership
from testbed.system.poll import json_lines
from testbed.system.signals import exit_cleanly_on_signals
from testbed.system.site import LocalSite
from testbed.system.versions import versions

from .pauses import PauseWire, start_agent

log = logging.getLogger(__name__)


class Agent:
    def __init__(self, run_id: str):
        if not re.fullmatch(RUN_ID, run_id):
            raise SystemExit(f"hpnlab agent: run id {run_id!r} is not one (letters, digits, '-' and '_')")
        self.owner = Ownership(run_id)
        # Named by the record (hpnlab-<run id>), so `hpnlab clean` removes it after a kill -9 of the agent too;
        # a random name (mkdtemp) was left behind by every killed agent.
        self.scratch = self.owner.make_scratch()
        self.site = LocalSite(self.owner, self.scratch)
        self.shaper: Shaper | None = None  # its qdiscs go with the interfaces the record deletes
        self.pfc: PfcAgent | None = None  # this server's PFC agent, and its end of the pause messages
        self.wire: PauseWire | None = None

    def handle(self, req: dict) -> dict:
        op, site = req.get("op"), self.site
        if op == "hello":
            caps = probe()
            return {"run_id": self.owner.run_id, "capabilities": caps.to_dict(), "versions": versions(caps),
                    "scratch": str(self.scratch)}
        if op in ("intend", "process", "group"):
            getattr(site, op)(**{k: v for k, v in req.items() if k != "op"})
            return {}
        if op == "delete_links":
            return {"deleted": site.delete_links(req["names"])}
        if op == "write":
            return {"path": site.write(Path(req["name"]).name, req["text"])}  # never outside the scratch folder
        if op == "sh":
            rc, out = site.sh(req["script"], req.get("timeout", 120))
            return {"rc": rc, "out": out}
        if op == "shape":
            return {"ports": self.shape(QosSpec.model_validate(req["spec"]), ports_from_json(req["ports"]))}
        if op == "qos_stats":
            return {"stats": self.qos_stats(req.get("handle"), req.get("keys"))}
        if op == "pfc_bind":
            return {"port": self.pfc_bind(**{k: v for k, v in req.items() if k != "op"})}
        if op == "pfc_start":
            self.wire.connect(req["peers"])
            self.pfc.start()
            return {}
        if op == "pfc_stop":
            self.pfc_stop()
            return {}
        if op == "pfc_report":
            ago = req.get("ago")
            return {"report": self.pfc.report(None if ago is None else time.monotonic() - ago)}
        if op == "unshape":
            return {"removed": self.unshape()}
        raise ValueError(f"unknown op {op!r}")

    def shape(self, spec: QosSpec, ports: list) -> int:
        if self.shaper is not None:
            raise ValueError("this server's ports are shaped already; unshape first")
        self.shaper = Shaper(ports, spec)
        self.shaper.apply()
        return len(self.shaper.ports)

    def qos_stats(self, handle: int | None, keys: list[str] | None) -> dict[str, list[dict]]:
        if self.shaper is None:
            raise ValueError("nothing is shaped on this server")
        ports = None if keys is None else [self.shaper.ports[k] for k in keys]
        return {k: [asdict(q) for q in qs] for k, qs in self.shaper.stats(handle, ports).items()}

    def pfc_bind(self, run_id: str, key: str, me: str, bind_ip: str, ports: list, server_of: dict[str, str]) -> int:
        """`run_id`: the run's own (the master's), which every server's messages carry."""
        if self.shaper is None or self.pfc is not None:
            raise ValueError("PFC needs this server's ports shaped, and once")
        self.pfc, self.wire = start_agent(self.shaper, RUN_DIR / f"{self.owner.run_id}.pfc.json",
                                          run_id=run_id, me=me, key=bytes.fromhex(key), bind_ip=bind_ip,
                                          others=ports_from_json(ports), server_of_node=server_of)
        return self.wire.port

    def pfc_stop(self) -> None:
        if self.pfc is not None:
            self.pfc.stop()
            self.wire.close()

    def unshape(self) -> int:
        self.pfc_stop()
        self.pfc = None
        shaper, self.shaper = self.shaper, None
        return shaper.remove() if shaper is not None else 0

    def undo(self) -> list[str]:
        try:
            self.unshape()
        except Exception as exc:  # noqa: BLE001 - the record's interfaces take their qdiscs with them
            log.warning("unshape: %s", exc)
        return self.owner.undo()  # the scratch folder too


def serve(run_id: str, inp=sys.stdin, out=sys.stdout) -> None:
    agent = Agent(run_id)

    def reply(msg: dict) -> None:
        out.write(json.dumps(msg) + "\n")
        out.flush()

    try:
        for req in json_lines(inp):
            if req.get("op") == "stop":
                break
            try:
                reply({"ok": True} | agent.handle(req))
            except Exception as exc:  # noqa: BLE001 - the master decides; the agent keeps its record
                reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    finally:
        removed = agent.undo()
        try:
            reply({"ok": True, "removed": removed})
        except (BrokenPipeError, OSError):
            pass


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    exit_cleanly_on_signals()
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
