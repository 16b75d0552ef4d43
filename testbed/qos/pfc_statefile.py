"""What keeps the PFC agent's loop from waiting: its thread's real-time priority, and its state file (who is paused,
by whom: `<run>.pfc.json`, read by `qos show` and the web view) written by a thread of its own.

The loop used to write the state file itself, a temporary file renamed over the old one in the run directory.
Measured (perf sched_switch with kernel stacks, a DCQCN incast over the roce transport): the rename blocked the
loop for 14-157 ms at times (`do_renameat2` -> `down_write` on the directory, held by a normal-priority task
writing beside it), 1.3 ms of CPU in 13 ms; a crossing that came meanwhile waited as long, and the lossless queue
past XOFF filled its 3 ms of headroom and dropped. The loop now only hands the newest state over; the writer
thread does the file work, real-time as well, so that it never holds Python's lock while the scheduler runs
another task (blocked in the kernel, it holds none).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from topos.errors import InputError
from topos.inputs import write_file

log = logging.getLogger(__name__)

REALTIME_PRIORITY = 10  # SCHED_FIFO, above every normal task and below the kernel's own threads (50)


def realtime() -> bool:
    """This thread at SCHED_FIFO (REALTIME_PRIORITY) when allowed: a pause must not wait for the CPU behind
    userspace OVS and the hosts' senders (a poll gap of 170-270 ms, 30 times the configured period, let a
    lossless queue overflow in a full test run); the agent sleeps between polls and rests when behind, so it
    takes a core at most half the time."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(REALTIME_PRIORITY))  # 0: this thread only
    except (OSError, AttributeError) as exc:
        log.info("PFC agent stays at normal priority: %s", exc)
        return False
    return True


class StateWriter:
    """Writes the newest state handed to `put` to `path` (a temporary file renamed over it); states handed over
    while it writes are folded into the next write. `close` writes what is pending and ends the thread."""

    def __init__(self, path: Path):
        self.path = path
        self.writes = 0
        self._pending: dict | None = None
        self._closed = False
        self._cv = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="hpnlab-pfc-state", daemon=True)
        self._thread.start()

    def put(self, state: dict) -> None:
        """Never waits for the file: takes the lock only to swap the pending state."""
        with self._cv:
            self._pending = state
            self._cv.notify()

    def _run(self) -> None:
        realtime()
        while True:
            with self._cv:
                while self._pending is None and not self._closed:
                    self._cv.wait()
                state, self._pending = self._pending, None
            if state is None:
                return
            tmp = self.path.with_suffix(".tmp")
            try:
                write_file(tmp, json.dumps(state), "PFC state")
                tmp.replace(self.path)
                self.writes += 1
            except (OSError, InputError) as exc:  # the run directory gone, a full disk: the loop goes on
                log.warning("PFC state file not written: %s", exc)

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=5)
