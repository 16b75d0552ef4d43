"""Parsing what the network checks' tools print (fping's per-target summary)."""

from __future__ import annotations

from testbed.net.checks import fping_received


def test_fping_summary_lines_give_replies_per_target():
    err = ("10.0.0.3 : xmt/rcv/%loss = 1/1/0%, min/avg/max = 0.073/0.073/0.073\n"
           "10.1.0.9 : xmt/rcv/%loss = 1/0/100%\n"
           "ICMP Host Unreachable from 10.0.0.1 for ICMP Echo sent to 10.0.0.7\n"
           "10.0.0.7 : xmt/rcv/%loss = 3/2/33%, min/avg/max = 0.1/0.2/0.3\n")
    assert fping_received(err) == {"10.0.0.3": 1, "10.1.0.9": 0, "10.0.0.7": 2}
