"""`hpnlab qos show`: queues, rates and PFC state of the running network."""

from __future__ import annotations

import click

from topos.errors import InputError

from .common import console
from .tables import qos_table


@click.group()
def qos() -> None:
    """Queues, rates and PFC state of the running network."""


@qos.command("show")
@click.argument("node", required=False)
@click.option("--run", "run_id", default=None, help="Run id (default: the running one).")
@click.option("--busy", is_flag=True, help="Only classes that sent, queued, dropped or marked something.")
def qos_show(node: str | None, run_id: str | None, busy: bool) -> None:
    """Each port's classes, rates, backlogs, drops and pause state (optionally of one NODE)."""
    from testbed.qos.show import snapshot
    from testbed.system.capabilities import probe

    probe().require_root("reading queues inside the hosts' namespaces")
    rows = snapshot(run_id, node)
    if not rows:
        raise InputError("no running network with QoS", "start one with 'hpnlab up hpn --qos' (or an experiment)",
                         field="run", value=run_id or "none")
    if busy:
        rows = [r for r in rows if r["sent_bytes"] or r["backlog"] or r["drops"] or r["pause_events"]
                or r["ecn_marks"]]
    console.print(qos_table(rows, f"qos — {len({r['port'] for r in rows})} ports"))
