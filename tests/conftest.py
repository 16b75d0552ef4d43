from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HPNLAB = str(Path(sys.executable).parent / "hpnlab")


def run_hpnlab(*args: str, env: dict | None = None, user: str | None = None, timeout: float = 120):
    cmd = [HPNLAB, *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env={**os.environ, **(env or {})})


@pytest.fixture
def hpnlab():
    return run_hpnlab


def _default_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def as_from_a_terminal():
    """A Popen preexec_fn giving the child Ctrl-C's default disposition. A suite started in the background
    of a non-interactive shell inherits SIGINT ignored (POSIX; CI's unit tests lost a Ctrl-C test that way),
    and the child's Python then never raises KeyboardInterrupt: the Ctrl-C tests would test how the suite was
    launched, not the testbed."""
    return _default_sigint
