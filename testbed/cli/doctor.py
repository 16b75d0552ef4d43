"""`hpnlab doctor`: what this kernel and machine can do, and what the testbed will use."""

from __future__ import annotations

import json

import click
from rich.table import Table

from .common import cluster_opt, console, load_cluster_arg


def _yes(v) -> str:
    return {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]not checked[/]"}[v]


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the probe as JSON.")
@cluster_opt
def doctor(as_json: bool, cluster_file: str | None) -> None:
    """What this kernel and machine can do, and what the testbed will use; with --cluster, every server."""
    if cluster_file is not None:
        return cluster_doctor(load_cluster_arg(cluster_file), as_json)
    from testbed.net.preflight import OVS_SEND_BUFFER_NEEDED
    from testbed.system.capabilities import probe

    caps = probe()
    kernel_pfc, bpf_cc = _kernel_pfc(caps.root), _bpf_cc(caps.root)
    transports = _transports(caps.rxe_in_netns)
    if as_json:
        click.echo(json.dumps({**caps.to_dict(), "pfc_kernel_events": kernel_pfc, "cc_bpf": bpf_cc,
                               "transports": transports}, indent=1))
        return
    t = Table(title=f"hpnlab doctor — kernel {caps.kernel}")
    t.add_column("capability")
    t.add_column("available")
    t.add_column("what the testbed does")
    t.add_row("root", _yes(caps.root), "needed for up/run" if not caps.root else "")
    t.add_row("Open vSwitch running", _yes(caps.ovs_running), caps.ovs_version or "start: scripts/bootstrap.sh")
    t.add_row("OVS kernel datapath", _yes(caps.ovs_kernel_datapath), f"uses datapath '{caps.datapath}'")
    if caps.datapath == "user" and caps.ovs_send_buffer is not None:
        ok = caps.ovs_send_buffer >= OVS_SEND_BUFFER_NEEDED
        t.add_row("OVS packet socket send buffer", _yes(ok), f"{caps.ovs_send_buffer:,} bytes" +
                  ("" if ok else " (queues drop silently: run scripts/bootstrap.sh)"))
    for q, ok in caps.qdiscs.items():
        t.add_row(f"qdisc {q}", _yes(ok), "" if ok else "not available here (the VM has it)")
    t.add_row("tc ingress", _yes(caps.ingress), "")
    t.add_row("BPF on the qdisc tracepoints", _yes(kernel_pfc["available"]),
              "PFC acts on kernel events per packet" if kernel_pfc["available"]
              else f"PFC polls every queue: {kernel_pfc['why']}")
    t.add_row("BPF congestion control (DCTCP, DCQCN)", _yes(bpf_cc["available"]),
              "qos.cc: none, ecn, dctcp, dcqcn (ECN marks in the kernel)" if bpf_cc["available"]
              else f"qos.cc: none, ecn: {bpf_cc['why']}")
    t.add_row("bonding", _yes(caps.bonding), "dual-ToR by multipath routes" if not caps.bonding else "")
    t.add_row("rdma_rxe (soft-RoCE)", _yes(caps.rdma_rxe), "" if caps.rdma_rxe else caps.rxe_failure or "")
    t.add_row("rxe inside network namespaces", _yes(caps.rxe_in_netns),
              "transport rdma" if caps.rxe_in_netns else
              f"transport tcp: {caps.rxe_failure}" if caps.rdma_rxe and caps.rxe_failure else
              "transport tcp (rdma needs the VM)")
    t.add_row("transports", ", ".join(transports["available"]), f"auto takes {transports['auto']}; roce: the "
              "agents' queue pairs (RoCEv2 frames, go-back-N) on any kernel")
    t.add_row("/dev/kvm", _yes(caps.kvm_device), "hardware virt" if caps.kvm_hw_virt else "TCG for the VM tier")
    t.add_row("Mininet", _yes(caps.mininet_version is not None), caps.mininet_version or "")
    console.print(t)
    for n in caps.notes:
        console.print(f"• {n}")


def _kernel_pfc(root: bool) -> dict:
    """Whether the PFC agent can see crossings from the kernel here (pfc.detect auto), and why not."""
    if not root:
        return {"available": None, "why": "not root: not tried"}
    from testbed.qos.kqueues import why_unavailable

    why = why_unavailable()
    return {"available": why is None, "why": why}


def _bpf_cc(root: bool) -> dict:
    """Whether DCTCP and DCQCN can be registered here (qos.cc dctcp, dcqcn): tried, and unregistered at once."""
    if not root:
        return {"available": None, "why": "not root: not tried"}
    from testbed.qos.cc import Dcqcn, Dctcp
    from testbed.system.bpf import BpfUnavailable

    try:
        Dctcp().close()
        Dcqcn(line_bps=1e7, scale=1, dilation=1).close()
    except BpfUnavailable as exc:
        return {"available": False, "why": str(exc)}
    return {"available": True, "why": None}


def _transports(rxe_in_netns: bool | None) -> dict:
    """What `transport:` can be here, and what auto takes (on one server, no host link failing)."""
    from traffic.transports import TRANSPORTS, choose

    available = [t for t in TRANSPORTS if t != "auto" and (t != "rdma" or rxe_in_netns)]
    return {"available": available, "auto": choose("auto", rxe_in_netns)}


def cluster_doctor(spec, as_json: bool) -> None:
    """Each server of a cluster.yaml: SSH, hpnlab at the same path, Mininet, OVS, tunnels, its address, clock."""
    from dataclasses import asdict

    from testbed.cluster.doctor import check
    from testbed.net.controller import ROOT

    reports = check(spec, str(ROOT))
    if as_json:
        click.echo(json.dumps([asdict(r) for r in reports], indent=1))
    else:
        for r in reports:
            t = Table(title=f"{r.server}: " + ("[green]ready[/]" if r.ok else "[red]not ready[/]"))
            t.add_column("check")
            t.add_column("ok")
            t.add_column("detail")
            for what, ok, detail in r.checks:
                t.add_row(what, _yes(ok), detail)
            console.print(t)
    if not all(r.ok for r in reports):
        raise SystemExit(1)
