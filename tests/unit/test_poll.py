"""testbed/system/poll.py: waiting on descriptors above select()'s FD_SETSIZE."""

from __future__ import annotations

import fcntl
import os
import resource
import select

import pytest

from testbed.system.poll import readable

HIGH = 1100  # above FD_SETSIZE (1,024): where the 128-host network's process put the PFC agent's pipe


@pytest.fixture
def high_pipe():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    r, w = os.pipe()
    high = fcntl.fcntl(r, fcntl.F_DUPFD, HIGH)
    os.close(r)
    yield high, w
    os.close(high)
    os.close(w)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_descriptor_above_fd_setsize_is_waited_on(high_pipe):
    high, w = high_pipe
    assert high >= HIGH
    with pytest.raises(ValueError):  # what the PFC agent's proxy met on 128 hosts
        select.select([high], [], [], 0)
    assert readable([high], 0) == []
    os.write(w, b"x")
    assert readable([high], 1.0) == [high]


def test_files_are_handed_back_and_a_closed_end_counts():
    r, w = os.pipe()
    with os.fdopen(r, "rb") as f:
        assert readable([f], 0.01) == []
        os.close(w)
        assert readable([f], 1.0) == [f]  # the other end closed: a read gives its end
