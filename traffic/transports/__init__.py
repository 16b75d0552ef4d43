"""Transports carry a schedule's flows between the hosts: `tcp` and `roce` (the agents, tcp.py: TCP connections,
or queue pairs of RoCEv2 frames from traffic/rocenic.py) and `rdma` (soft-RoCE, in the VM).

`choose("auto", caps)` takes rdma where the capability probe saw soft-RoCE
work between two network namespaces, tcp otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from topos.errors import InputError

from ..roce.gbn import NCCL_IB_TIMEOUT_S

TRANSPORTS = ("auto", "tcp", "roce", "rdma")


def roce_retry_s(retry_timer_s: float | None) -> float:
    """The roce transport's retry timer in the fabric's time: the experiment's (resilience.retry_timer_s), else
    NCCL's."""
    return NCCL_IB_TIMEOUT_S if retry_timer_s is None else retry_timer_s


def choose(name: str, rxe_in_netns: bool | None, servers: int = 1, host_ports_fail: Sequence[str] = (),
           rxe_failure: str | None = None) -> str:
    """`servers`: how many servers the network spreads over; the rdma transport runs on one only.
    `rxe_failure`: why the capability probe saw no soft-RoCE between namespaces, where it tried.
    `host_ports_fail`: the host links the run's failures take down. Soft-RoCE has one device per port and no
    bond, so a queue pair on a port that goes down ends (the VM tier saw it flushed at once): an HPN NIC's
    RoCE bond would move it to its other port. TCP rides through on the host's other port, so auto takes it."""
    if name not in TRANSPORTS:
        raise InputError("unknown transport", f"use one of: {', '.join(TRANSPORTS)}", field="transport", value=name)
    if name == "rdma" and servers > 1:
        raise InputError("the rdma transport over several servers is not built yet (its devices, static "
                         "neighbours and perftest processes are set up on this server only)",
                         "use transport tcp (or auto)", field="transport", value=name)
    if name == "auto":
        return "rdma" if rxe_in_netns and servers == 1 and not host_ports_fail else "tcp"
    if name == "rdma" and not rxe_in_netns:
        why = f"the probe's try failed: {rxe_failure}" if rxe_failure else "which this kernel lacks"
        raise InputError(f"the rdma transport needs soft-RoCE (rdma_rxe) inside network namespaces, {why}",
                         "run it in a full-kernel VM (Debian trixie with its backports kernel), or use transport tcp",
                         field="transport", value=name)
    if name == "rdma" and host_ports_fail:
        raise InputError(f"the failures take host link {host_ports_fail[0]} down, and soft-RoCE's queue pairs end "
                         "with their port (one device per port, no bond to move them to the NIC's other port)",
                         "use transport tcp or auto (which takes tcp here)", field="transport", value=name)
    return name


def make(kind: str, net, tos: int = 0, index: int = 0, cc: str | None = None, rto_s: float = NCCL_IB_TIMEOUT_S,
         dcqcn: dict | None = None, cnp_tos: int = 48 << 2):
    """The transport for a chosen kind; `index` keeps jobs side by side apart (ports, source ports, QP numbers);
    `cc`: the TCP congestion control its sockets choose (tcp only: rxe has none); roce's retry timer `rto_s`
    (wall seconds), DCQCN (`dcqcn`: RpParams' fields and cnp_interval_s, wall units; None: off) and the class
    its CNPs ride."""
    if kind == "rdma":
        from .rdma import CTRL_PORT_BASE, RdmaTransport

        return RdmaTransport(net, tos=tos, ctrl_base=CTRL_PORT_BASE + 1000 * index)
    from .tcp import AGENT_PORTS, TcpTransport

    if kind == "roce":
        return TcpTransport(net, tos=tos, port=AGENT_PORTS[index], kind="roce", proto="udp", job=index,
                            rto_s=rto_s, dcqcn=dcqcn, cnp_tos=cnp_tos)
    return TcpTransport(net, tos=tos, port=AGENT_PORTS[index], cc=cc)  # the spec allows 16 jobs, the range 216
