"""Fixtures shared by the unit tests."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port():
    """A function giving a loopback port nothing listens on."""
    return _free_port


@pytest.fixture
def agent():
    """A traffic agent on loopback (no namespace, no root): its process and its port."""
    port = _free_port()
    p = subprocess.Popen([sys.executable, "-m", "traffic.agent", "--port", str(port)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, bufsize=1)
    assert json.loads(p.stdout.readline()) == {"event": "ready", "port": port}
    yield p, port
    p.kill()
    p.wait()
