"""The server agent: on each server of a cluster run but the first, the owner of what the run changes there.

    python -m testbed.cluster.agent RUN_ID      (started by the master over SSH, one per server and run)

It holds the server's ownership record (/run/hpnlab/RUN_ID.json, with itself as the owner process) and a
scratch folder, and answers one JSON request per line on stdin with one JSON line on stdout:

    {"op": "hello"}                          -> this server's capabilities and versions
    {"op": "intend", "kind": k, "names": []} -> recorded before the master creates them (bridges, interfaces)
    {"op": "process", "pid": p, "what": w}   -> a node shell the master started here
    {"op": "group", "names": []}             -> interfaces put in the record's link group (the proof)
    {"op": "delete_links", "names": []}      -> those interfaces deleted in one request
    {"op": "write", "name": n, "text": t}    -> a file in the scratch folder; its path
    {"op": "sh", "script": s}                -> a root-namespace shell script's exit status and output
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
import tempfile
from pathlib import Path

from testbed.system.capabilities import probe
from testbed.system.ownership import RUN_ID, Ownership, exit_cleanly_on_signals
from testbed.system.site import LocalSite


class Agent:
    def __init__(self, run_id: str):
        if not re.fullmatch(RUN_ID, run_id):
            raise SystemExit(f"hpnlab agent: run id {run_id!r} is not one (letters, digits, '-' and '_')")
        self.owner = Ownership(run_id)
        self.owner.begin()
        self.scratch = Path(tempfile.mkdtemp(prefix=f"hpnlab-{run_id}-"))
        self.site = LocalSite(self.owner, self.scratch)

    def handle(self, req: dict) -> dict:
        op, site = req.get("op"), self.site
        if op == "hello":
            return {"run_id": self.owner.run_id, "capabilities": probe().to_dict(), "scratch": str(self.scratch)}
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
        raise ValueError(f"unknown op {op!r}")

    def undo(self) -> list[str]:
        import shutil

        removed = self.owner.undo()
        shutil.rmtree(self.scratch, ignore_errors=True)
        return removed


def serve(run_id: str, inp=sys.stdin, out=sys.stdout) -> None:
    agent = Agent(run_id)

    def reply(msg: dict) -> None:
        out.write(json.dumps(msg) + "\n")
        out.flush()

    try:
        for line in inp:
            req = json.loads(line)
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
