"""What a traffic agent (traffic/agent.py) writes to the coordinator: events, one JSON line each, the flows'
reports batched, and at the end of the run this host's counters and the agent's own CPU time."""

from __future__ import annotations

import json
import resource
import sys
import threading
import time

from .tcpstats import tcp_counters

_out_lock = threading.Lock()
_batch: list[dict] = []
_pending = threading.Event()  # something is in `_batch`: the flusher sleeps on it, so an idle agent costs nothing
FLUSH_S = 0.02  # the coordinator starts a job's next op on these reports: their lag is dead time


def emit(event: dict) -> None:
    with _out_lock:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def report(event: dict) -> None:
    """A flow's `sent` or `recv`: batched, at most FLUSH_S late, as one `batch` line.

    A 64-rank ring all-reduce is 16,000 flows an op; a line each kept the coordinator's readers and
    the agents' output busy. The timestamps inside say when things happened, not the line's arrival."""
    with _out_lock:
        _batch.append(event)
    _pending.set()


def flush() -> None:
    with _out_lock:
        _pending.clear()
        if _batch:
            sys.stdout.write(json.dumps({"event": "batch", "events": _batch}) + "\n")
            sys.stdout.flush()
            _batch.clear()


def flush_forever() -> None:
    """Every FLUSH_S while there are reports; asleep while there are none (a 128-host run has 128 agents, and
    waking each 50 times a second for nothing was CPU the emulated fabric needed)."""
    while True:
        _pending.wait()
        time.sleep(FLUSH_S)
        flush()


def emit_final(roce: dict | None) -> None:
    """At quit: the roce NIC's counters (if it had one), this host's TCP counters, and the CPU this agent used
    (user and system, every thread): what the transport cost the machine."""
    if roce is not None:
        emit({"event": "roce", "counters": roce})
    try:
        with open("/proc/net/snmp") as a, open("/proc/net/netstat") as b:
            emit({"event": "tcp", "counters": tcp_counters(a.read(), b.read())})
    except (OSError, ValueError) as exc:
        emit({"event": "error", "id": None, "error": f"tcp counters: {exc}"})
    use = resource.getrusage(resource.RUSAGE_SELF)
    emit({"event": "cpu", "seconds": round(use.ru_utime + use.ru_stime, 3)})
