"""Lab 5's policy, the student's own code, run in a child process of its own.

The checker places the flows and measures the links itself; the child only answers choose() calls, one JSON
line each way, on a pipe of its own (what the student's code prints goes to stderr). Whatever that code does,
exiting (sys.exit, os._exit), looping forever, raising, or answering something that is not an index, it is a
failed step with its reason, never the checker's exit or a hang. Run by root, the child drops to the user who
called sudo (or nobody) once its own modules are imported and before the student's code is compiled: that code
never runs with root's rights. The parent reads the file (topos.inputs.read_text) and hands its text over.

    python -m testbed.labs.sandbox UID GID      # the child (UID GID: "-" to keep its user); the parent: ChildPolicy
"""

from __future__ import annotations

import json
import operator
import os
import pwd
import select
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from controllers.precise import FlowSpec
from controllers.precise import Path as Candidate
from topos.inputs import read_text

CALL_TIMEOUT_S = 10.0  # per choose() call, the first one including the child's start and the file's import


class PolicyFailed(Exception):
    """The student's policy did not answer as a policy must; the message says how."""


def _unprivileged() -> list[str]:
    """The user and group the child drops to: root's own rights are never lent to a student's file."""
    if os.geteuid() != 0:
        return ["-", "-"]
    uid, gid = os.environ.get("SUDO_UID", ""), os.environ.get("SUDO_GID", "")
    if not (uid.isdigit() and gid.isdigit()) or int(uid) == 0:
        nobody = pwd.getpwnam("nobody")
        uid, gid = str(nobody.pw_uid), str(nobody.pw_gid)
    return [uid, gid]


class ChildPolicy:
    """A policy callable as controllers.precise.assign wants it, answered by the child process."""

    def __init__(self, path: Path):
        source = read_text(path, "lab5_policy.py", max_bytes=1 << 20)  # refused in one line if not a file
        self.proc = subprocess.Popen([sys.executable, "-m", "testbed.labs.sandbox", *_unprivileged()],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
        self._send({"path": str(path), "source": source})

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise PolicyFailed(self._ended()) from None

    def __call__(self, flow: FlowSpec, cands: list[Candidate], load: dict) -> int:
        self._send({"flow": asdict(flow), "candidates": [{"host_port": c.host_port, "hops": c.hops} for c in cands],
                    "load": [[list(k), v] for k, v in load.items()]})
        ready, _, _ = select.select([self.proc.stdout], [], [], CALL_TIMEOUT_S)
        line = self.proc.stdout.readline() if ready else None
        if line is None:
            raise PolicyFailed(f"choose() did not return within {CALL_TIMEOUT_S:g} s (a loop that never ends?)")
        if not line:
            raise PolicyFailed(self._ended())
        reply = json.loads(line)
        if "error" in reply:
            raise PolicyFailed(reply["error"])
        return reply["index"]

    def _ended(self) -> str:
        rc = self.proc.wait(timeout=10)
        said = self.proc.stderr.read().decode(errors="replace").strip().splitlines()
        return f"your policy's process ended (exit {rc}) before choose() answered" + (f": {said[-1][:200]}"
                                                                                      if said else "")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            f.close()

    def __enter__(self) -> ChildPolicy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _load(path: str, source: str):
    """The student's module from its text; its choose()."""
    import types

    mod = types.ModuleType("lab5_policy")
    mod.__file__ = path
    exec(compile(source, path, "exec"), mod.__dict__)  # noqa: S102 - the student's policy, in this child only
    return mod.choose


def _drop_to(uid: str, gid: str) -> None:
    if uid != "-":
        os.setgroups([])
        os.setgid(int(gid))
        os.setuid(int(uid))


def _answer(choose, request: dict) -> dict:
    flow = FlowSpec(**request["flow"])
    cands = [Candidate(c["host_port"], tuple((s, p) for s, p in c["hops"])) for c in request["candidates"]]
    load = {tuple(k): v for k, v in request["load"]}
    try:
        return {"index": operator.index(choose(flow, cands, load))}
    except TypeError as exc:
        return {"error": f"choose() must return an index into candidates ({exc})"}


def main(uid: str, gid: str) -> None:
    replies = os.fdopen(os.dup(1), "w")  # the answers' own pipe; the student's prints go to stderr
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    first = json.loads(sys.stdin.readline() or "{}")
    _drop_to(uid, gid)
    try:
        choose = _load(first["path"], first["source"])
    except BaseException as exc:  # noqa: BLE001 - the student's file: say what it raised (SystemExit ends it below)
        if isinstance(exc, SystemExit):
            raise
        choose, failed = None, f"{type(exc).__name__}: {exc}"
    for line in sys.stdin:
        try:
            reply = _answer(choose, json.loads(line)) if choose else {"error": failed}
        except Exception as exc:  # noqa: BLE001 - the student's code: say what it raised
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main(*sys.argv[1:3])
