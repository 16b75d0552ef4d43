"""pfc.model ingress in the agent and the verdict, without the kernel: the agent's pauses set right from the
kernel's accounts when their crossings came out of order, and a pause judged late by an ingress port's headroom."""

from __future__ import annotations

from testbed.experiment.fidelity import verdict
from testbed.qos.pfc import PfcAgent
from testbed.qos.ports import Port
from testbed.qos.shaper import Shaper
from testbed.qos.spec import QosSpec, port_plan

QUIET = [{"cpu_idle": 0.4, "steal": 0.0, "ovs_thread": 0.3}]
SPEC = QosSpec(scale=10_000, pfc={"model": "ingress", "detect": "kernel", "poll_ms": 5, "reaction_ms": 2.0})


class _Kernel:
    """The accounts' paused flags, as the kernel would hold them."""

    def __init__(self):
        self.paused: set[tuple[str, int]] = set()

    def ingress_paused(self, key: str, prio: int) -> bool:
        return (key, prio) in self.paused


def _agent() -> tuple[PfcAgent, list[tuple[str, int, bool]]]:
    plan = port_plan(200, SPEC)
    ports = [Port("tor-a", 1, "tor", "h0", 0, "t-1", "h0-0", None, plan),
             Port("tor-a", 2, "tor", "h1", 0, "t-2", "h1-0", None, plan),
             Port("h0", 0, "host", "tor-a", 1, "h0-0", "t-1", "/proc/1/ns/net", plan),
             Port("h1", 0, "host", "tor-a", 2, "h1-0", "t-2", "/proc/2/ns/net", plan)]
    shaper = Shaper(ports, SPEC)
    shaper.ports = {p.key: p for p in ports}
    gates: list[tuple[str, int, bool]] = []
    shaper.set_paused = lambda key, prio, paused: gates.append((key, prio, paused))
    agent = PfcAgent(shaper, kernel=_Kernel())
    return agent, gates


def test_the_agent_takes_each_accounts_pause_from_the_kernel_when_its_crossings_came_out_of_order():
    agent, gates = _agent()
    assert agent.queues["tor-a:1", 3].upstream == ["h0:0"] and agent.queues["h0:0", 3].upstream == []
    agent.kernel.paused.add(("tor-a:1", 3))  # its XOFF not heard (an XON came first and changed nothing)
    agent._resync(1.0, set())
    assert gates == [("h0:0", 3, True)] and agent.resynced == 1
    agent._resync(1.05, set())  # nothing differs: nothing done
    assert gates == [("h0:0", 3, True)] and agent.resynced == 1
    agent.kernel.paused.clear()  # its XON lost
    agent._resync(1.1, set())
    assert gates == [("h0:0", 3, True), ("h0:0", 3, False)] and agent.resynced == 2
    assert agent.pauses["h0:0", 3].events == 1 and round(agent.pauses["h0:0", 3].paused_s, 6) == 0.1


def _ingress_report(max_over: int, headroom: int, with_accounts: bool = True) -> dict:
    report = {"detect": "kernel", "model": "ingress", "poll_period_ms": {"configured": 50.0, "max": 50.0},
              "polls": 100, "polls_in_window": 100, "last_poll_age_ms": 10.0, "error": None,
              "reaction_ms": {"median": 0.2, "p99": 0.6}, "queues": {}}
    if with_accounts:
        report["ingress"] = {"accounts": {"tor-a:1/p3": {"max_bytes": 90_000, "max_over": max_over,
                                                         "headroom": headroom, "xoff_events": 3, "bytes": 0}},
                             "buffers": {}, "counted_bytes": 10**7, "drained_bytes": 4_000, "unfollowed": 0}
    return report


def test_a_pause_is_late_when_an_ingress_port_went_past_its_threshold_by_more_than_its_headroom():
    ok = verdict(QUIET, _ingress_report(40_000, 56_000), pfc_enabled=True)
    assert ok["status"] == "faithful", ok
    late = verdict(QUIET, _ingress_report(60_000, 56_000), pfc_enabled=True)
    assert late["status"] == "not faithful"
    assert late["reasons"] == ["a PFC pause came late: 1 ingress port(s) past their threshold by more than their "
                               "headroom, e.g. tor-a:1/p3 by 60,000 B > 56,000 B (PFC reaction p99 0.6 ms, from "
                               "kernel events)"]
    unread = verdict(QUIET, _ingress_report(0, 0, with_accounts=False), pfc_enabled=True)
    assert unread["status"] == "unknown" and "ingress accounts were not read" in unread["unknown"][0]
    lost = _ingress_report(0, 1)
    lost["ingress"]["drained_bytes"] = 200_000  # 2% left unseen
    v = verdict(QUIET, lost, pfc_enabled=True)
    assert v["status"] == "unknown" and "200,000 of 10,000,000 B left their queues unseen" in v["unknown"][0]
