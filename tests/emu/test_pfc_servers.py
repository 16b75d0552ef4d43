"""PFC split as over two servers, on this machine: the default HPN's ports divided by the cluster placement
into server a (segment 0) and server b (segment 1), each half watched by its own PFC agent, the two
agents pausing each other's ports only by signed UDP messages on 127.0.0.1 (testbed.cluster.pauses). The
same UDP incast as tests/emu/test_qos.py's, from segment 0 into a host of segment 1: lossless end to end
with the pauses crossing between the agents both ways."""

from __future__ import annotations

import secrets

import pytest

from testbed.cluster.pauses import start_agent
from testbed.cluster.placement import place
from testbed.experiment.measure import StreamSpec, run_streams
from testbed.net.network import Network
from testbed.qos.pfc_report import merge_reports
from testbed.qos.shaper import lossless_leaf
from testbed.qos.spec import QosSpec
from topos import build

DSCP26 = 26 << 2
# 4 senders at 15 Mbit/s into a host's two 20 Mbit/s ports: 30 on each even if the hash splits them 2/2
# (at 9 Mbit/s an even split congested nothing, and whether a run tested PFC at all was up to the hash)
PPS = 1340


class SplitNetwork(Network):
    """One machine's network whose lossless headroom is planned as the two servers' would be: the links between
    them take a pause message's delay (pfc.remote_ms) on top of the reaction."""

    def __init__(self, topo, crossing: frozenset[str], **kw):
        self._crossing = crossing
        super().__init__(topo, **kw)

    def crossing_links(self) -> frozenset[str]:
        return self._crossing


class ServerShare:
    """One server's share of the network's shaped ports: what a server agent's own Shaper holds there."""

    def __init__(self, shaper, keys: set[str]):
        self._shaper, self.spec = shaper, shaper.spec
        self.ports = {k: p for k, p in shaper.ports.items() if k in keys}

    @property
    def paused(self) -> set[tuple[str, int]]:
        return {q for q in self._shaper.paused if q[0] in self.ports}

    def set_paused(self, key: str, priority: int, paused: bool) -> None:
        assert key in self.ports, f"{key} is another server's port: only its own agent may pause it"
        self._shaper.set_paused(key, priority, paused)


@pytest.mark.slow
def test_pauses_cross_between_two_servers_agents_and_nothing_is_lost(no_leftovers):
    topo = build("hpn")
    placement = place(topo, ["a", "b"])
    assert {placement.server_of[h] for h in ("h0", "h4")} == {"a", "b"}
    specs = [StreamSpec(src=f"h{i}", dst="h4", sport=6000 + i, dport=7000, pps=PPS, duration=3, size=1400,
                        stream=i, tos=DSCP26) for i in range(4)]  # see PPS
    with SplitNetwork(topo, frozenset(l.name for l in placement.crossing), qos=QosSpec()) as net:
        net.pfc.stop()  # the one-machine agent makes way for one per server
        net.pfc.close()
        net.pfc = None
        key = secrets.token_bytes(32)
        shares = {s: ServerShare(net.qos, {k for k, p in net.qos.ports.items() if placement.server_of[p.node] == s})
                  for s in ("a", "b")}
        agents, wires = {}, {}
        for s, share in shares.items():
            others = [p for k, p in net.qos.ports.items() if k not in share.ports]
            agents[s], wires[s] = start_agent(share, None, run_id=net.owner.run_id, me=s, key=key,
                                              bind_ip="127.0.0.1", others=others, server_of_node=placement.server_of)
        peers = {s: ("127.0.0.1", w.port) for s, w in wires.items()}
        try:
            for s in agents:
                wires[s].connect(peers)
                agents[s].start()
            r = run_streams(net, specs, tail=4)
            lossless = net.qos.stats(lossless_leaf(3))
        finally:
            for s in agents:
                agents[s].stop()
                wires[s].close()
        reports = {s: a.report() for s, a in agents.items()}
    report = merge_reports(reports)
    drops = sum(q[0].drops for q in lossless.values() if q)
    period = report["poll_period_ms"], report["poll_ms"], report["realtime"]  # gap, poll itself, SCHED_FIFO
    between = report["between_servers"]
    print(f"drops {drops}; between servers: {between}; pauses by tier {report['pauses_by_tier']}")
    sent = sum(s["sent"] for s in r["senders"])
    streams = r["receivers"]["h4:7000"]["streams"]
    assert sent >= 4 * 0.9 * PPS * 3
    assert drops == 0, period
    assert sum(s["received"] for s in streams.values()) == sent
    # both agents paused a port of the other's server: each received pause messages, acknowledged
    assert all(rep["remote"]["received"] > 0 for rep in reports.values()), {s: rep["remote"] for s, rep in
                                                                            reports.items()}
    assert between["rejected"] == 0 and between["expired"] == 0
    assert between["one_way_ms"]["n"] > 0 and between["one_way_ms"]["median"] < 50
    # the pause walked back to the senders, on server a, from the congestion on server b
    senders_paused = {k for k in reports["a"]["ports"] if k.split(":")[0] in {"h0", "h1", "h2", "h3"}}
    assert senders_paused, reports["a"]["ports"]
    assert {k.split("/")[0] for k in reports["b"]["ports"]} <= set(shares["b"].ports)
