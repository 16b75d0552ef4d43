"""Waiting until descriptors can be read, at any descriptor number; reading a pipe's requests.

select.select() takes descriptors below FD_SETSIZE (1,024) only and raises ValueError above. The process that
runs a 128-host network holds more than that (a pty per Mininet host, netlink sockets per namespace), so a
pipe opened then gets a number select refuses: the PFC agent's process looked dead at start on 128 hosts
(2026-11-25, bench.scale_bench). poll(2) has no such limit.
"""

from __future__ import annotations

import json
import select
from collections.abc import Iterable, Iterator
from typing import Any


def readable(objs: Iterable[Any], timeout: float | None) -> list[Any]:
    """Those of `objs` (descriptors, or anything with fileno(): files, sockets, ring buffers) that can be read
    within `timeout` seconds (None: no limit); one whose other end closed counts, as with select."""
    by_fd = {o if isinstance(o, int) else o.fileno(): o for o in objs}
    p = select.poll()
    for fd in by_fd:
        p.register(fd, select.POLLIN | select.POLLPRI)
    ready = p.poll(None if timeout is None else max(0.0, timeout) * 1000)
    return [by_fd[fd] for fd, _event in ready]


def json_lines(stream: Iterable[str]) -> Iterator[Any]:
    """The JSON objects of a stream of requests, one per line, until the stream ends. A last line without its
    newline is what a writer interrupted mid-write leaves (a Ctrl-C while `up` handed the PFC agent a 100 KB
    configuration cut it at the pipe's 64 KB): the writer is gone, so that ends the stream too, not a
    JSONDecodeError."""
    for line in stream:
        if not line.endswith("\n"):
            return
        yield json.loads(line)
