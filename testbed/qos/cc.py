"""Congestion control at the hosts, for the tcp transport (`cc: none | ecn | dctcp | dcqcn`).

- none: the kernel's default (cubic here) and no ECN: every connection fills its bottleneck, up to XOFF with
  PFC (the Fig. 14 and head-of-line blocking figures without end-to-end control).
- ecn: the default congestion control with classic ECN (RFC 3168): `net.ipv4.tcp_ecn = 1` in every host's
  namespace, so a CE mark halves the window once per round trip, as a loss would, without the loss.
- dctcp: DCTCP (bpf/dctcp.bpf.c) registered as a BPF congestion control for the run and chosen per socket by
  the traffic agents: the window shrinks in proportion to the fraction of bytes marked.
- dcqcn: DCQCN as RoCE NICs run it (bpf/dcqcn.bpf.c, after the HPCC simulator's Mellanox version), on the TCP
  stand-in: a paced rate cut by alpha/2 on marks and raised on timers (fast recovery, additive, hyper
  increase), with the published parameters (`DcqcnParams`) in the fabric's time and rates.

Marks come from the switches (qos.ecn, kqueues.py): a cc other than none turns marking on.

The rdma transport (soft-RoCE in the VM tier) has no congestion control here: rxe implements no DCQCN, so
RoCE traffic is held by PFC alone, as a PFC-only fabric (Meta's choice) is.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from testbed.system.bpf import BpfObject, build
from traffic.roce.dcqcn import RpParams

NAMES = {"dctcp": "hpn_dctcp", "dcqcn": "hpn_dcqcn"}  # what sockets choose with TCP_CONGESTION
DCTCP_NAME = NAMES["dctcp"]
DCTCP_MAX_ALPHA = 1024
_BPF = Path(__file__).with_name("bpf")
_SOURCE = _BPF / "dctcp.bpf.c"


def socket_cc(cc: str) -> str | None:
    """The TCP_CONGESTION a socket sets for `cc` (None: the kernel's default)."""
    return NAMES.get(cc)


def host_sysctls(cc: str) -> dict[str, str]:
    """What each host's namespace sets for `cc` (the namespace, and the setting, go with the network)."""
    return {"net.ipv4.tcp_ecn": "1"} if cc != "none" else {}


def _counters(obj: BpfObject, name: str, n: int) -> list[int]:
    """The first `n` u64 values of an array map (what the programs count for results)."""
    return [struct.unpack("=Q", obj.lookup(name, struct.pack("=I", k), 8))[0] for k in range(n)]


class Dctcp:
    """DCTCP registered with the kernel while this lives; `close()` (or this process ending) unregisters it."""

    def __init__(self):
        self.obj = BpfObject(build(_SOURCE, {}), struct_ops=(DCTCP_NAME,))

    def stats(self) -> dict[str, float | int]:
        """Alpha as the senders saw it: windows (each updates it once), those with marks, its mean as a fraction
        (every connection starts at 1, as the kernel's DCTCP does, and decays by 1/16 a window unmarked)."""
        windows, marked, total = _counters(self.obj, "alpha_seen", 3)
        return {"windows": windows, "marked_windows": marked,
                "mean": round(total / windows / DCTCP_MAX_ALPHA, 4) if windows else 0.0}

    def close(self) -> None:
        self.obj.close()


CNP_INTERVAL_S = 50e-6  # a NIC's notification point: at most one CNP per QP this often (the DCQCN paper's N)


@dataclass(frozen=True)
class DcqcnParams:
    """DCQCN's parameters in the fabric's units: the HPCC simulator's `dcqcn_paper` set (its run.py: the
    DCQCN paper's timers, g = 1/256, one fast-recovery period, R_AI 5 and R_HAI 50 Mbit/s per 25 Gbit/s of
    line rate, a 1 Gbit/s floor)."""
    t_alpha_us: float = 50.0
    t_dec_us: float = 50.0
    t_inc_us: float = 55.0
    g_shift: int = 8
    fast_recovery: int = 1
    ai_of_line: float = 5 / 25_000
    hai_of_line: float = 50 / 25_000
    min_bps: float = 1e9

    def packed(self, line_bps: float, scale: float, dilation: float) -> bytes:
        """struct dcqcn_params for links emulated at `line_bps`, i.e. the fabric's / `scale` (bytes scale x
        dilation), with time running `dilation` times slower than the fabric's."""
        rp = self.reaction_point(line_bps, scale, dilation)  # one conversion for the kernel's and the NIC's
        ns = [round(t * 1e9) for t in (rp.t_alpha_s, rp.t_dec_s, rp.t_inc_s)]
        bps = [rp.line_bps, rp.min_bps, rp.r_ai, rp.r_hai]
        return struct.pack("=7Q2I", *(max(1, round(r / 8)) for r in bps), *ns, self.g_shift, self.fast_recovery)

    def reaction_point(self, line_bps: float, scale: float, dilation: float) -> RpParams:
        """The same parameters for the roce transport's pacer (traffic/roce/dcqcn.py), in its units as `packed`
        gives the kernel's: the emulated rates, timers in wall seconds."""
        return RpParams(line_bps=line_bps, t_alpha_s=self.t_alpha_us * 1e-6 * dilation,
                        t_dec_s=self.t_dec_us * 1e-6 * dilation, t_inc_s=self.t_inc_us * 1e-6 * dilation,
                        g=1 / (1 << self.g_shift), fast_recovery=self.fast_recovery,
                        ai_bps=line_bps * self.ai_of_line, hai_bps=line_bps * self.hai_of_line,
                        min_bps=self.min_bps / scale)


class Dcqcn:
    """DCQCN registered with the kernel while this lives, for links emulated at `line_bps` (the hosts' NIC
    ports); `close()` (or this process ending) unregisters it."""

    def __init__(self, line_bps: float, scale: float, dilation: float, params: DcqcnParams = DcqcnParams()):
        self.obj = BpfObject(build(_BPF / "dcqcn.bpf.c", {}), struct_ops=(NAMES["dcqcn"],))
        try:
            self.obj.update("params", struct.pack("=I", 0), params.packed(line_bps, scale, dilation))
            self.obj.update("seen", struct.pack("=I", 3), struct.pack("=Q", 1024))  # the lowest rate so far: line
        except BaseException:
            self.obj.close()
            raise

    def stats(self) -> dict[str, float | int]:
        """Notifications (ACKs with ECE), rate cuts, increase periods, and the lowest rate a cut left (a fraction
        of the line rate)."""
        n, cuts, periods, low = _counters(self.obj, "seen", 4)
        return {"notifications": n, "cuts": cuts, "increase_periods": periods, "lowest_rate": round(low / 1024, 4)}

    def close(self) -> None:
        self.obj.close()
