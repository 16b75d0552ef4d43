"""pfc.model ingress planned (testbed/qos/kmmu.py, pure): each switch's ports numbered, the source MACs between
switches, the buffers, and what a spec that cannot work is told."""

from __future__ import annotations

import pytest

from testbed.qos.kmmu import HPCC_BUFFER, MAX_LOCAL, mmu_line, plan_mmu, port_mac, with_mmu_limits
from testbed.qos.ports import egress_ports, resolve
from testbed.qos.spec import MTU, QosSpec, fixed_headroom
from topos import build
from topos.errors import InputError


def _ports(spec: QosSpec, kind: str = "hpn", **kw):
    topo = build(kind, **kw)
    spec = resolve(spec, topo, kernel_reaction_ms=1.5)
    return egress_ports(topo, spec, netns_of=lambda h: None, ifname_of=lambda n, p: f"{n}-{p}"), spec


def test_every_switch_numbers_its_ports_and_each_port_has_a_mac_of_its_own():
    ports, spec = _ports(QosSpec(scale=1000, pfc={"model": "ingress"}))
    plan = plan_mmu(ports, spec)
    by_key = {p.key: p for p in ports}
    switches = {p.node for p in ports if not p.is_host}
    assert set(plan.ports) == {p.key for p in ports if not p.is_host} and len(plan.switches) == len(switches)
    for node in switches:  # 0..n-1 in port order, per switch
        mine = sorted((by_key[k].port, ip.local) for k, ip in plan.ports.items() if by_key[k].node == node)
        assert [local for _port, local in mine] == list(range(len(mine)))
    for key, ip in plan.ports.items():
        p = by_key[key]
        assert ip.slot == ports.index(p)
        assert plan.switches[ip.switch].node == p.node
    macs = {port_mac(ip.slot) for ip in plan.ports.values()}
    assert len(macs) == len(plan.ports) and all(m[0] & 0x03 == 0x02 for m in macs)  # local, unicast, one each
    assert port_mac(0x012345) == bytes.fromhex("0a4850012345")
    assert plan.per_switch == max(sum(1 for ip in plan.ports.values() if ip.switch == i)
                                  for i in range(len(plan.switches)))


def test_headroom_is_one_links_ingress_for_the_reaction_and_the_buffer_leaves_room_to_share():
    ports, spec = _ports(QosSpec(scale=1000, pfc={"model": "ingress"}))
    plan = plan_mmu(ports, spec)
    for key, ip in plan.ports.items():
        p = next(q for q in ports if q.key == key)
        assert ip.headroom == {3: int(p.plan.rate_bps / 8 * 1.5e-3) + fixed_headroom(1)}
    for b in plan.switches:
        mine = [ip for ip in plan.ports.values() if plan.switches[ip.switch] is b]
        fixed = sum(h + b.reserve for ip in mine for h in ip.headroom.values())
        assert b.free_base == b.buffer - fixed > 0
        xoff = max(q.lossless[3].xoff for q in (p.plan for p in ports if p.key in {k for k, v in plan.ports.items()
                                                                                     if v in mine}))
        assert b.buffer == max(round(HPCC_BUFFER / 1000), fixed + 9 * xoff)  # alpha 1/8: a lone port at XOFF
        assert b.reserve == max(2 * MTU, round(4096 / 1000)) and b.resume_offset == MTU
    limited = with_mmu_limits(ports, plan)
    for p, q in zip(ports, limited, strict=True):
        want = plan.switches[plan.ports[p.key].switch].buffer if p.key in plan.ports else p.plan.lossless[3].limit
        assert q.plan.lossless[3].limit == want and q.key == p.key
    assert mmu_line(plan, spec).startswith("PFC model ingress: switch buffers ")


def test_a_given_buffer_is_scaled_and_one_too_small_is_refused_naming_the_field():
    ports, spec = _ports(QosSpec(scale=10, pfc={"model": "ingress", "mmu": {"buffer_bytes": 1 << 32}}))
    assert {b.buffer for b in plan_mmu(ports, spec).switches} == {round((1 << 32) / 10)}
    # HPCC's 32 MiB cannot hold the headroom of the emulator's reaction (1.5 ms of 400 Gbit/s per port): refused
    ports, spec = _ports(QosSpec(scale=10, pfc={"model": "ingress", "mmu": {"buffer_bytes": 32 << 20}}))
    with pytest.raises(InputError, match=r"qos.pfc.mmu.buffer_bytes=33554432: switch .* take .* of headroom and "
                                         r"reserve, the whole buffer .*; fix: a buffer_bytes above"):
        plan_mmu(ports, spec)


def test_faster_ports_get_a_larger_alpha():
    ports, spec = _ports(QosSpec(scale=1000, pfc={"model": "ingress"}))
    plan = plan_mmu(ports, spec)
    nic = min(p.plan.rate_bps for p in ports if p.is_host)
    for p in ports:
        if p.key in plan.ports:
            assert plan.ports[p.key].shift == (3 if p.plan.rate_bps <= nic else 2 if p.plan.rate_bps <= 2 * nic else
                                               plan.ports[p.key].shift)
    assert MAX_LOCAL == 256


def test_ingress_needs_the_kernel():
    with pytest.raises(InputError, match="qos.pfc.detect='poll': model ingress counts"):
        QosSpec(pfc={"model": "ingress", "detect": "poll"})


def test_model_auto_is_ingress_on_kernel_events_and_egress_where_ingress_cannot_be_held():
    """auto: ingress where the agent acts on kernel events; an 8-rail HPN at scale 4 has switch buffers past the
    kernel's 32-bit queue, so auto takes egress there and says why, where a run asking for ingress is refused."""
    from testbed.qos.fit import planned

    topo = build("hpn")
    auto = {"model": "auto"}
    assert QosSpec().pfc.model == "egress"  # the default, until ingress's unseen dequeues are understood
    assert resolve(QosSpec(pfc=auto), topo, kernel_reaction_ms=1.5).pfc.model == "ingress"
    assert resolve(QosSpec(pfc=auto), topo).pfc.model == "egress"  # the agent polls
    assert resolve(QosSpec(pfc=auto | {"detect": "poll"}), topo, kernel_reaction_ms=1.5).pfc.model == "egress"
    ports, spec = _ports(QosSpec(scale=1000, pfc=auto))
    limited, kept, mmu, why = planned(ports, spec, "auto")
    assert kept.pfc.model == "ingress" and mmu is not None and why == ""
    assert {p.plan.lossless[3].limit for p in limited if p.key in mmu.ports} == {b.buffer for b in mmu.switches}
    ports, spec = _ports(QosSpec(scale=4, pfc=auto), rails=8)
    _, kept, mmu, why = planned(ports, spec, "auto")
    assert (kept.pfc.model, mmu) == ("egress", None) and "32-bit FIFO limit" in why
    with pytest.raises(InputError, match="32-bit FIFO limit"):
        planned(ports, spec, "ingress")


def test_the_acknowledgements_the_shaper_sends_to_the_high_class_are_not_counted_with_ack_priority():
    """The kernel skips what the shaper's ack filters take (bpf/mmu.bpf.h to_high_class): the agents' port high
    byte, flagged, and nothing without ack_priority."""
    from testbed.qos.shaper import agent_ack_keys
    from traffic.transports.tcp import AGENT_PORTS

    ports, spec = _ports(QosSpec(scale=1000, pfc={"model": "ingress"}))
    assert plan_mmu(ports, spec).acks_high == 0x100 | AGENT_PORTS[0] >> 8 == 0x100 | 0x23
    assert all(f"0x{0x23 << 24:08x}/0xff000000+20" in keys for keys in agent_ack_keys())  # the same byte
    ports, spec = _ports(QosSpec(scale=1000, ack_priority=False, pfc={"model": "ingress"}))
    assert plan_mmu(ports, spec).acks_high == 0
