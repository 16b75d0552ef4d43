"""How a run's process meets signals: SIGTERM and SIGHUP end it as Ctrl-C does (its `finally` blocks undo what it
made), and a block that must not be cut in half (a teardown, a batch of netlink requests) holds them until it is
done."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading

log = logging.getLogger(__name__)


class _Terminated(SystemExit):
    pass


def exit_cleanly_on_signals() -> None:
    """Turn SIGTERM/SIGHUP into SystemExit so `finally` blocks (teardown) run, as on Ctrl-C."""

    owner = os.getpid()

    def handler(signum, _frame):
        if os.getpid() != owner:  # a forked child (a library's helper) keeps the default behaviour
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise _Terminated(128 + signum)

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, handler)


@contextlib.contextmanager
def signals_deferred():
    """Ctrl-C, SIGTERM and SIGHUP wait until the block is done (a teardown cut in half leaves what it had not
    removed yet), then act as they would have: KeyboardInterrupt, or SystemExit(128 + signal)."""
    if threading.current_thread() is not threading.main_thread():  # handlers are the main thread's to set
        yield
        return
    got: list[int] = []
    old = {s: signal.signal(s, lambda signum, _frame: got.append(signum))
           for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        if got:
            log.info("signal %d during teardown: acted on after it", got[0])
            handler = old[got[0]]
            if callable(handler):
                handler(got[0], None)  # Python's Ctrl-C handler raises KeyboardInterrupt, ours SystemExit
            elif handler == signal.SIG_DFL:
                raise SystemExit(128 + got[0])
