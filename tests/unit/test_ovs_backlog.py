"""OVS's receive backlog (testbed/experiment/ovs_backlog.py): /proc/net/packet read for ovs-vswitchd's sockets."""

from __future__ import annotations

import os
import socket

from testbed.experiment.ovs_backlog import socket_inodes, waiting

TEXT = """sk               RefCnt Type Proto  Iface R Rmem   User   Inode
0000000009e2b548 2      3    0000   0     0 0      0      74916
000000001743e68b 3      3    0003   17    1 410112 0      80001
00000000e1f37a80 3      3    0003   17    1 2304   0      80002
0000000060196722 3      3    0003   18    1 9216   0      99999
0000000022661c9b 3      3    0003   19    1 0      0      80003
"""


def test_waiting_sums_each_interfaces_sockets_of_the_given_inodes_only():
    # 99999 is not OVS's (a capture's socket): left out; an empty socket is no entry
    assert waiting(TEXT, {74916, 80001, 80002, 80003}) == {17: 412_416}
    assert waiting(TEXT, set()) == {}


def test_socket_inodes_are_this_process_own():
    s = socket.socket()
    try:
        ino = os.fstat(s.fileno()).st_ino
        assert ino in socket_inodes(os.getpid())
    finally:
        s.close()
