"""The hosts' congestion control choices (testbed/qos/cc.py), as far as they are pure: names and parameters."""

from __future__ import annotations

import struct

import pytest

from testbed.qos.cc import DcqcnParams, host_sysctls, socket_cc
from testbed.qos.spec import CCS


def test_each_choice_names_its_socket_cc_and_turns_ecn_on_in_the_hosts():
    assert CCS == ("none", "ecn", "dctcp", "dcqcn")
    assert [socket_cc(c) for c in CCS] == [None, None, "hpn_dctcp", "hpn_dcqcn"]
    assert host_sysctls("none") == {}
    assert all(host_sysctls(c) == {"net.ipv4.tcp_ecn": "1"} for c in CCS[1:])


def test_dcqcn_parameters_keep_the_fabrics_time_constants_and_rate_ratios():
    # NIC ports emulated at 20 Mbit/s: 200 Gbit/s at bytes scale 5,000 and dilation 2
    raw = DcqcnParams().packed(line_bps=20e6, scale=10_000, dilation=2)
    line, low, ai, hai, t_alpha, t_dec, t_inc, g_shift, fast = struct.unpack("=7Q2I", raw)
    assert line == 2_500_000  # bytes per second
    assert low == 12_500  # 1 Gbit/s of the fabric's, / (scale x D), in bytes per second
    assert (ai, hai) == (500, 5_000)  # 5 and 50 Mbit/s per 25 Gbit/s of line rate
    assert (t_alpha, t_dec, t_inc) == (100_000, 100_000, 110_000)  # 50, 50, 55 us of the fabric's, x D, in ns
    assert (g_shift, fast) == (8, 1)  # g = 1/256, one fast-recovery period
    assert len(raw) == 64  # struct dcqcn_params in dcqcn.bpf.c


@pytest.mark.parametrize("dilation", [1, 10, 300])
def test_dcqcn_timers_stretch_with_dilation_and_rates_stay_line_relative(dilation):
    p = struct.unpack("=7Q2I", DcqcnParams().packed(line_bps=8e6, scale=1e4 * dilation, dilation=dilation))
    assert p[4] == 50_000 * dilation and p[6] == 55_000 * dilation
    assert p[2] / p[0] == pytest.approx(2e-4) and p[3] / p[0] == pytest.approx(2e-3)


@pytest.mark.parametrize("dilation", [1, 2, 2500])
def test_the_roce_nics_reaction_point_has_the_kernels_parameters(dilation):
    """The roce transport's DCQCN (traffic/roce/dcqcn.py) runs on the numbers the TCP stand-in's BPF one gets."""
    scale = 5_000 * dilation
    line, low, ai, hai, t_alpha, t_dec, t_inc, g_shift, fast = struct.unpack(
        "=7Q2I", DcqcnParams().packed(line_bps=20e6, scale=scale, dilation=dilation))
    rp = DcqcnParams().reaction_point(line_bps=20e6, scale=scale, dilation=dilation)
    assert [round(r / 8) for r in (rp.line_bps, rp.min_bps, rp.r_ai, rp.r_hai)] == [line, low, ai, hai]
    assert [round(t * 1e9) for t in (rp.t_alpha_s, rp.t_dec_s, rp.t_inc_s)] == [t_alpha, t_dec, t_inc]
    assert (rp.g, rp.fast_recovery) == (1 / (1 << g_shift), fast)
