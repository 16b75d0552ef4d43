"""Host pinning of precise flows: `ip` runs as an argument list (the fields come from the controller's REST and
never reach a shell), every field is checked, and a failed `ip rule` raises with ip's own words."""

from __future__ import annotations

import subprocess

import pytest

from testbed.net.steering import Steering


class Node:
    """A host that runs `ip` as given, recording the argument lists; `fail` makes a matching command fail."""

    name = "h0"

    def __init__(self, fail: str | None = None):
        self.calls: list[list[str]] = []
        self.fail = fail

    def popen(self, argv, **kw):
        assert isinstance(argv, list)
        self.calls.append(argv)
        bad = self.fail is not None and self.fail in argv
        return subprocess.Popen(["sh", "-c", "echo 'RTNETLINK answers: File exists' >&2; exit 2" if bad else "true"],
                                **kw)


def view(**kw) -> dict:
    return {"flow": "tcp:h0:5000->10.0.0.5:7000", "src": "h0", "dst": "10.0.0.5", "proto": "tcp", "sport": 5000,
            "dport": 7000, "cookie": 7, "egress": {"port": 1, "ifname": "h0-eth1"}, **kw}


def test_a_flow_is_pinned_by_argument_lists():
    node = Node()
    st = Steering(lambda _h: node)
    st.steer(view())
    st.unsteer(view())
    assert node.calls == [
        ["ip", "route", "replace", "10.0.0.5/32", "dev", "h0-eth1", "table", "101"],
        ["ip", "rule", "add", "to", "10.0.0.5", "ipproto", "tcp", "sport", "5000", "dport", "7000", "lookup", "101",
         "priority", "1007"],
        ["ip", "rule", "del", "to", "10.0.0.5", "ipproto", "tcp", "sport", "5000", "dport", "7000", "priority",
         "1007"]]


@pytest.mark.parametrize("bad", [{"dst": "10.0.0.5; reboot"}, {"proto": "tcp lookup main"}, {"sport": "5000"},
                                 {"dport": 70000}, {"egress": {"port": 1, "ifname": "h0-eth1 table 5"}}])
def test_a_field_that_is_not_what_it_says_is_refused_before_ip_runs(bad):
    node = Node()
    with pytest.raises(ValueError):
        Steering(lambda _h: node).steer(view(**bad))
    assert node.calls == []


def test_a_failed_ip_rule_raises_with_its_reason():
    st = Steering(lambda _h: Node(fail="rule"))
    with pytest.raises(RuntimeError, match="ip rule add .* on h0 failed: RTNETLINK answers: File exists"):
        st.steer(view())
    assert st.steered == {}
