"""A run's link group: the kernel's interface group number that proves a root-namespace interface is the run's,
and lets the run delete all of them in one request."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator

from .signals import signals_deferred


@contextlib.contextmanager
def unless_vanished() -> Iterator[None]:
    """Skip what touches an interface that vanished between its lookup and the touch (a veth goes with its peer,
    a peer with its namespace, while a teardown runs): it is gone, not an error, and its ENODEV must not abort
    the teardown (an interrupted `lab start` once stranded its veths and record that way). Other errors raise."""
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        yield
    except NetlinkError as exc:
        if exc.code != errno.ENODEV:
            raise


@contextlib.contextmanager
def iproute():
    """pyroute2's IPRoute, with Ctrl-C and SIGTERM held until the block is done (milliseconds per request): an
    interrupt inside its asyncio loop strands async generators, which asyncio then reports, traceback and all, as
    it closes them (`lab start` interrupted at 2.2 s while it grouped its veths printed two)."""
    from pyroute2 import IPRoute

    with signals_deferred(), IPRoute() as ipr:
        yield ipr


def group_links(ifnames: list[str], group: int) -> None:
    """Put these interfaces in `group`; one that vanished on the way needs none (`unless_vanished`)."""
    with iproute() as ipr:
        for name in ifnames:
            for idx in ipr.link_lookup(ifname=name):
                with unless_vanished():
                    ipr.link("set", index=idx, group=group)


def delete_links(ifnames: list[str], group: int) -> int:
    """Delete these root-namespace interfaces (and their veth peers) in one batch; returns how many.

    One RTM_DELLINK per veth costs an RCU grace period each (7.3 s for 512 at 64 hosts); the kernel
    unregisters a whole link group at once (0.15 s). The interfaces are put in `group` first, and the
    group is deleted only if nothing but them is in it.
    """
    group_links(ifnames, group)
    with iproute() as ipr:
        ours = {i for name in ifnames for i in ipr.link_lookup(ifname=name)}
        members = {m["index"] for m in ipr.get_links() if m.get_attr("IFLA_GROUP") == group}
        if not ours or members != ours:
            raise RuntimeError(f"link group {group} holds interfaces this run did not create; not deleting it")
        ipr.link("del", group=group)
    return len(ours)
