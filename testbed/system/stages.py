"""Named points in a run's start, work and teardown, where a test (or a curious user) interrupts it on purpose.

`HPNLAB_SIGNAL_AT=STAGE` (or `STAGE:KILL`, `STAGE:TERM`) makes the process send itself SIGINT (SIGKILL,
SIGTERM) when it reaches STAGE, after saying so on stderr. A Ctrl-C at a wall-clock time lands wherever the
machine happens to be by then; a stage lands at the same point of the code on any machine, so the fast test
tier checks every stage boundary once, and the time-sampled sweep (slow tier) looks between them.

The signal is the process's own: it can do nothing a user's Ctrl-C or kill -9 could not.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "HPNLAB_SIGNAL_AT"
SIGNALS = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "KILL": signal.SIGKILL}

# In the order a run reaches them (tests/emu/test_lifecycle.py interrupts at each).
START = ("owner", "controller", "build.nodes", "build.links", "build.started", "offloads", "hosts",
         "routes", "qos.shaped", "qos.pfc", "up")
WORK = ("traffic", "results")
TEARDOWN = ("teardown.qos", "teardown.controller", "teardown.mininet")
STAGES = START + WORK + TEARDOWN


def reached(stage: str) -> None:
    """Signal this process if HPNLAB_SIGNAL_AT names `stage` (a no-op otherwise: one dictionary look-up)."""
    want = os.environ.get(ENV)
    if not want:
        return
    name, _, sig = want.partition(":")
    if name != stage:
        return
    signum = SIGNALS.get(sig or "INT")
    if signum is None:  # not an input the testbed acts on otherwise; say it plainly and go on
        print(f"hpnlab: {ENV}={want!r}: signal must be one of {', '.join(SIGNALS)}", file=sys.stderr, flush=True)
        return
    print(f"hpnlab: stage {stage}: SIG{sig or 'INT'} ({ENV})", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signum)
