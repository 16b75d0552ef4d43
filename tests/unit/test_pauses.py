"""PFC over several servers without root: two PFC agents over their own halves of a fabric's ports pause each
other's ports by signed UDP messages on 127.0.0.1 (testbed.cluster.pauses); a forged, foreign or replayed
message changes nothing; a silent server's pauses are released; the servers' reports add up."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import time

import pytest

from testbed.cluster.pauses import MAC_BYTES, start_agent
from testbed.cluster.placement import place
from testbed.qos.pfc_report import merge_reports
from testbed.qos.ports import egress_ports, resolve
from testbed.qos.shaper import lossless_leaf
from testbed.qos.spec import QosSpec, port_plan
from topos import build


class Share:
    """A server's shaped ports as its PFC agent sees them; pausing a class is recorded instead of sent."""

    def __init__(self, ports, spec):
        self.ports, self.spec = {p.key: p for p in ports}, spec
        self.paused: set[tuple[str, int]] = set()

    def set_paused(self, key, priority, paused):
        assert key in self.ports
        (self.paused.add if paused else self.paused.discard)((key, priority))


class Queues:
    """A qdisc dump standing in for the kernel's: the lossless backlog of each port, as set by the test."""

    def __init__(self, ports):
        self.backlog = {p.key: 0 for p in ports}
        self.ifindex = {p.key: p.ifindex for p in ports}

    def backlogs(self, handles):
        return [(self.ifindex[k], lossless_leaf(3), b, 0, 0) for k, b in self.backlog.items()]


@pytest.fixture()
def two_servers():
    topo = build("hpn")
    spec = resolve(QosSpec(pfc={"poll_ms": 5}), topo)
    placement = place(topo, ["a", "b"])
    ports = egress_ports(topo, spec, netns_of=lambda h: None, ifname_of=lambda n, p: f"{n}-{p}")
    for i, p in enumerate(ports):
        p.ifindex = i + 1
    key = secrets.token_bytes(32)
    agents, wires, queues = {}, {}, {}
    for s in ("a", "b"):
        mine = [p for p in ports if placement.server_of[p.node] == s]
        agents[s], wires[s] = start_agent(Share(mine, spec), None, run_id="run1", me=s, key=key, bind_ip="127.0.0.1",
                                          others=[p for p in ports if placement.server_of[p.node] != s],
                                          server_of_node=placement.server_of)
        queues[s] = Queues(mine)
    peers = {s: ("127.0.0.1", w.port) for s, w in wires.items()}
    for w in wires.values():
        w.connect(peers)
    yield topo, placement, agents, wires, queues, key
    for w in wires.values():
        w.close()


def settle(agent, wire, rounds: int = 20) -> None:
    """What the other server said, applied (the agent's loop does this as messages arrive)."""
    for _ in range(rounds):
        agent.take_remote()
        time.sleep(0.005)


def crossing_queue(topo, placement, on: str):
    """A switch port on server `on` whose queue pauses a port on the other server (an aggregation's port
    toward a ToR, whose upstream includes the other ToRs' uplinks)."""
    for l in placement.crossing:
        for node, port in ((l.a, l.a_port), (l.b, l.b_port)):
            if placement.server_of[node] == on and topo.nodes[node].role == "agg":
                return f"{node}:{port}"
    raise AssertionError("no crossing queue")


def test_a_congested_queue_pauses_the_other_servers_ports_by_message_and_releases_them(two_servers):
    topo, placement, agents, wires, queues, _ = two_servers
    a, b = agents["a"], agents["b"]
    hot = next(k for k in queues["b"].backlog if topo.nodes[k.split(":")[0]].role == "agg"
               and any(placement.server_of[u.split(":")[0]] == "a" for u in b.queues[k, 3].upstream))
    ups = b.queues[hot, 3].upstream
    remote_ups = {u for u in ups if placement.server_of[u.split(":")[0]] == "a"}
    assert remote_ups and remote_ups != set(ups)  # the queue has ingress on both servers
    plan = b.queues[hot, 3].plan
    queues["b"].backlog[hot] = plan.xoff + 1
    b.poll({None: queues["b"]})
    settle(a, wires["a"])
    assert {k for k, _ in a.shaper.paused} == remote_ups  # a's ports, paused by b's queue
    assert {k for k, _ in b.shaper.paused} == set(ups) - remote_ups  # b's own, paused directly
    assert all(a.pauses[u, 3].events == 1 for u in remote_ups)
    queues["b"].backlog[hot] = plan.xon - 1
    b.poll({None: queues["b"]})
    settle(a, wires["a"])
    assert a.shaper.paused == set() and b.shaper.paused == set()
    settle(b, wires["b"])  # the acknowledgements: a one-way delay per message
    rep = wires["b"].report()
    assert rep["sent"] == 2 and len(rep["one_way_ms"]) == 2 and wires["a"].report()["received"] == 2


def test_forged_foreign_or_replayed_messages_change_nothing(two_servers):
    topo, placement, agents, wires, queues, key = two_servers
    a = agents["a"]
    target = next(k for k in a.shaper.ports if topo.nodes[k.split(":")[0]].role == "tor")
    holds = [[target, 3, "agg-x:1"]]

    def datagram(msg: dict, with_key: bytes = key) -> bytes:
        body = json.dumps(msg).encode()
        return hmac.new(with_key, body, hashlib.sha256).digest() + body

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        to = ("127.0.0.1", wires["a"].port)
        s.sendto(datagram({"r": "run1", "f": "b", "s": 5, "h": holds}, secrets.token_bytes(32)), to)  # wrong key
        s.sendto(datagram({"r": "run2", "f": "b", "s": 6, "h": holds}), to)  # another run
        s.sendto(datagram({"r": "run1", "f": "c", "s": 7, "h": holds}), to)  # not a peer
        s.sendto(b"\0" * MAC_BYTES + b"{", to)
        settle(a, wires["a"], 5)
        assert a.shaper.paused == set() and wires["a"].counts["rejected"] == 4
        s.sendto(datagram({"r": "run1", "f": "b", "s": 9, "h": holds}), to)  # signed, from b's address: taken
        settle(a, wires["a"], 5)
        assert a.shaper.paused == {(target, 3)}
        s.sendto(datagram({"r": "run1", "f": "b", "s": 8, "h": []}), to)  # older than the last: ignored
        settle(a, wires["a"], 5)
        assert a.shaper.paused == {(target, 3)} and wires["a"].counts["rejected"] == 5


def paused_by_b(two_servers) -> str:
    """One of a's ToR ports, paused by a message from b; its key."""
    topo, _placement, agents, wires, _queues, _key = two_servers
    a = agents["a"]
    target = next(k for k in a.shaper.ports if topo.nodes[k.split(":")[0]].role == "tor")
    wires["b"].send("a", [(target, 3, "agg-x:1")])
    settle(a, wires["a"], 5)
    assert a.shaper.paused == {(target, 3)}
    return target


def test_a_silent_servers_pauses_expire(two_servers):
    _topo, _placement, agents, wires, queues, _key = two_servers
    a = agents["a"]
    paused_by_b(two_servers)
    wires["a"].expire_s = 0.05
    time.sleep(0.1)
    a.poll({None: queues["a"]})  # b said nothing since: its pause goes, as an unrenewed PAUSE times out
    assert a.shaper.paused == set() and a.expired == 1


def test_headroom_covers_the_pause_message_for_ingress_from_other_servers():
    spec = QosSpec(pfc={"poll_ms": 5, "remote_ms": 4})  # scale 10,000
    here = port_plan(400, spec, ingress_gbps=3 * 400 + 8 * 200).lossless[3]
    split = port_plan(400, spec, ingress_gbps=3 * 400 + 8 * 200, remote_ingress_gbps=2 * 400).lossless[3]
    assert split.headroom - here.headroom == int(2 * 400e9 / 1e4 / 8 * 0.004) == 40_000
    topo = build("hpn")
    placement = place(topo, ["a", "b"])
    crossing = frozenset(l.name for l in placement.crossing)
    plain = {p.key: p.plan for p in egress_ports(topo, resolve(spec, topo), lambda h: None, lambda n, p: "x")}
    split_ports = egress_ports(topo, resolve(spec, topo), lambda h: None, lambda n, p: "x", crossing=crossing)
    grew = {p.key for p in split_ports if p.plan.lossless[3].headroom > plain[p.key].lossless[3].headroom}
    # exactly the ports of devices with a crossing link other than their own
    assert grew == {p.key for p in split_ports if any(l.name in crossing and {l.a, l.b} != {p.node, p.peer}
                                                      for l in topo.links_of(p.node))}


def test_the_servers_reports_add_up():
    def rep(polls, median, p99, mx, tier_events, ports, one_way):
        return {"priorities": [3], "by_priority": {"3": {"pause_events": tier_events, "paused_s": 0.5,
                                                         "xoff_events": 1, "drops": 0}},
                "polls": polls, "pfc_frames_sent": 0,
                "poll_period_ms": {"configured": 5, "median": median, "p99": p99, "max": mx},
                "agent_cpu_share": 0.2, "pauses_by_tier": {"agg": {"pause_events": tier_events, "paused_s": 0.5,
                                                                    "ports_paused": 1}},
                "ports": ports, "queues": {}, "samples": [{"t": 0.0, "backlog": {}, "paused": list(ports)}],
                "remote": {"sent": 2, "received": 3, "rejected": 0, "send_errors": 0, "expired": 0,
                           "one_way_ms": one_way}}

    m = merge_reports({"a": rep(100, 5.0, 6.0, 9.0, 2, {"x:1/p3": {}}, [0.2, 0.4]),
                       "b": rep(90, 5.1, 8.0, 7.0, 3, {"y:1/p3": {}}, [0.3])})
    assert m["polls"] == 190 and m["poll_period_ms"] == {"configured": 5, "median": 5.1, "p99": 8.0, "max": 9.0}
    assert m["pauses_by_tier"]["agg"] == {"pause_events": 5, "paused_s": 1.0, "ports_paused": 2}
    assert m["by_priority"]["3"]["pause_events"] == 5 and set(m["ports"]) == {"x:1/p3", "y:1/p3"}
    assert m["samples"] == [{"t": 0.0, "backlog": {}, "paused": ["x:1/p3", "y:1/p3"]}]
    assert m["between_servers"] == {"sent": 4, "received": 6, "rejected": 0, "expired": 0,
                                    "one_way_ms": {"n": 3, "median": 0.3, "p99": 0.4, "max": 0.4}}
    assert set(m["by_server"]) == {"a", "b"}


def _datagram(key: bytes, msg: dict) -> bytes:
    body = json.dumps(msg).encode()
    return hmac.new(key, body, hashlib.sha256).digest() + body


def test_a_replayed_acknowledgement_does_not_keep_a_dead_servers_pause(two_servers):
    """Only a fresh set of holds renews the sender's pauses: an ack captured once and replayed (it is validly
    signed) kept a dead peer's pause 1.5 s against a 0.3 s expiry."""
    _topo, _placement, agents, wires, queues, key = two_servers
    a = agents["a"]
    paused_by_b(two_servers)
    wires["a"].expire_s = 0.3
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        end = time.monotonic() + 0.6
        while time.monotonic() < end:  # b is dead; someone replays its ack of a's message number 1
            s.sendto(_datagram(key, {"r": "run1", "f": "b", "a": 1}), ("127.0.0.1", wires["a"].port))
            settle(a, wires["a"], 2)
            a.poll({None: queues["a"]})
    assert a.shaper.paused == set() and a.expired == 1


@pytest.mark.parametrize("msg", [
    {"s": "1", "h": []}, {"s": True, "h": []}, {"s": 3, "h": 5}, {"s": 3, "h": [5]}, {"s": 3, "h": [["x", 3]]},
    {"s": 3, "h": [[1, 3, "y"]]}, {"s": 3}, {"h": []}, {"a": "x"}, {"a": 0}, {"s": 3, "h": [], "extra": 1},
])
def test_a_signed_but_malformed_message_is_rejected_and_the_agent_runs_on(two_servers, msg):
    topo, placement, agents, wires, queues, key = two_servers
    a = agents["a"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(_datagram(key, {"r": "run1", "f": "b", **msg}), ("127.0.0.1", wires["a"].port))
        settle(a, wires["a"], 3)  # raised out of the receive path before, and stopped the agent
    assert wires["a"].counts["rejected"] == 1 and a.shaper.paused == set()
    target = next(k for k in a.shaper.ports if topo.nodes[k.split(":")[0]].role == "tor")
    wires["b"].send("a", [(target, 3, "agg-x:1")])  # and a good one after it is still taken
    settle(a, wires["a"], 5)
    assert a.shaper.paused == {(target, 3)}
