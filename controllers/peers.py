"""Who may speak OpenFlow to this controller: sockets on loopback, looked up in /proc/net/tcp.

Loopback is shared by every local user, so listening there is not enough: a
process of any user could connect claiming a switch's DPID, take over its
connection and feed the controller forged port-status messages. A switch is
admitted only if the socket that connected belongs to the controller's own
user (Open vSwitch runs as root like the testbed) and its DPID is one of the
topology's with no live connection already.

Spread over servers (Mininet's cluster edition), the controller listens on the
first server's cluster address, and a switch placed on another server can only
be checked by where it connects from: it is admitted only from the address of
the server the placement put it on (HPNLAB_REMOTE_SWITCHES).
"""

from __future__ import annotations

import os
import socket
import struct


def _addr(hexaddr: str) -> tuple[str, int]:
    ip, port = hexaddr.split(":")
    if len(ip) == 8:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(ip, 16))), int(port, 16)
    raw = bytes.fromhex(ip)  # /proc prints IPv6 as four host-order 32-bit words
    return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))), int(port, 16)


def tcp_sockets(proc: str = "/proc/net") -> list[dict]:
    """Every TCP socket of this network namespace: local and remote address, state, owner uid, inode."""
    out = []
    for name in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/{name}") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            col = line.split()
            out.append({"local": _addr(col[1]), "remote": _addr(col[2]), "state": int(col[3], 16),
                        "uid": int(col[7]), "inode": int(col[9])})
    return out


LISTEN = 0x0A


def _unmapped(ip: str) -> str:
    return ip[7:] if ip.startswith("::ffff:") else ip


def socket_uid(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """The uid owning the socket bound to `local` and connected to `remote` (None if there is none)."""
    want = (_unmapped(local[0]), local[1]), (_unmapped(remote[0]), remote[1])
    for s in tcp_sockets():
        if ((_unmapped(s["local"][0]), s["local"][1]), (_unmapped(s["remote"][0]), s["remote"][1])) == want:
            return s["uid"]
    return None


def listening(port: int) -> bool:
    """Does any socket here listen on TCP `port`?"""
    return any(s["state"] == LISTEN and s["local"][1] == port for s in tcp_sockets())


def own_listener(port: int, pid: int | str = "self") -> bool:
    """Does process `pid` hold a socket listening on TCP `port`? (Not just: does anyone.)"""
    inodes = {s["inode"] for s in tcp_sockets() if s["state"] == LISTEN and s["local"][1] == port}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and int(link[8:-1]) in inodes:
            return True
    return False


def refusal(known: bool, uid: int | None, own_uid: int, live_duplicate: bool, peer_ip: str | None = None,
            runs_at: str | None = None) -> str | None:
    """Why a connection claiming a DPID is refused, or None to admit it (`runs_at`: the address of the other
    server that switch runs on; None: it runs here)."""
    if not known:
        return "its DPID is not a switch of this topology"
    if runs_at is not None:
        if _unmapped(peer_ip or "") != runs_at:
            return f"it comes from {peer_ip}, not from {runs_at}, the server that switch runs on"
    elif uid != own_uid:
        return f"it comes from a socket of uid {uid}, not the controller's uid {own_uid}"
    if live_duplicate:
        return "a live connection for that DPID is already up (refusing a second one)"
    return None
