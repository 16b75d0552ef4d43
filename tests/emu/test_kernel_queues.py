"""The lossless queues seen per packet by BPF in the kernel (issue #28): the backlog the kernel programs read
is the qdisc's own, the PFC agent acts on their crossings, and nothing is lost."""

from __future__ import annotations

import threading
import time

from testbed.experiment.measure import StreamSpec, run_streams
from testbed.net.network import Network
from testbed.qos.shaper import lossless_leaf
from testbed.qos.spec import QosSpec
from topos import build

DSCP26 = 26 << 2


def incast(seconds: float = 3) -> list[StreamSpec]:
    """4 hosts of segment 0 into h4 at ~1.5x its two ports (as tests/emu/test_qos.py's UDP incast)."""
    return [StreamSpec(src=f"h{i}", dst="h4", sport=6000 + i, dport=7000, pps=1340, duration=seconds, size=1400,
                       stream=i, tos=DSCP26) for i in range(4)]


def compare(net: Network, stop: threading.Event, out: list[tuple[str, int, int]]) -> None:
    """While traffic runs: each switch queue's kernel figure against a qdisc dump, for the queues no packet
    entered or left while the dump was read (the kernel read them last before it began). (A queue that moved
    during the dump has no one figure to compare.)"""
    leaf = lossless_leaf(3)
    switch_ports = [p for p in net.qos.ports.values() if not p.is_host]
    while not stop.is_set():
        began = time.monotonic_ns()
        dumped = net.qos.stats(leaf, ports=switch_ports)
        kernel = net.pfc.kernel.snapshot()
        for key, qdiscs in dumped.items():
            k = kernel[key, 3]
            if qdiscs and k.read_ns < began:
                out.append((key, k.backlog, qdiscs[0].backlog))
        # A full dump every 20 ms: when the PFC agent was a thread of this process, this held it up to 165 ms
        # in a full suite (29 lossless drops). In its own process (pfc_process.py) nothing here can.
        stop.wait(0.02)


def test_kernel_backlog_is_the_qdiscs_and_pfc_acts_on_its_crossings(no_leftovers):
    # headroom for 1 s of ingress: lossless whatever the agent's pace (test_qos.py's pause test says why)
    with Network(build("hpn"), qos=QosSpec(pfc={"reaction_ms": 1000.0})) as net:
        assert net.pfc.detect == "kernel", net.pfc.detect_why
        stop, pairs = threading.Event(), []
        watcher = threading.Thread(target=compare, args=(net, stop, pairs))
        watcher.start()
        try:
            r = run_streams(net, incast(), tail=4)
        finally:
            stop.set()
            watcher.join()
        lossless = net.qos.stats(lossless_leaf(3))
        report = net.stop_qos()
    queued = [p for p in pairs if p[2] > 0]
    inexact = [p for p in pairs if p[1] != p[2]]
    print(f"{len(pairs)} comparisons, {len(queued)} with a backlog, {len(inexact)} not exact {inexact[:5]}; "
          f"reaction {report['reaction_ms']}")
    assert len(queued) >= 20, f"only {len(queued)} comparisons of a queue with a backlog"
    # The figure is the qdisc's own at every packet the programs see. Rarely it lags behind the qdisc for a
    # millisecond or more: measured 0 of 361, 1 of 348, 0-2 of 237-289 (six runs alone), 2 of 88 (a full suite)
    # and 5 of 258 comparisons with a backlog, 2-3 frames high, once 9 (a queue the qdisc said was empty). Not a
    # dequeue that escapes the tracepoint: a probe on qdisc_dequeue and net_dev_start_xmit counted the same
    # packets on every switch port (48,332 each in this incast); the cause is not found. Bounded here: at most
    # 3% of the comparisons with a backlog, and never low (a dequeue the programs saw is always in the figure).
    assert len(inexact) <= max(2, 3 * len(queued) // 100), f"not the qdisc's figure: {inexact[:5]}"
    assert all(kernel > qdisc for _k, kernel, qdisc in inexact), inexact[:5]
    # PFC on the kernel's crossings: pauses reached the senders, every packet arrived, nothing dropped
    sent = sum(s["sent"] for s in r["senders"])
    streams = r["receivers"]["h4:7000"]["streams"]
    assert sum(q[0].drops for q in lossless.values() if q) == 0
    assert sum(s["received"] for s in streams.values()) == sent
    assert report["detect"] == "kernel" and report["pauses_by_tier"]["host"]["pause_events"] > 0
    assert report["reaction_ms"]["p99"] is not None  # every crossing acted on was timed


def test_a_link_taken_down_and_up_leaves_no_pause_held(no_leftovers):
    """A switch queue held above XOFF (its port paused by hand while a lossless stream fills it), so the agent
    pauses its upstream; then its link goes down, which empties the queue without a dequeue. The kernel's reset
    tracepoint must say so (an XON): before, the stored backlog kept XOFF, and the upstream stayed paused with
    nothing left to cross that port again."""
    import json

    from testbed.system.ownership import RUN_DIR

    spec = StreamSpec(src="h0", dst="h4", sport=6000, dport=7000, pps=1000, duration=2.0, size=1400, tos=DSCP26)
    with Network(build("hpn"), qos=QosSpec(pfc={"reaction_ms": 1000.0})) as net:
        assert net.pfc.detect == "kernel", net.pfc.detect_why
        state = RUN_DIR / f"{net.owner.run_id}.pfc.json"
        agent_paused = lambda: json.loads(state.read_text())["paused"] if state.exists() else []  # noqa: E731
        toward_h4 = [k for k, p in net.qos.ports.items() if p.peer == "h4"]
        links = [l.name for l in net.topo.links if "h4" in (l.a, l.b)]
        seen: dict = {}

        def hold() -> None:
            for k in toward_h4:
                net.qos.set_paused(k, 3, True)

        def cut() -> None:  # the queue is past XOFF and its upstream paused: now the link goes down
            t0 = time.monotonic()
            while not agent_paused():
                assert time.monotonic() - t0 < 30, "the agent paused nobody upstream of the held queue"
                time.sleep(0.05)
            seen["held"] = agent_paused()
            seen["above"] = {k: net.pfc.kernel.figures(k, 3).backlog - net.qos.ports[k].plan.lossless[3].xoff
                             for k in toward_h4}  # past XOFF by
            for name in links:
                net.set_link(name, False)

        run_streams(net, [spec], actions=[(0.5, hold), (1.5, cut)], tail=0.5)
        t0 = time.monotonic()
        while agent_paused():  # nothing crosses a port that is down: only the reset's XON releases them
            assert time.monotonic() - t0 < 10, f"pauses still held with the link down: {agent_paused()}"
            time.sleep(0.05)
        after = {k: net.pfc.kernel.figures(k, 3).backlog for k in toward_h4}
        for name in links:
            net.set_link(name, True)
        for k in toward_h4:
            net.qos.set_paused(k, 3, False)
        report = net.stop_qos()
    print(f"held {seen['held']} with the queues at {seen['above']}; after the link went down {after}")
    assert max(seen["above"].values()) > 0  # a queue was past XOFF when its link went down
    assert after == dict.fromkeys(toward_h4, 0)
    assert report["kernel_lost_events"] == 0 and report["kernel_no_leaf"] == 0
