"""PFC's state machine alone (testbed/qos/pfc_state.py): the XOFF/XON hysteresis one queue keeps whether the
kernel reports its crossings or a poll reads its backlog, and the pauses several queues hold on one port."""

from __future__ import annotations

from testbed.qos.pfc_state import HeldElsewhere, PauseState, QueueState, pauses_whom
from testbed.qos.ports import Port
from testbed.qos.spec import PfcPlan, QosSpec, port_plan

PLAN = PfcPlan(limit=300_000, xoff=100_000, xon=50_000, headroom=140_000)


def queue(upstream=("tor-a:1", "tor-a:2")) -> QueueState:
    port = Port("tor-a", 5, "tor", "h4", 0, "t0-eth5", "h4-eth0", None, port_plan(200, QosSpec(pfc={"poll_ms": 5})))
    return QueueState(port, 3, PLAN, list(upstream))


def test_a_polled_backlog_pauses_above_xoff_and_resumes_below_xon_only():
    q = queue()
    seen = [q.level(b) for b in (10_000, 100_000, 100_001, 200_000, 60_000, 50_000, 49_999, 49_000, 100_001)]
    assert seen == [None, None, True, None, None, None, False, None, True]  # XOFF is passed, XON is gone under
    assert q.xoff and q.xoff_events == 2 and q.max_backlog == 200_000


def test_a_kernel_crossing_changes_the_state_once_and_a_queue_with_nobody_upstream_keeps_depth_only():
    q = queue()
    assert [q.crossed(True), q.crossed(True), q.crossed(False), q.crossed(False)] == [True, False, True, False]
    assert q.xoff_events == 1 and not q.xoff
    host = queue(upstream=())
    assert host.level(10**9) is None and host.max_backlog == 10**9 and not host.xoff


def test_a_port_paused_by_two_queues_resumes_when_the_last_lets_go_and_counts_one_pause():
    st = PauseState()
    a, b = ("agg:1", 3), ("agg:2", 3)
    assert st.hold(a, 10.0) and not st.hold(b, 10.5)  # the first holder stops the port, the second adds to it
    assert not st.release(a, 11.0) and st.since == 10.0  # b still holds it
    assert st.release(b, 12.0) and st.paused_s == 2.0 and st.events == 1 and st.since is None
    assert not st.release(b, 13.0)  # nothing held: nothing to resume
    st.hold(a, 20.0)
    assert st.end(21.5) and st.paused_s == 3.5 and not st.by and not st.end(22.0)  # the agent stopping


def test_pauses_held_on_another_servers_port_send_one_frame_each_way():
    out = HeldElsewhere()
    target = ("h5:0", 3)
    assert out.hold("b", target, ("tor-a:1", 3)) and not out.hold("b", target, ("tor-a:2", 3))
    assert out.held("b") == [("h5:0", 3, "tor-a:1"), ("h5:0", 3, "tor-a:2")] and out.servers() == ["b"]
    assert not out.release("b", target, ("tor-a:1", 3)) and out.release("b", target, ("tor-a:2", 3))
    assert out.servers() == [] and out.held("b") == []


def test_an_ingress_account_pauses_its_own_neighbour_and_an_egress_queue_every_other_one():
    plan = port_plan(200, QosSpec(pfc={"poll_ms": 5}))
    ports = [Port("tor-a", i, "tor", f"h{i}", 0, f"t-{i}", f"h{i}-0", None, plan) for i in (1, 2, 3)]
    host = Port("h1", 0, "host", "tor-a", 1, "h1-0", "t-1", "/proc/1/ns/net", plan)
    by_node = {"tor-a": ports, "h1": [host]}
    assert pauses_whom(ports[0], by_node, ingress=True) == ["h1:0"]
    assert pauses_whom(ports[0], by_node, ingress=False) == ["h2:0", "h3:0"]
    assert pauses_whom(host, by_node, ingress=True) == [] == pauses_whom(host, by_node, ingress=False)
