"""`hpnlab controller`: the OpenFlow controller app in the foreground, on loopback."""

from __future__ import annotations

from pathlib import Path

import click

from topos.errors import InputError


@click.command()
@click.option("--topology", "topology_file", required=True, type=click.Path(exists=True, dir_okay=False),
              help="Topology JSON from 'hpnlab topo export'.")
@click.option("--mode", type=click.Choice(["ecmp", "precise", "shortest"]), default="ecmp",
              help="ecmp: switches hash; precise: declared flows placed on disjoint paths; shortest: one path.")
@click.option("--of-port", type=click.IntRange(1, 65535), default=6653, help="OpenFlow port on 127.0.0.1.")
@click.option("--rest-port", type=click.IntRange(1, 65535), default=8080, help="REST API port on 127.0.0.1.")
def controller(topology_file: str, mode: str, of_port: int, rest_port: int) -> None:
    """Run the OpenFlow controller app (os-ken, or Ryu) in the foreground, on loopback.

    REST requests carry the token this prints the file of (curl -H "Authorization: Bearer $(cat FILE)")."""
    import os

    from controllers.client import write_token
    from controllers.launcher import run
    from testbed.system.ownership import RUN_DIR
    from topos.model import Topology

    try:
        Topology.from_json(Path(topology_file).read_text())
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"not a topology JSON ({exc})", "write one with 'hpnlab topo export NAME -o FILE'",
                         field="topology", value=topology_file) from None
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    token_file = str(RUN_DIR / f"controller-{os.getpid()}.token")
    write_token(token_file)
    click.echo(f"REST API on http://127.0.0.1:{rest_port}, token in {token_file} (mode 0600, removed at exit)")
    run(topology_file, mode, of_port, rest_port, token_file=token_file, remove_at_exit=(token_file,))
