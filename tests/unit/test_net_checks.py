"""The ping script the all-pairs check runs in each host (through a file, not the pty)."""

from __future__ import annotations

import os
import subprocess

from testbed.net.checks import ping_script

FAKE_PING = """#!/bin/sh
# the last argument is the target; 10.1.0.3 answers only its second ping, 10.2.0.3 never
ip=$(eval echo \\${$#})
echo "$ip" >> "$CALLS"
n=$(grep -c "^$ip$" "$CALLS")
case "$ip" in
  10.0.0.3) exit 0 ;;
  10.1.0.3) [ "$n" -ge 2 ] ;;
  *) exit 1 ;;
esac
"""


def test_ping_script_pings_in_parallel_and_gives_a_silent_target_a_second_ping(tmp_path):
    (tmp_path / "ping").write_text(FAKE_PING)
    (tmp_path / "ping").chmod(0o755)
    script = tmp_path / "all.sh"
    lines = ping_script(["10.0.0.3", "10.1.0.3", "10.2.0.3"], 2.0)
    assert all(line.endswith(") &") for line in lines[:-1]) and lines[-1] == "wait"
    script.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls")}
    out = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=20).stdout
    assert sorted(out.split("\n")[:-1]) == ["fail 10.2.0.3", "ok 10.0.0.3", "ok 10.1.0.3"]
    calls = (tmp_path / "calls").read_text().split()
    assert [calls.count(ip) for ip in ("10.0.0.3", "10.1.0.3", "10.2.0.3")] == [1, 2, 2]
