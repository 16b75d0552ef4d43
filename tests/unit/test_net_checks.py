"""The ping script the all-pairs check runs in each host (through a file, not the pty)."""

from __future__ import annotations

from testbed.net.checks import ping_script


def test_ping_script_pings_every_target_in_parallel_and_waits():
    lines = ping_script(["10.0.0.3", "10.1.0.3"], 2.0)
    assert lines == ["(ping -c1 -W2 -q 10.0.0.3 >/dev/null 2>&1 && echo ok 10.0.0.3 || echo fail 10.0.0.3) &",
                     "(ping -c1 -W2 -q 10.1.0.3 >/dev/null 2>&1 && echo ok 10.1.0.3 || echo fail 10.1.0.3) &",
                     "wait"]
