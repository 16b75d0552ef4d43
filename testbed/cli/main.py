"""The `hpnlab` command line: one group, one module per command group beside this one."""

from __future__ import annotations

import _thread
import logging
import signal
import sys
import threading
import time

import click

from topos.errors import InputError

from .calibrate import calibrate
from .common import err_console
from .controller import controller
from .doctor import doctor
from .experiment import compare, results, run_cmd, validate
from .lab import lab
from .qos import qos
from .topo import topo
from .traffic import traffic
from .up import clean, up


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging (-vv for debug).")
def cli(verbose: int) -> None:
    """hpnlab: emulate AI-training datacenter networks (HPN and baselines) on Mininet + OVS."""
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("asyncio").addFilter(_strand_reports)


def _strand_reports(record: logging.LogRecord) -> bool:
    """Keep asyncio's records but its report of async generators it could not close: pyroute2's, stranded when a
    Ctrl-C landed inside its event loop (the interrupt is handled, exit 130; the report is two tracebacks that
    say nothing to a user). Short netlink batches hold Ctrl-C till done (testbed/system/linkgroup.py)."""
    return "closing of asynchronous generator" not in record.getMessage()


for command in (doctor, calibrate, topo, up, validate, run_cmd, results, compare, traffic, qos, lab, controller,
                clean):
    cli.add_command(command)


def _interrupted() -> None:
    """Exit 130, as a shell does after Ctrl-C. A library call cut short there (pyroute2's coroutines) is
    collected after its event loop has closed, which Python reports as an ignored exception with a traceback
    (CI: Ctrl-C 2.3 s into 'lab start'): expected after an interrupt, so it goes to the debug log."""

    def quiet(unraisable) -> None:
        try:
            logging.getLogger("hpnlab").debug("after Ctrl-C, in %r: %s", unraisable.object, unraisable.exc_value)
        except Exception:  # noqa: BLE001, S110 - the interpreter may be half torn down by now
            pass

    sys.unraisablehook = quiet
    sys.exit(130)


_lost_interrupt = threading.Event()


def _keep_interrupts() -> None:
    """A Ctrl-C must not be lost. Python raises KeyboardInterrupt wherever the main thread is when SIGINT comes,
    and one raised inside a weak-reference callback or a __del__ is only printed ("Exception ignored") and the
    program goes on (CI: 'lab start' interrupted at 2.9 s ran to its end and exited 0). Such a one is noted and
    delivered again from a helper thread a moment later: raised from inside this hook it would be lost the same way,
    since the main thread takes a pending signal as soon as a call returns (CI: `up` at 2.44 s exited 0). The note
    makes main() exit 130 even if the second delivery lands in finalization or in a __del__ again."""
    default = sys.unraisablehook

    def redeliver() -> None:
        time.sleep(0.02)
        _thread.interrupt_main(signal.SIGINT)

    def hook(unraisable) -> None:
        if unraisable.exc_type is not KeyboardInterrupt:
            default(unraisable)
            return
        try:
            _lost_interrupt.set()
            threading.Thread(target=redeliver, name="hpnlab-ctrl-c", daemon=True).start()
        except (KeyboardInterrupt, RuntimeError):  # a second Ctrl-C right now; no new threads at shutdown
            pass

    sys.unraisablehook = hook


def main() -> None:
    _keep_interrupts()
    try:
        cli.main(standalone_mode=False)
        # The work is done and undone. A Ctrl-C from here on lands while the interpreter shuts down, which runs
        # Python code (weak-reference callbacks) where a KeyboardInterrupt is ignored and the process exits 0
        # (CI: 'lab start' interrupted at 3.5 s, its work done): SIGINT's default action ends it as a shell
        # reports a Ctrl-C, 130, and says nothing.
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if _lost_interrupt.is_set():
            _interrupted()
    except InputError as exc:
        err_console.print(f"hpnlab: error: {exc.line()}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        _interrupted()
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
