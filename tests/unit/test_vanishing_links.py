"""A teardown meets interfaces that vanish while it looks at them (a veth goes with its peer, a peer with its
namespace): that is not an error, and must not abort the rest of the cleanup. An interrupted `lab start` once
stranded its veths and its record on an ENODEV that replaced the Ctrl-C."""

from __future__ import annotations

import errno
from types import SimpleNamespace

import pyroute2
import pytest
from pyroute2.netlink.exceptions import NetlinkError

from testbed.system import linkgroup, ownership


class VanishingIPRoute:
    """Finds every name, and then each named `gone` is gone (or fails with `code`) when touched."""

    def __init__(self, gone: set[str], code: int = errno.ENODEV):
        self.gone, self.code, self.index, self.grouped = gone, code, {}, []

    def __call__(self):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def link_lookup(self, ifname: str) -> list[int]:
        return [self.index.setdefault(ifname, len(self.index) + 1)]

    def _check(self, idx: int) -> str:
        name = next(n for n, i in self.index.items() if i == idx)
        if name in self.gone:
            raise NetlinkError(self.code, "No such device")
        return name

    def get_links(self, idx: int):
        self._check(idx)
        return [SimpleNamespace(get_attr=lambda _attr: 7)]

    def link(self, cmd: str, index: int, group: int) -> None:
        self.grouped.append(self._check(index))


def test_an_interface_that_vanishes_while_proven_or_grouped_is_skipped(monkeypatch):
    ipr = VanishingIPRoute({"t0-eth2"})
    monkeypatch.setattr(pyroute2, "IPRoute", ipr)
    monkeypatch.setattr(ownership, "_vsctl", lambda *a: SimpleNamespace(stdout=""))
    assert ownership._proven_interfaces(["t0-eth1", "t0-eth2", "t0-eth3"], 7, []) == ["t0-eth1", "t0-eth3"]
    linkgroup.group_links(["t0-eth1", "t0-eth2", "t0-eth3"], 7)
    assert ipr.grouped == ["t0-eth1", "t0-eth3"]


def test_other_netlink_errors_still_raise(monkeypatch):
    monkeypatch.setattr(pyroute2, "IPRoute", VanishingIPRoute({"t0-eth1"}, code=errno.EPERM))
    monkeypatch.setattr(ownership, "_vsctl", lambda *a: SimpleNamespace(stdout=""))
    with pytest.raises(NetlinkError):
        ownership._proven_interfaces(["t0-eth1"], 7, [])
    with pytest.raises(NetlinkError):
        linkgroup.group_links(["t0-eth1"], 7)
