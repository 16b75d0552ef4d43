"""The server agent (testbed.cluster.agent) that owns a cluster run's changes on each server, run here as a
local process: what it records it undoes, on `stop`, when the master's end of the pipe closes without a word
(a crashed master), and through `hpnlab clean` when the agent itself is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
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
    assert Path(path).parent.name == f"hpnlab-{run_id}" and Path(path).read_text() == "echo hi\n"
    return ns, sleeper, veth


def gone(ns: str, sleeper: subprocess.Popen, veth: str, run_id: str, within_s: float = 10) -> None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and (Path(f"/run/netns/{ns}").exists() or sleeper.poll() is None):
        time.sleep(0.1)
    assert sleeper.poll() == -signal.SIGKILL
    assert not Path(f"/run/netns/{ns}").exists()
    assert not Path(f"/sys/class/net/{veth}").exists() and not Path(f"/sys/class/net/{veth}p").exists()
    assert not list(RUN_DIR.glob(f"{run_id}.*"))
    assert not list(Path(tempfile.gettempdir()).glob(f"hpnlab-{run_id}*"))  # its scratch folder


def test_stop_undoes_what_the_agent_recorded(tmp_path, no_leftovers):
    a, run_id = agent(tmp_path)
    ns, sleeper, veth = give_it_things(a, run_id)
    record = json.loads((RUN_DIR / f"{run_id}.json").read_text())
    assert record["owner_pid"] == a.proc.pid and record["netns"] == [ns] and record["interfaces"] == [veth]
    removed = a.stop()
    assert f"netns {ns}" in removed and f"interface {veth}" in removed and len(removed) == 4, removed
    assert f"folder {Path(tempfile.gettempdir()) / f'hpnlab-{run_id}'}" in removed
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


BLAST = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
end, n = time.monotonic() + float(sys.argv[1]), 0
while time.monotonic() < end:
    n += s.sendto(b"x" * 1400, ("10.250.0.2", 9))
print(n)
"""


def test_the_agent_shapes_its_share_of_the_ports_and_reads_their_counters(tmp_path, no_leftovers):
    """What a server does with its ports under `--qos` over several servers: HTB at the planned rate, read back
    by port key through the agent, removed on `unshape`, and gone with the record in any case."""
    from testbed.qos.ports import Port, ports_to_json
    from testbed.qos.shaper import ROOT
    from testbed.qos.spec import QosSpec, port_plan

    a, run_id = agent(tmp_path)
    ns = [f"hpnlab-{run_id}-{x}" for x in "ab"]
    spec = QosSpec(scale=20_000, pfc={"enabled": False, "poll_ms": 5})
    plan = port_plan(200, spec)
    ports = [Port("h0", 0, "host", "tor", 1, "va", "vb", f"/run/netns/{ns[0]}", plan),
             Port("tor", 1, "tor", "h0", 0, "vb", "va", f"/run/netns/{ns[1]}", plan)]
    try:
        a.intend("netns", ns)
        for n in ns:
            subprocess.run(["ip", "netns", "add", n], check=True)
        subprocess.run(["ip", "-n", ns[0], "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns",
                        ns[1]], check=True)
        for n, dev, ip in ((ns[0], "va", "10.250.0.1/24"), (ns[1], "vb", "10.250.0.2/24")):
            subprocess.run(["ip", "-n", n, "addr", "add", ip, "dev", dev], check=True)
            subprocess.run(["ip", "-n", n, "link", "set", dev, "up"], check=True)
        assert a.shape(spec.model_dump(mode="json"), ports_to_json(ports)) == 2
        seconds = 3.0
        sent = int(subprocess.run(["ip", "netns", "exec", ns[0], sys.executable, "-c", BLAST, str(seconds)],
                                  capture_output=True, text=True, check=True).stdout)
        stats = a.qos_stats(ROOT, ["h0:0"])
        assert list(stats) == ["h0:0"] and len(stats["h0:0"]) == 1
        root = stats["h0:0"][0]
        rate = root["bytes"] * 8 / seconds
        print(f"offered {sent * 8 / seconds / 1e6:.1f} Mbit/s, HTB sent {rate / 1e6:.2f} Mbit/s "
              f"of {plan.rate_bps / 1e6:.0f}, dropped {root['drops']}")
        assert root["kind"] == "htb" and sent > 4 * root["bytes"] and root["drops"] > 0
        assert 0.85 * plan.rate_bps <= rate <= 1.15 * plan.rate_bps
        assert a.qos_stats(ROOT, ["tor:1"])["tor:1"][0]["bytes"] < 10_000  # the other direction carried ARP only
        assert a.unshape() == 2
        out = subprocess.run(["ip", "-n", ns[0], "-o", "qdisc", "show", "dev", "va"], capture_output=True, text=True)
        assert "htb" not in out.stdout
    finally:
        removed = a.stop()
    assert all(f"netns {n}" in removed for n in ns), removed


def test_what_runs_in_a_recorded_hosts_namespace_goes_with_it(tmp_path, no_leftovers):
    """A process started in a remote host over SSH is known here only by our ssh client's pid; the server's
    agent finds it by the namespace the host's recorded shell made, and nothing outside that namespace."""
    a, run_id = agent(tmp_path)
    shell = subprocess.Popen(["unshare", "--net", "sleep", "600"])  # a host's shell: its own namespace
    outsider = subprocess.Popen(["sleep", "600"])  # root namespace, not the run's
    try:
        deadline = time.monotonic() + 5
        while os.stat(f"/proc/{shell.pid}/ns/net").st_ino == os.stat("/proc/self/ns/net").st_ino:
            assert time.monotonic() < deadline, "unshare never entered its namespace"
            time.sleep(0.01)
        a.process(shell.pid, "mininet host h9", netns=True)
        inside = subprocess.Popen(["nsenter", f"--net=/proc/{shell.pid}/ns/net", "sleep", "600"])
        time.sleep(0.2)
        removed = a.stop()
        assert f"process {shell.pid} (mininet host h9)" in removed, removed
        assert f"process {inside.pid} (in the namespace of mininet host h9)" in removed, removed
        assert inside.wait(5) == -signal.SIGKILL and shell.wait(5) == -signal.SIGKILL
        assert outsider.poll() is None and len(removed) == 3  # and the scratch folder
    finally:
        for p in (shell, outsider):
            if p.poll() is None:
                p.kill()
                p.wait()
