"""The run's watchers (the CPU sampler, the PFC agent) say when they stopped watching, and the verdict then
says "unknown": a watcher that died must not read as one that saw a quiet, empty fabric."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from testbed.experiment.fidelity import verdict
from testbed.experiment.measure import Sampler
from testbed.qos.pfc import PfcAgent
from testbed.qos.shaper import Shaper
from testbed.qos.spec import QosSpec

QUIET = [{"cpu_idle": 0.4, "steal": 0.0, "ovs_thread": 0.3}]


def until(cond, timeout: float = 30.0) -> None:
    """Wait for a state, not for a time: `cond()` true within a generous timeout."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "never reached"
        time.sleep(0.01)


class _Qos:
    def __init__(self, fail_after: int | None = None):
        self.ports, self.reads, self.fail_after = {}, 0, fail_after

    def stats(self, _handle, _ports=None):
        self.reads += 1
        if self.fail_after is not None and self.reads > self.fail_after:
            raise KeyError("tor-p0-s0-r0-a:5")  # a port's counters gone mid-run
        return {}


def _sampler(qos: _Qos) -> Sampler:
    s = Sampler(SimpleNamespace(qos=qos, cluster=None), period=0.05)
    s.start()
    return s


def test_a_sampler_that_dies_is_reported_and_the_verdict_is_unknown():
    s = _sampler(_Qos(fail_after=3))
    until(lambda: s.error is not None)
    s.stop()
    assert s.error == "KeyError: 'tor-p0-s0-r0-a:5'" and len(s.rows) == 2
    # the rows are this machine's real readings: a busy machine would make the run "not faithful" on its own,
    # so the verdict is read on the rows the sampler kept with a quiet machine's figures
    v = verdict([{**r, **QUIET[0]} for r in s.rows], sampler_error=s.error)
    assert v["status"] == "unknown" and not v["faithful"]
    assert v["unknown"][0].startswith("the CPU sampler failed (KeyError")


def test_a_run_shorter_than_the_sampling_period_still_gets_a_sample():
    s = Sampler(SimpleNamespace(qos=_Qos(), cluster=None), period=10.0)
    s.start()
    time.sleep(0.2)
    s.stop()
    assert s.error is None and len(s.rows) == 1 and 0.0 <= s.rows[0]["cpu_idle"] <= 1.0


def _agent(poll) -> PfcAgent:
    spec = QosSpec(pfc={"enabled": True, "poll_ms": 5, "detect": "poll"})
    agent = PfcAgent(Shaper([], spec))
    agent.poll = poll
    return agent


def test_a_pfc_agent_that_dies_makes_the_verdict_unknown():
    def poll(_dumpers, include_hosts=True):
        if agent.polls >= 5:
            raise OSError("netlink socket closed")

    agent = _agent(poll)
    since = time.monotonic()
    agent.start()
    until(lambda: agent.report(since)["error"] is not None)
    agent.stop()
    report = agent.report(since)
    assert report["error"] == "OSError: netlink socket closed" and report["polls"] == 5
    v = verdict(QUIET, report, pfc_enabled=True)
    assert v["status"] == "unknown" and v["unknown"][0].startswith("the PFC agent died (OSError: netlink")


def test_a_pfc_agent_that_stalls_makes_the_verdict_unknown():
    held, release = threading.Event(), threading.Event()

    def poll(_dumpers, include_hosts=True):
        if agent.polls == 3:
            held.set()
            release.wait(30)  # held (the GIL, a netlink call that hangs): the queues go unwatched

    agent = _agent(poll)
    since = time.monotonic()
    agent.start()
    assert held.wait(30)
    time.sleep(1.5)  # the silence: at least this long, however slow the machine (the agent is blocked)
    agent.stop()  # the stop comes while the agent still hangs
    report = agent.report(since)
    release.set()
    assert report["error"] is None and report["last_poll_age_ms"] > 1400
    assert verdict(QUIET, report, pfc_enabled=True)["unknown"][0].startswith("the PFC agent was silent for")


@pytest.mark.timing  # 20 polls in 0.3 s: the machine's pace
def test_a_pfc_agent_that_keeps_its_period_is_judged_on_its_figures():
    agent = _agent(lambda _d, include_hosts=True: None)
    since = time.monotonic()
    agent.start()
    time.sleep(0.3)
    agent.stop()
    report = agent.report(since)
    assert report["polls_in_window"] > 20 and report["last_poll_age_ms"] < 100
    assert verdict(QUIET, report, pfc_enabled=True)["faithful"]


def test_a_machine_without_bpf_polls_and_says_why_unless_kernel_was_asked_for(monkeypatch):
    import pytest

    import testbed.qos.kqueues as kqueues
    from testbed.system.bpf import BpfUnavailable

    def unavailable(*_args):
        raise BpfUnavailable("cannot build BPF programs: missing clang")

    monkeypatch.setattr(kqueues, "KernelQueues", unavailable)
    agent = PfcAgent(Shaper([], QosSpec(pfc={"poll_ms": 5})))  # detect: auto
    agent.start()
    agent.stop()
    report = agent.report()
    assert report["detect"] == "poll" and report["detect_why"] == "cannot build BPF programs: missing clang"
    assert report["polls"] > 0 and report["error"] is None
    with pytest.raises(BpfUnavailable):
        PfcAgent(Shaper([], QosSpec(pfc={"poll_ms": 5, "detect": "kernel"}))).start()
