"""What the roce transport needs from the run besides its kind: the QPs' retry timer and DCQCN's parameters,
in this machine's units (the emulated rates, wall seconds)."""

from __future__ import annotations

import dataclasses
import logging

from testbed.net.network import Network
from testbed.qos.cc import CNP_INTERVAL_S, DcqcnParams
from testbed.qos.ports import deepest_wait_s
from traffic.transports import roce_retry_s

from .planning import Plan

log = logging.getLogger(__name__)


def roce_options(net: Network, p: Plan) -> dict:
    """transports.make's roce arguments for this run (nothing for the other transports)."""
    if p.transport != "roce":
        return {}
    return {"rto_s": _retry_s(net, p), "dcqcn": _dcqcn(net, p), "cnp_tos": p.exp.qos.high_dscp << 2}


def _dcqcn(net: Network, p: Plan) -> dict | None:
    """With transport roce and qos.cc dcqcn: the NICs' reaction point and notification interval in this
    machine's units (the hosts' emulated line rate, the fabric's timers dilated), as the TCP stand-in's."""
    spec = net.qos_spec
    if net.qos is None or spec.cc != "dcqcn":
        return None
    line = max(q.plan.rate_bps for q in net.qos.ports.values() if q.is_host)
    rp = DcqcnParams().reaction_point(line, spec.scale, spec.dilated_by)
    return dataclasses.asdict(rp) | {"cnp_interval_s": CNP_INTERVAL_S * spec.dilated_by}


def _retry_s(net: Network, p: Plan) -> float:
    """The roce transport's retry timer, wall seconds: the fabric's (NCCL's, or resilience.retry_timer_s),
    dilated; stretched to twice the longest wait in the emulator's deepest lossless queue where that is longer
    (its buffers are seconds deep, a switch's a millisecond: a queued frame is not a lost one)."""
    fabric = roce_retry_s(p.exp.resilience.retry_timer_s) * p.exp.time.dilation
    if net.qos is None:
        return fabric
    wait = deepest_wait_s(list(net.qos.ports.values()), net.qos_spec)
    if 2 * wait > fabric:
        log.info("roce: retry timer %.2f s of wall time, not the fabric's %.2f s: a lossless queue here can hold "
                 "a frame %.2f s", 2 * wait, fabric, wait)
    return max(fabric, 2 * wait)
