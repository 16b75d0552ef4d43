"""The server agent (testbed.cluster.agent) that owns a cluster run's changes on each server, run here as a
local process: what it records it undoes, on `stop`, when the master's end of the pipe closes without a word
(a crashed master), and through `hpnlab clean` when the agent itself is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from testbed.cluster.servers import ServerAgent
from testbed.system.ownership import RUN_DIR

HPNLAB = str(Path(sys.executable).parent / "hpnlab")


def agent(tmp_path) -> tuple[ServerAgent, str]:
    run_id = f"agenttest-{uuid.uuid4().hex[:8]}-s2"
    a = ServerAgent("s2", [sys.executable, "-m", "testbed.cluster.agent", run_id], tmp_path / "agent.log")
    hello = a.start()
    assert hello["run_id"] == run_id and hello["capabilities"]["root"] is True
    return a, run_id


def give_it_things(a: ServerAgent, run_id: str) -> tuple[str, subprocess.Popen, str]:
    """A namespace, a process and a veth pair, each recorded with the agent as things of its run."""
    ns = f"hpnlab-{run_id}-x"
    a.intend("netns", [ns])
    subprocess.run(["ip", "netns", "add", ns], check=True)
    sleeper = subprocess.Popen(["sleep", "600"])
    a.process(sleeper.pid, "a node shell")
    veth = f"ag{run_id[10:16]}"
    a.intend("interfaces", [veth])
    subprocess.run(["ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p"], check=True)
    a.group([veth])
    rc, out = a.sh(f"ip -o link show {veth} | grep -c group")
    assert (rc, out.strip()) == (0, "1")
    path = a.write("../../etc/x.sh", "echo hi\n")  # a name only: the file lands in the agent's scratch folder
    assert Path(path).parent.name.startswith(f"hpnlab-{run_id}-") and Path(path).read_text() == "echo hi\n"
    return ns, sleeper, veth


def gone(ns: str, sleeper: subprocess.Popen, veth: str, run_id: str, within_s: float = 10) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and (Path(f"/run/netns/{ns}").exists() or sleeper.poll() is None):
        time.sleep(0.1)
    assert sleeper.poll() == -signal.SIGKILL
    assert not Path(f"/run/netns/{ns}").exists()
    assert not Path(f"/sys/class/net/{veth}").exists() and not Path(f"/sys/class/net/{veth}p").exists()
    assert not list(RUN_DIR.glob(f"{run_id}.*"))


def test_stop_undoes_what_the_agent_recorded(tmp_path, no_leftovers):
    a, run_id = agent(tmp_path)
    ns, sleeper, veth = give_it_things(a, run_id)
    record = json.loads((RUN_DIR / f"{run_id}.json").read_text())
    assert record["owner_pid"] == a.proc.pid and record["netns"] == [ns] and record["interfaces"] == [veth]
    removed = a.stop()
    assert f"netns {ns}" in removed and f"interface {veth}" in removed and len(removed) == 3, removed
    gone(ns, sleeper, veth, run_id)


def test_a_master_that_vanishes_leaves_nothing(tmp_path, no_leftovers):
    """The master's end of the pipe closes without `stop` (SIGKILL of the master, a lost SSH connection)."""
    a, run_id = agent(tmp_path)
    ns, sleeper, veth = give_it_things(a, run_id)
    a.proc.stdin.close()
    a.proc.wait(30)
    gone(ns, sleeper, veth, run_id)


def test_a_killed_agent_is_finished_by_hpnlab_clean(tmp_path, no_leftovers):
    a, run_id = agent(tmp_path)
    ns, sleeper, veth = give_it_things(a, run_id)
    os.kill(a.proc.pid, signal.SIGKILL)
    a.proc.wait(10)
    assert Path(f"/run/netns/{ns}").exists() and sleeper.poll() is None  # nobody undid anything yet
    r = subprocess.run([HPNLAB, "clean"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"netns {ns}" in r.stdout
    gone(ns, sleeper, veth, run_id)
