"""A paced UDP probe stream with sequence numbers, for gaps and per-path byte counts.

Runs inside a Mininet host (plain sockets, no Mininet import):

    python -m traffic.udpstream recv --port 7000 --duration 6 --out r.json [--ready]
    python -m traffic.udpstream send --dst 10.0.0.5 --dport 7000 --sport 5000 --pps 1000 --duration 5

The receiver writes how many packets arrived, how many were lost or reordered,
and every silence longer than `--gap-ms` with its start time, so a failover
gap is measured in milliseconds from real packets. With `--ready` it says "ready" on
stderr once its socket is bound, so a caller starts the senders then, not after a guess. A sender
with `--wait-go` says "ready" the same way and then waits for a line on stdin: streams from several
hosts (an incast) start together however long each took to start (seconds apart on a loaded VM).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import time

from topos.inputs import write_file

HEADER = struct.Struct("!QdI")  # seq, send time, stream id
STILL_COMING_S = 1.0  # the receiver waits this long after a packet before it may close


def send(dst: str, dport: int, sport: int, pps: float, duration: float, size: int, stream: int, tos: int = 0,
         on_bound=None) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if tos:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)  # DSCP << 2: picks the queue class
    s.bind(("0.0.0.0", sport))
    if on_bound:
        on_bound()
    pad = b"\0" * max(0, size - HEADER.size)
    interval = 1.0 / pps
    start = time.monotonic()
    seq = 0
    errors = 0
    while True:
        now = time.monotonic()
        if now - start >= duration:
            break
        try:
            # sendto every time (no connected socket): each packet takes a fresh route lookup,
            # so a host port that lost its link is skipped at once.
            s.sendto(HEADER.pack(seq, time.time(), stream) + pad, (dst, dport))
        except OSError:
            errors += 1
        seq += 1
        next_at = start + seq * interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return {"sent": seq, "send_errors": errors, "duration_s": time.monotonic() - start}


def recv(port: int, duration: float, gap_ms: float, on_bound=None) -> dict:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind(("0.0.0.0", port))
    if on_bound:
        on_bound()
    s.settimeout(0.05)
    # The window opens at the first packet, not at start-up: a sender that took a while to start
    # (a loaded machine) still has its whole stream counted. No packet within `duration`: done. While
    # packets still come it stays open (paused queues draining on a loaded machine: 58 of 9,599 packets
    # once arrived after a fixed window closed), up to four windows in all.
    end = time.monotonic() + duration
    opened = False
    seqs: dict[int, set[int]] = {}
    last: dict[int, float] = {}
    first: dict[int, float] = {}
    gaps: list[dict] = []
    nbytes = 0
    while time.monotonic() < end:
        try:
            data, _ = s.recvfrom(65536)
        except TimeoutError:
            continue
        t = time.time()
        if not opened:
            opened, end = True, time.monotonic() + duration
            cap = end + 3 * duration
        end = max(end, min(cap, time.monotonic() + STILL_COMING_S))
        seq, _sent, stream = HEADER.unpack_from(data)
        nbytes += len(data)
        seqs.setdefault(stream, set()).add(seq)
        first.setdefault(stream, t)
        if stream in last and (t - last[stream]) * 1000 >= gap_ms:
            gaps.append({"stream": stream, "start": last[stream], "ms": round((t - last[stream]) * 1000, 3)})
        last[stream] = t
    streams = {}
    for st, got in seqs.items():
        hi = max(got)
        streams[str(st)] = {"received": len(got), "highest_seq": hi, "lost": hi + 1 - len(got),
                            "first": first[st], "last": last[st]}
    return {"bytes": nbytes, "streams": streams, "gaps": gaps,
            "max_gap_ms": max((g["ms"] for g in gaps), default=0.0)}


def _ready() -> None:
    print("ready", file=sys.stderr, flush=True)


def _ready_then_go() -> None:
    _ready()
    sys.stdin.readline()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m traffic.udpstream")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("send")
    s.add_argument("--dst", required=True)
    s.add_argument("--dport", type=int, required=True)
    s.add_argument("--sport", type=int, required=True)
    s.add_argument("--pps", type=float, default=1000)
    s.add_argument("--duration", type=float, default=5)
    s.add_argument("--size", type=int, default=200)
    s.add_argument("--stream", type=int, default=0)
    s.add_argument("--tos", type=int, default=0, help="IP TOS byte (DSCP 26 -> 104: the lossless class)")
    s.add_argument("--wait-go", action="store_true", help='say "ready" on stderr, start at a line on stdin')
    r = sub.add_parser("recv")
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--duration", type=float, default=6)
    r.add_argument("--gap-ms", type=float, default=5)
    r.add_argument("--out")
    r.add_argument("--ready", action="store_true", help='say "ready" on stderr once the socket is bound')
    a = ap.parse_args(argv)
    if a.cmd == "send":
        out = send(a.dst, a.dport, a.sport, a.pps, a.duration, a.size, a.stream, a.tos,
                   on_bound=_ready_then_go if a.wait_go else None)
    else:
        out = recv(a.port, a.duration, a.gap_ms, on_bound=_ready if a.ready else None)
    text = json.dumps(out)
    if getattr(a, "out", None):
        write_file(a.out, text, "--out")
    else:
        sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
