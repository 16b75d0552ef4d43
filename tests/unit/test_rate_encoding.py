"""Every rate a valid topology shapes encodes: HTB classes above 32 bits of bytes/s take the kernel's 64-bit
attributes (a rails-8 HPN at a small scale crashed in struct.pack before), and a queue the kernel cannot hold
is refused, naming the port and the fix, before anything starts."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroute2.netlink.rtnl.tcmsg import tcmsg

from testbed.qos.fit import require_shapeable
from testbed.qos.netlink import U32_MAX, htb_class_message
from testbed.qos.ports import FIFO_LIMIT_MAX, egress_ports, resolve
from testbed.qos.spec import MTU, QosSpec
from topos import build
from topos.errors import InputError


def decoded_rates(raw: bytes) -> tuple[int, int]:
    """(rate, ceil) in bytes/s as the kernel reads the message: the 64-bit attribute where present."""
    msg = tcmsg(raw)
    msg.decode()
    opts = msg.get_attr("TCA_OPTIONS")
    parms = opts.get_attr("TCA_HTB_PARMS")
    return opts.get_attr("TCA_HTB_RATE64") or parms["rate"], opts.get_attr("TCA_HTB_CEIL64") or parms["ceil"]


@pytest.mark.parametrize("bps", [8000, 34_359_738_360, 34_359_738_368, 400_000_000_000, 800_000_000_000 * 64])
def test_a_class_rate_of_any_size_encodes_as_the_kernel_reads_it(bps):
    raw = htb_class_message(3, 0x10030, 0x10001, rate_bps=bps, ceil_bps=bps, burst=3028, cburst=3028, quantum=MTU,
                            prio=1)
    assert decoded_rates(raw) == (bps // 8, bps // 8)
    parms = tcmsg(raw)
    parms.decode()
    field = parms.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")["rate"]
    assert field == min(bps // 8, U32_MAX)  # tc's convention: the 32-bit field saturated beside the 64-bit one


SHAPES = {
    "hpn": lambda rails, gbps, up: dict(rails=rails, port_gbps=gbps, uplink_gbps=up, hosts_per_segment=2,
                                         tor_capacity_gbps=1e6, agg_capacity_gbps=1e6),
    "dcn_plus": lambda rails, gbps, up: dict(rails=rails, port_gbps=gbps, uplink_gbps=up, hosts_per_segment=2,
                                             tor_capacity_gbps=1e6, agg_capacity_gbps=1e6),
    "rail_optimized": lambda rails, gbps, up: dict(rails=rails, port_gbps=gbps, uplink_gbps=up,
                                                   tor_capacity_gbps=1e6, agg_capacity_gbps=1e6),
    "spine_leaf": lambda rails, gbps, up: dict(nics=rails, port_gbps=gbps, uplink_gbps=up, switch_capacity_gbps=1e6),
    "fat_tree": lambda rails, gbps, up: dict(port_gbps=gbps),
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(builder=st.sampled_from(sorted(SHAPES)), rails=st.integers(1, 8), gbps=st.sampled_from([100, 200, 400, 800]),
       up=st.sampled_from([200, 400, 800]), scale=st.sampled_from([1, 2, 10, 1000, 1e6]),
       dilation=st.sampled_from([1, 8, 1000]), weighted=st.booleans())
def test_every_shaped_rate_of_every_builder_encodes_or_is_refused_first(builder, rails, gbps, up, scale, dilation,
                                                                        weighted):
    topo = build(builder, **SHAPES[builder](rails, gbps, up))
    spec = QosSpec(scale=scale, scheduling="weighted" if weighted else "strict").dilated(dilation)
    try:
        require_shapeable(topo, spec)
    except InputError as exc:  # the refusal names the fix; what it refuses really does not fit
        assert exc.field == "qos.scale" and "larger scale" in exc.fix
        ports = egress_ports(topo, resolve(spec, topo), lambda _h: None, lambda n, i: f"{n}:{i}")
        assert max(p.queue_limit(q, True) for p in ports for q in [None, *p.plan.lossless]) > FIFO_LIMIT_MAX
        return
    for p in egress_ports(topo, resolve(spec, topo), lambda _h: None, lambda n, i: f"{n}:{i}"):
        assert max(p.queue_limit(q, True) for q in [None, *p.plan.lossless]) <= FIFO_LIMIT_MAX
        for cls, rate in p.plan.class_rates_bps.items():
            raw = htb_class_message(1, 0x10030, 0x10001, rate, p.plan.rate_bps, 3028, 3028, MTU, p.plan.prio[cls])
            assert decoded_rates(raw) == (rate // 8, p.plan.rate_bps // 8)


def test_an_unscaled_paper_sized_port_is_refused_before_anything_starts():
    topo = build("hpn", rails=8, hosts_per_segment=16, port_gbps=400, uplink_gbps=800, aggs_per_plane=8,
                 tor_uplinks=16, tor_capacity_gbps=1e6, agg_capacity_gbps=1e6)
    with pytest.raises(InputError) as exc:
        require_shapeable(topo, QosSpec(scale=1))
    assert exc.value.field == "qos.scale" and "32-bit" in exc.value.what
    require_shapeable(topo, QosSpec(scale=1000))  # the same fabric scaled fits
