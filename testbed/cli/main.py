"""The `hpnlab` command line: one group, one module per command group beside this one."""

from __future__ import annotations

import logging
import sys

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


for command in (doctor, calibrate, topo, up, validate, run_cmd, results, compare, traffic, qos, lab, controller,
                clean):
    cli.add_command(command)


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except InputError as exc:
        err_console.print(f"hpnlab: error: {exc.line()}", highlight=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
