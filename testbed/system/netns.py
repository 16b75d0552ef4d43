"""Entering a host's network namespace from one thread, to make sockets that stay bound to it."""

from __future__ import annotations

import os


def in_netns(netns_path: str | None, factory):
    """Make a socket-owning object in another namespace (e.g. /proc/PID/ns/net of a host).

    setns() moves only the calling thread, and the thread's own namespace is
    saved here, not on pyroute2's pushns/popns stack: that stack is one per
    process, so the PFC agent's thread and the main thread entering namespaces
    at the same time could each return to the other's namespace.
    """
    if netns_path is None:
        return factory()
    from pyroute2.netns import setns

    saved = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        setns(netns_path, flags=0)
        return factory()
    finally:
        setns(saved, flags=0)
        os.close(saved)
