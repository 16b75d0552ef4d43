"""The CLI as a user runs it (a subprocess), for the commands that need no root."""

from __future__ import annotations

import json

import pytest


def test_topo_show_paper_prints_the_papers_figures(hpnlab, tmp_path):
    png = tmp_path / "paper.png"
    r = hpnlab("topo", "show", "hpn", "--preset", "paper", "--png", str(png))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for row, value in (("GPUs per segment", "1,024"), ("GPUs per pod", "15,360"), ("ToRs", "240"),
                       ("aggregation switches", "120"), ("ToR oversubscription", "1.067:1")):
        line = next(l for l in out.splitlines() if row in l)
        assert value in line, line
    assert png.stat().st_size > 20_000


def test_topo_export_json_and_graphml(hpnlab, tmp_path):
    r = hpnlab("topo", "export", "fat_tree", "k=4", "-o", str(tmp_path / "t.json"))
    assert r.returncode == 0, r.stderr
    d = json.loads((tmp_path / "t.json").read_text())
    assert len([n for n in d["nodes"] if n["role"] == "host"]) == 16
    r = hpnlab("topo", "export", "hpn", "--format", "graphml")
    assert r.returncode == 0 and r.stdout.count("<edge ") == 64
    r = hpnlab("topo", "export", "hpn", "--format", "simai", "-o", str(tmp_path / "hpn.topo"))
    assert r.returncode == 0, r.stderr
    lines = (tmp_path / "hpn.topo").read_text().splitlines()  # 16 GPUs, 8 NVSwitches, 16 switches; 80 links
    assert lines[0] == "40 2 8 16 80 H100" and len(lines) == 2 + 80
    r = hpnlab("topo", "export", "hpn", "gpus_per_host=4", "--format", "simai")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "gpus_per_host" in r.stderr


@pytest.mark.parametrize("args,field", [
    (["topo", "show", "nope"], "topology="),
    (["topo", "show", "hpn", "pods=-2"], "pods="),
    (["topo", "show", "hpn", "hosts_per_segment=400"], "tor_capacity_gbps="),
    (["topo", "show", "hpn", "rails"], "param="),
    (["topo", "show", "hpn", "--preset", "giant"], "preset="),
])
def test_bad_input_one_line_exit_2(hpnlab, args, field):
    r = hpnlab(*args, "--no-png")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hpnlab: error: {field}") and "fix:" in lines[0]


def test_calibrate_refuses_a_probe_size_it_cannot_build(hpnlab):
    r = hpnlab("calibrate", "--hosts", "12")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("hpnlab: error: hosts=12") \
        and "--hosts 8, 16" in lines[0]


@pytest.mark.parametrize("text,field", [
    ("name: t\nworkload: {collective: {op: allsmash}}\n", "workload.collective.op="),
    ("name: t\nworkload: {collective: {size: 1.2.3GB}}\n", "workload.collective.size="),
    ("name: t\nworkload: {collective: {ranks: 'h99:0,h0:0'}}\n", "workload.collective.ranks="),
    ("name: t\nworkload: {collective: {iters: 100000000000}}\n", "workload.collective.iters="),
    ("name: t\nhorizon_s: .inf\nworkload: {collective: {}}\n", "horizon_s="),
    ("name: ../../x\nworkload: {collective: {}}\n", "name="),
    ("name: t\nworkload: {simai: /etc/shadow}\n", "workload.simai="),
    ("name: t\ntopology: {params: {rails: 300}}\nworkload: {collective: {}}\n", "rails="),
    ("name: t\ntopology: {params: {pods: 100000}}\nworkload: {collective: {}}\n", "pods="),
])
def test_validate_refuses_in_one_line_what_run_would(hpnlab, tmp_path, text, field):
    f = tmp_path / "e.yaml"
    f.write_text(text)
    r = hpnlab("validate", str(f))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_validate_prints_what_would_run(hpnlab):
    r = hpnlab("validate", "experiments/link_flapping.yaml")
    assert r.returncode == 0, r.stderr
    assert "failure event(s)" in r.stdout and "valid" in r.stdout


_SWALLOWED_CTRL_C = """
import importlib, sys, time
import click
m = importlib.import_module("testbed.cli.main")  # the package re-exports main(), the function

class Dies:
    def __del__(self):
        raise KeyboardInterrupt  # what a SIGINT that lands inside a __del__ or weakref callback does

@click.command()
@click.option("--until-end", is_flag=True)
def work(until_end):
    Dies()
    t = time.monotonic()
    while time.monotonic() - t < (0.0 if until_end else 2.0):
        pass
    print("ran to the end")

m.cli.add_command(work)
sys.argv = ["hpnlab", "work"] + sys.argv[1:]
m.main()
"""


@pytest.mark.parametrize("until_end", [False, True])
def test_a_ctrl_c_swallowed_by_a_del_still_stops_the_command_and_exits_130(tmp_path, until_end, as_from_a_terminal):
    """CI (`up` interrupted at 2.44 s): the KeyboardInterrupt a __del__ swallowed was raised again inside the
    unraisable hook itself, swallowed there too, and the command exited 0. It must stop the work (delivered again
    once the hook has returned) or, if the work ends first, still make the exit 130."""
    import subprocess
    import sys

    script = tmp_path / "swallow.py"
    script.write_text(_SWALLOWED_CTRL_C)
    r = subprocess.run([sys.executable, str(script)] + (["--until-end"] if until_end else []),
                       capture_output=True, text=True, timeout=60, preexec_fn=as_from_a_terminal)
    assert r.returncode == 130, (r.returncode, r.stdout, r.stderr[-2000:])
    assert until_end or "ran to the end" not in r.stdout
    assert "Exception ignored" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]
