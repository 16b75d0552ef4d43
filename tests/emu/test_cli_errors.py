"""Bad input to `hpnlab up`: one line, exit code 2, nothing on the machine changed."""

from __future__ import annotations

import pytest


def assert_one_line_error(r, field: str):
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"hpnlab: error: {field}") and "fix:" in lines[0]


@pytest.mark.parametrize("args,field", [
    (["nope"], "topology="),
    (["hpn", "hosts_per_segment=-3"], "hosts_per_segment="),
    (["hpn", "hosts_per_segment=300"], "tor_capacity_gbps="),
    (["hpn", "--fail", "h99:nic0:p0"], "link="),
])
def test_bad_topology_input(hpnlab, no_leftovers, args, field):
    assert_one_line_error(hpnlab("up", *args, "--no-cli"), field)


def test_missing_netem_for_delay(hpnlab, no_leftovers):
    from testbed.system.capabilities import probe

    if probe().qdiscs.get("netem"):
        pytest.skip("this kernel has netem")
    r = hpnlab("up", "hpn", "--no-cli", "--delay-ms", "5")
    assert_one_line_error(r, "qdisc='netem'")
    assert "VM" in r.stderr


def test_not_root(hpnlab, no_leftovers):
    assert_one_line_error(hpnlab("up", "hpn", "--no-cli", user="65534"), "user=")


def test_ovs_not_running(hpnlab, no_leftovers, tmp_path):
    r = hpnlab("up", "hpn", "--no-cli", env={"HPNLAB_OVS_DB": f"unix:{tmp_path}/no-such-db.sock"})
    assert_one_line_error(r, "ovs=")


@pytest.mark.parametrize("name", ["t1", "t1-eth3"])
def test_an_interface_named_like_ours_is_refused(hpnlab, no_leftovers, name):
    """A tap named like a switch (what a deleted userspace bridge leaves until OVS removes it: a new bridge of
    that name then lost 22 of 112 pings in CI) or a switch port's name: refused before anything is made."""
    import subprocess

    subprocess.run(["ip", "tuntap", "add", "dev", name, "mode", "tap"], check=True)
    try:
        assert_one_line_error(hpnlab("up", "hpn", "--no-cli"), f"interface='{name}'")
    finally:
        subprocess.run(["ip", "link", "del", name], check=True)


def test_a_link_planted_at_the_controllers_log_is_refused_and_its_target_untouched(no_leftovers, tmp_path):
    """`ln -s VICTIM results/logs/controller.log`, then `hpnlab up` as root: the victim was truncated and filled
    with the controller's log. Now the run stops with one line and undoes what it made."""
    import subprocess
    import sys
    from pathlib import Path

    victim = tmp_path / "victim"
    victim.write_text("the victim's own content\n")
    (tmp_path / "results" / "logs").mkdir(parents=True)
    (tmp_path / "results" / "logs" / "controller.log").symlink_to(victim)
    r = subprocess.run([str(Path(sys.executable).parent / "hpnlab"), "up", "hpn", "--routing", "controller",
                        "--no-cli"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert_one_line_error(r, "controller log=")
    assert "symbolic link" in r.stderr
    assert victim.read_text() == "the victim's own content\n"
