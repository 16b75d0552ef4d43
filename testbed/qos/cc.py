"""Congestion control at the hosts, for the tcp transport (`cc: none | ecn | dctcp`).

- none: the kernel's default (cubic here) and no ECN: every connection fills its bottleneck, up to XOFF with
  PFC (the Fig. 14 and head-of-line blocking figures without end-to-end control).
- ecn: the default congestion control with classic ECN (RFC 3168): `net.ipv4.tcp_ecn = 1` in every host's
  namespace, so a CE mark halves the window once per round trip, as a loss would, without the loss.
- dctcp: DCTCP (bpf/dctcp.bpf.c) registered as a BPF congestion control for the run and chosen per socket by
  the traffic agents: the window shrinks in proportion to the fraction of bytes marked.

Marks come from the switches (qos.ecn, kqueues.py): a cc other than none turns marking on.

The rdma transport (soft-RoCE in the VM tier) has no congestion control here: rxe implements no DCQCN, so
RoCE traffic is held by PFC alone, as a PFC-only fabric (Meta's choice) is. A DCQCN-like controller for the
emulated RoCE streams is the next step (issue #28).
"""

from __future__ import annotations

import struct
from pathlib import Path

from testbed.system.bpf import BpfObject, build

CCS = ("none", "ecn", "dctcp")
DCTCP_NAME = "hpn_dctcp"  # the name sockets choose with TCP_CONGESTION
DCTCP_MAX_ALPHA = 1024
_SOURCE = Path(__file__).with_name("bpf") / "dctcp.bpf.c"


def socket_cc(cc: str) -> str | None:
    """The TCP_CONGESTION a socket sets for `cc` (None: the kernel's default)."""
    return DCTCP_NAME if cc == "dctcp" else None


def host_sysctls(cc: str) -> dict[str, str]:
    """What each host's namespace sets for `cc` (the namespace, and the setting, go with the network)."""
    return {"net.ipv4.tcp_ecn": "1"} if cc in ("ecn", "dctcp") else {}


class Dctcp:
    """DCTCP registered with the kernel while this lives; `close()` (or this process ending) unregisters it."""

    def __init__(self):
        self.obj = BpfObject(build(_SOURCE, {}), struct_ops=(DCTCP_NAME,))

    def alpha(self) -> dict[str, float | int]:
        """Alpha as the senders saw it: windows (each updates it once), those with marks, its mean as a fraction
        (every connection starts at 1, as the kernel's DCTCP does, and decays by 1/16 a window unmarked)."""
        windows, marked, total = (struct.unpack("=Q", self.obj.lookup("alpha_seen", struct.pack("=I", k), 8))[0]
                                  for k in range(3))
        return {"windows": windows, "marked_windows": marked,
                "mean": round(total / windows / DCTCP_MAX_ALPHA, 4) if windows else 0.0}

    def close(self) -> None:
        self.obj.close()
