"""Ctrl-C, SIGTERM and a hard crash: the run's bridges, interfaces and shells go away."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

HOLD = """
import sys, time
from topos import build
from testbed.net.network import Network
from testbed.system.ownership import exit_cleanly_on_signals
exit_cleanly_on_signals()
with Network(build("hpn", hosts_per_segment=2)) as net:
    print("up", flush=True)
    time.sleep(120)
"""


def start_holder(preexec=None):
    p = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True, preexec_fn=preexec)
    line = p.stdout.readline()
    assert line.strip() == "up"
    return p


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_tears_down(no_leftovers, take_snapshot, as_from_a_terminal, sig):
    p = start_holder(as_from_a_terminal)
    assert len(take_snapshot()["bridges"] - no_leftovers["bridges"]) == 16
    p.send_signal(sig)
    p.wait(timeout=60)


def test_crash_then_clean(no_leftovers, take_snapshot, hpnlab):
    p = start_holder()
    p.kill()
    p.wait()
    left = take_snapshot()
    assert len(left["bridges"] - no_leftovers["bridges"]) == 16  # a SIGKILL leaves the run behind
    r = hpnlab("clean")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("removed bridge") == 16


def test_second_run_is_refused_while_one_is_live(no_leftovers, hpnlab):
    p = start_holder()
    try:
        r = hpnlab("up", "hpn", "--no-cli")
        assert r.returncode == 2 and "another hpnlab network is running" in r.stderr
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)
