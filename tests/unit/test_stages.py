"""The stage boundaries a run can be interrupted at (testbed/system/stages.py) are each reached by the code."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from testbed.system import stages

ROOT = Path(__file__).resolve().parents[2]


def test_every_stage_is_reached_once_in_the_code_and_no_other():
    calls = [m for p in (ROOT / "testbed").rglob("*.py")
             for m in re.findall(r"stages\.reached\(\"([^\"]+)\"\)", p.read_text())]
    assert sorted(calls) == sorted(stages.STAGES)


def test_a_stage_signals_its_own_process_and_says_so(as_from_a_terminal):
    code = ("import time; from testbed.system import stages\n"
            "stages.reached('owner')\n"
            "try:\n    stages.reached('up')\n    time.sleep(5)\nexcept KeyboardInterrupt:\n    print('interrupted')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={"HPNLAB_SIGNAL_AT": "up", "PATH": "/usr/bin:/bin"}, preexec_fn=as_from_a_terminal)
    assert r.stdout.strip() == "interrupted" and r.stderr.count("stage ") == 1 and "stage up: SIGINT" in r.stderr
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT,
                       env={"HPNLAB_SIGNAL_AT": "up:KILL", "PATH": "/usr/bin:/bin"})
    assert r.returncode == -9 and "stage up: SIGKILL" in r.stderr
