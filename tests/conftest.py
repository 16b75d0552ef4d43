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
