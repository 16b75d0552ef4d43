"""Waiting for a server process to listen before its client starts (perftest's, the probe's).

perftest's client gives up at once when nobody listens yet, and under TCG emulation a server took well over
the half second once waited for it; so the client starts only once `ss` shows the server's port listening.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable


def wait_listening(run: Callable[[list[str]], str], port: int, server: subprocess.Popen, timeout: float) -> bool:
    """Until a TCP socket listens on `port` where `server` runs (`run(cmd)` runs a command there and returns
    its output); False when the server exited first or `timeout` seconds passed."""
    deadline = time.monotonic() + timeout
    query = ["ss", "-Hltn", f"sport = :{port}"]
    while not run(query).strip():
        if server.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
