"""Who may be a switch: the uid behind a loopback connection, and the refusal rules."""

from __future__ import annotations

import os
import socket

from controllers.peers import own_listener, refusal, socket_uid


def test_the_uid_and_listener_of_loopback_sockets_are_found():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        assert own_listener(port)
        with socket.create_connection(("127.0.0.1", port)):
            conn, addr = srv.accept()
            with conn:
                # as the controller sees it: the peer's address and our own end
                assert socket_uid(addr, conn.getsockname()) == os.geteuid()
    assert not own_listener(port)
    assert socket_uid(("127.0.0.1", 1), ("127.0.0.1", 2)) is None


def test_refusal_reasons():
    assert refusal(known=True, uid=0, own_uid=0, live_duplicate=False) is None
    assert "not a switch" in refusal(known=False, uid=0, own_uid=0, live_duplicate=False)
    assert "uid 1000" in refusal(known=True, uid=1000, own_uid=0, live_duplicate=False)
    assert "uid None" in refusal(known=True, uid=None, own_uid=0, live_duplicate=False)
    assert "second" in refusal(known=True, uid=0, own_uid=0, live_duplicate=True)
