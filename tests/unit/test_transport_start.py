"""The agents' transport starting: it waits for every agent to say ready, and names an agent that died first
with its last words (Mininet's popen sends an agent's stderr down the same pipe as its events)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from traffic.transports.tcp import TcpTransport

READY = 'import json; print(json.dumps({"event": "ready"}), flush=True); input()'
DIES = "import sys; print('OSError: [Errno 98] Address already in use', flush=True); sys.exit(1)"


class _Hosts:
    """Stands in for the network: each host's agent is a Python one-liner."""

    def __init__(self, code: dict[str, str]):
        self.topo = SimpleNamespace(hosts=[SimpleNamespace(name=h) for h in code])
        self.code = code

    def python(self, host: str, _module: str, *_args: str, **kw) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", self.code[host]], **kw)


def _stop(tr: TcpTransport) -> None:
    for p in tr.agents.values():
        p.kill()
        p.wait(timeout=10)


def test_agents_that_say_ready_start_and_one_that_dies_is_named_with_its_last_words():
    ok = TcpTransport(_Hosts({"h0": READY, "h1": READY}))
    try:
        ok.start()
    finally:
        _stop(ok)
    bad = TcpTransport(_Hosts({"h0": READY, "h1": DIES}))
    try:
        with pytest.raises(RuntimeError, match=r"exited before they were ready: \['h1'\] \(h1: OSError: \[Errno 98\] "
                                               r"Address already in use\)"):
            bad.start()
    finally:
        _stop(bad)
