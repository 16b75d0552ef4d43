"""Ownership.spawn: a process the run starts runs only once its record names it, so a kill -9 between the start
and the record leaves nothing `hpnlab clean` could not prove the run's."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from testbed.system import ownership
from testbed.system.ownership import Ownership

HELPER = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from testbed.system import ownership
    ownership.RUN_DIR = Path(sys.argv[1])
    if sys.argv[2] == "die":  # the owner is killed after the start, before the record is written
        ownership.Ownership.process = lambda *a, **k: os._exit(9)
    o = ownership.Ownership("gate-test")
    o.begin()
    p = o.spawn(["/bin/sh", "-c", "echo ran $$"], "a test process")
    print("spawned", p.pid, flush=True)
    p.wait()
""")


def _helper(tmp_path, mode: str) -> tuple[int, str]:
    """Run the helper; its output is read to the end, which comes once it and the process it started have both
    exited (the started one writes to the same pipe), so nothing here waits on time."""
    p = subprocess.run([sys.executable, "-c", HELPER, str(tmp_path), mode], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout


def test_a_spawned_process_is_recorded_with_its_start_then_runs(tmp_path):
    code, out = _helper(tmp_path, "live")
    ran, spawned = [line.split() for line in out.splitlines() if line.startswith("ran")], out.split()[1]
    assert code == 0 and ran == [["ran", spawned]], out  # the same process: exec, not a child of the gate
    record = json.loads((tmp_path / "gate-test.json").read_text())
    assert [(p["pid"], p["what"]) for p in record["processes"]] == [(int(spawned), "a test process")]
    assert record["processes"][0]["start"] is not None


def test_an_owner_killed_before_the_record_leaves_a_process_that_never_ran(tmp_path):
    code, out = _helper(tmp_path, "die")
    assert code == 9 and "ran" not in out, out
    assert json.loads((tmp_path / "gate-test.json").read_text())["processes"] == []


def test_the_record_is_written_where_the_run_dir_points(tmp_path, monkeypatch):
    monkeypatch.setattr(ownership, "RUN_DIR", tmp_path)
    o = Ownership("gate-test-2")
    p = o.spawn(["/bin/true"], "true")
    assert p.wait(timeout=30) == 0 and o.data["processes"][0]["pid"] == p.pid
