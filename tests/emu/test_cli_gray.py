"""The lab CLI's gray-failure commands (lab 7): `lossy`, `degrade`, `gray`, and `restore` ending them, on a
real shaped network; bad input is a one-line error naming the field, and the network is left as it was."""

from __future__ import annotations

import io
import math
import os
import re
import subprocess

from testbed.cli import shell  # the module: pytest would take a class named Test* for a test
from testbed.experiment.measure import StreamSpec, run_streams
from testbed.net.network import Network
from testbed.qos.spec import QosSpec
from topos import build

LOSS, FRAMES = 0.2, 1000


def cli(net: Network, tmp_path, *lines: str) -> str:
    """What the CLI printed for a script of commands (Mininet's batch mode: `source`)."""
    script = tmp_path / "script"
    script.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    with open(os.devnull) as stdin:
        shell.TestbedCLI(net, stdin=stdin, stdout=out, script=str(script))
    return out.getvalue()


def filters(dev: str) -> str:
    return subprocess.run(["tc", "filter", "show", "dev", dev, "egress"], capture_output=True, text=True).stdout


def test_lossy_and_degraded_links_from_the_cli(tmp_path, no_leftovers):
    topo = build("hpn", hosts_per_segment=2)
    lossy, slow = topo.find_link("h1:nic0:p0"), topo.find_link("h3:nic0:p0")
    with Network(topo, qos=QosSpec(pfc={"enabled": False})) as net:
        out = cli(net, tmp_path, "gray", "fail h1:nic0:p1", f"lossy {lossy.name} {LOSS}", f"degrade {slow.name} 50",
                  "lossy h1:nic0:p0 2", "degrade h3:nic0:p0 400", "lossy no-such-link 0.1", "lossy h1:nic0:p0 x",
                  "lossy h1:nic0:p0")
        said = out.splitlines()
        assert said[0].startswith("no gray link"), out
        assert f"{lossy.name} loses 0.2 of its frames each way" in out and f"{slow.name} runs at 50 of its" in out
        assert "P=2.0: a share of the frames; fix: e.g. 0.001" in out, out
        assert "GBPS=400.0: the link runs at 200 Gbit/s: a degraded one is slower; fix: e.g. 50" in out, out
        assert "no-such-link" in out and "P='x': not a number" in out and "usage: lossy LINK P" in out, out
        assert "lose_ba" in filters(net.intf_name(lossy.b, lossy.b_port))  # the ToR end's egress: b to a
        run_streams(net, [StreamSpec(src="h1", dst="h3", sport=6001, dport=7001, pps=FRAMES, duration=1.0,
                                     size=200)], tail=0.5)
        out = cli(net, tmp_path, "gray", f"restore {lossy.name}", f"restore {slow.name}", "gray")
        m = re.search(rf"{re.escape(lossy.name)}: a->b lost ([\d,]+) of ([\d,]+)", out)
        assert m, out
        lost, n = (int(g.replace(",", "")) for g in m.groups())
        assert n >= 0.9 * FRAMES and abs(lost - n * LOSS) < 5 * math.sqrt(n * LOSS * (1 - LOSS)), (lost, n)
        assert f"{slow.name}: runs at 25% of its rate" in out, out
        assert out.rstrip().splitlines()[-1].startswith("no gray link"), out  # both restored
        assert net.gray_counters() == {} and "lose_" not in filters(net.intf_name(lossy.b, lossy.b_port))


def test_gray_commands_need_shaped_links(tmp_path, no_leftovers):
    with Network(build("hpn", hosts_per_segment=2)) as net:
        out = cli(net, tmp_path, "lossy h1:nic0:p0 0.1", "degrade h1:nic0:p0 50")
    assert out.count("no shaped links on this network: start it with --qos") == 2, out


def test_a_degraded_link_under_pfc_runs_slower_and_its_pauses_leave_it_so(tmp_path, no_leftovers):
    """The lab's network runs PFC. A degraded port keeps its lower rate through pauses and resumes (a pause
    changes the lossless queue's gate, never the port's classes: shaper.py), and `restore` gives the rate back."""
    from testbed.qos.shaper import ROOT
    from testbed.qos.spec import PARENT_MINOR

    def link_rate(net: Network, key: str) -> int:
        p = net.qos.ports[key]
        classes = net.qos._ipr(p.netns).get_classes(index=p.ifindex)
        (parent,) = [c for c in classes if c["handle"] == ROOT | PARENT_MINOR]
        return parent.get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")["rate"] * 8

    with Network(build("hpn", hosts_per_segment=2), qos=QosSpec()) as net:
        full = net.qos.ports["h1:0"].plan.rate_bps
        out = cli(net, tmp_path, "degrade h1:nic0:p0 50", "gray")
        assert "h1:nic0:p0 runs at 50 of its 200 Gbit/s" in out and "runs at 25% of its rate" in out, out
        for paused in (True, False):
            net.qos.set_paused("h1:0", 3, paused)
        assert link_rate(net, "h1:0") == full // 4
        out = cli(net, tmp_path, "restore h1:nic0:p0", "gray")
        assert out.rstrip().splitlines()[-1].startswith("no gray link"), out
        assert link_rate(net, "h1:0") == full
