"""The PFC agent in its own process (testbed/qos/pfc_process.py): asked for reports over its pipe, stopped, ended
with its input (so it never outlives the run that started it), and a process that died gives no report, which
the verdict takes as "unknown"."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from testbed.experiment.fidelity import verdict
from testbed.qos.pfc_process import PfcProcess
from testbed.qos.shaper import Shaper
from testbed.qos.spec import QosSpec
from testbed.system.ownership import Ownership

QUIET = [{"cpu_idle": 0.4, "steal": 0.0, "ovs_thread": 0.3}]


class _Owner:
    spawn = Ownership.spawn  # the run's gate: the process runs once recorded, here in a list

    def __init__(self):
        self.processes: list[tuple[int, str]] = []

    def process(self, pid: int, what: str) -> None:
        self.processes.append((pid, what))


def _started(detect: str = "poll") -> tuple[PfcProcess, _Owner]:
    owner = _Owner()
    agent = PfcProcess(Shaper([], QosSpec(pfc={"enabled": True, "poll_ms": 5, "detect": detect})), None, owner)
    agent.start()
    return agent, owner


def test_the_agent_runs_in_its_own_process_answers_and_ends_with_its_input():
    since = time.monotonic()
    agent, owner = _started()
    try:
        pid = agent.proc.pid
        assert pid != os.getpid() and owner.processes == [(pid, "hpnlab PFC agent")]  # recorded for clean
        time.sleep(0.3)
        running = agent.report(since)
        assert running["polls_in_window"] > 20 and running["error"] is None and running["detect"] == "poll"
        agent.stop()
        final = agent.report(since)
        assert final["polls"] >= running["polls"] and final["last_poll_age_ms"] < 100
        assert verdict(QUIET, final, pfc_enabled=True)["faithful"]
    finally:
        proc = agent.proc
        agent.close()
    assert proc.returncode == 0 and agent.proc is None


def test_the_agent_process_ends_when_its_parent_goes_without_a_word():
    """Its input closing is all it needs (the parent killed with -9 closes it the same way)."""
    agent, _ = _started()
    proc = agent.proc
    proc.stdin.close()
    assert proc.wait(timeout=10) == 0
    agent.close()


def test_a_killed_agent_process_gives_no_report_and_the_verdict_is_unknown():
    agent, _ = _started()
    try:
        os.kill(agent.proc.pid, signal.SIGKILL)
        agent.proc.wait(timeout=10)
        agent.stop()  # does not raise: the teardown goes on
        report = agent.report()
        assert report is None
        v = verdict(QUIET, report, pfc_enabled=True)
        assert v["status"] == "unknown" and not v["faithful"]
    finally:
        agent.close()


def test_the_agent_process_ignores_a_terminals_ctrl_c_and_ends_on_sigterm():
    """Ctrl-C is the run's to act on (it stops the agent through the pipe); SIGTERM ends it cleanly."""
    agent, _ = _started()
    try:
        os.kill(agent.proc.pid, signal.SIGINT)
        time.sleep(0.2)
        assert agent.report() is not None
        os.kill(agent.proc.pid, signal.SIGTERM)
        assert agent.proc.wait(timeout=10) == 128 + signal.SIGTERM
    finally:
        agent.close()


def test_a_ctrl_c_while_the_agent_starts_leaves_each_answer_to_its_own_request(monkeypatch):
    """A Ctrl-C while the run waited for the process to be ready: the teardown's requests that follow get their
    own answers (the ready line, still owed, is read first), not the one before."""
    import pytest

    owner = _Owner()
    agent = PfcProcess(Shaper([], QosSpec(pfc={"enabled": True, "poll_ms": 5, "detect": "poll"})), None, owner)
    answer = PfcProcess._answer

    def interrupted(self, op, timeout):
        monkeypatch.setattr(PfcProcess, "_answer", answer)
        raise KeyboardInterrupt

    monkeypatch.setattr(PfcProcess, "_answer", interrupted)
    with pytest.raises(KeyboardInterrupt):
        agent.start()
    try:
        report = agent.report()
        assert report is not None and "polls" in report and "pid" not in report
        agent.stop()
        assert agent.report()["last_poll_age_ms"] is not None
    finally:
        agent.close()


def test_two_answers_that_arrived_together_are_both_read_at_once():
    """Two answers owed and both in the pipe: the second is taken from what was read with the first, not waited
    for (a buffered reader held it where select could not see it: ci2 waited out the 30 s for it)."""
    from types import SimpleNamespace

    r, w = os.pipe()
    agent = PfcProcess(Shaper([], QosSpec()), None, _Owner())
    agent.proc = SimpleNamespace(stdout=os.fdopen(r, "rb"))
    try:
        os.write(w, b'{"pid": 1}\n{"polls": 2}\n')
        t = time.monotonic()
        assert agent._answer("start", 5) == b'{"pid": 1}' and agent._answer("report", 5) == b'{"polls": 2}'
        assert time.monotonic() - t < 1
        os.close(w)
        assert agent._answer("stop", 5) == b""  # its end
    finally:
        agent.proc.stdout.close()


def test_a_configuration_cut_off_by_its_interrupted_parent_ends_the_agent_without_a_traceback():
    """A Ctrl-C while `up` wrote the agent's configuration (100 KB on a large fabric) left the agent the pipe's
    first 64 KB and end of input: it exited 1 with a JSONDecodeError's traceback on the terminal (CI's interrupt
    sweep). A line without its newline is the parent gone, as an empty input is."""
    cut = json.dumps({"spec": {}, "ports": ["x" * 70_000]})[:65_536]
    done = subprocess.run([sys.executable, "-m", "testbed.qos.pfc_process"], input=cut, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_a_request_cut_mid_line_is_the_last_thing_written_to_the_agent():
    """The Ctrl-C of the sweep above landed in the parent's write of the configuration: its stop() then wrote
    on from the cut, and the agent read one garbled line (JSONDecodeError, exit 1). Now nothing follows a cut
    request: the agent sees a line without its end, ends quietly, and exits 0."""
    agent, _ = _started()
    proc = agent.proc
    real = proc.stdin

    class _CutWriter:
        def write(self, data: bytes) -> int:
            real.write(data[: len(data) // 2])
            real.flush()
            raise KeyboardInterrupt

        def __getattr__(self, name):
            return getattr(real, name)

    proc.stdin = _CutWriter()
    try:
        agent.report()
    except KeyboardInterrupt:
        pass
    proc.stdin = real
    assert agent.stop() is None and agent.report() is None  # nothing written after the cut
    agent.close()
    assert proc.returncode == 0
