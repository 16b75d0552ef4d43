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


def test_a_switch_of_another_server_is_admitted_only_from_that_server_s_address():
    """A cluster run: no uid to look up across machines, so the address the placement expects decides."""
    assert refusal(known=True, uid=None, own_uid=0, live_duplicate=False, peer_ip="192.168.7.2",
                   runs_at="192.168.7.2") is None
    assert refusal(known=True, uid=None, own_uid=0, live_duplicate=False, peer_ip="::ffff:192.168.7.2",
                   runs_at="192.168.7.2") is None
    why = refusal(known=True, uid=None, own_uid=0, live_duplicate=False, peer_ip="192.168.7.9", runs_at="192.168.7.2")
    assert "192.168.7.9" in why and "192.168.7.2" in why
    # a switch of this server connecting from elsewhere is still judged by its socket's uid here (none: refused)
    assert "uid None" in refusal(known=True, uid=None, own_uid=0, live_duplicate=False, peer_ip="192.168.7.2")
    assert "second" in refusal(known=True, uid=None, own_uid=0, live_duplicate=True, peer_ip="192.168.7.2",
                               runs_at="192.168.7.2")
