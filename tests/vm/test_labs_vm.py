"""Labs 1 and 3 inside the class VM, as a student types them (the runs of lab 3 are checked on the host tier:
under TCG emulation a shaped 8-host run is CPU-bound)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

HPNLAB = str(Path(sys.executable).parent / "hpnlab")


def run(cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([HPNLAB, *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=900)


def test_lab1_in_the_vm(tmp_path):
    # one HPN up for both steps (each `up` is about two minutes under TCG): Mininet's pingall, then the paths
    r = run(tmp_path, "lab", "start", "1", stdin="pingall\npaths h0 h7\nexit\n")
    assert r.returncode == 0 and "Results: 0% dropped" in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]
    [hpn] = [int(n) for n in re.findall(r"(\d+) path\(s\) h0 -> h7", r.stdout)]
    for name in ("hpn", "dcn_plus"):
        assert run(tmp_path, "topo", "show", name, "--png", f"lab-work/{name}.png").returncode == 0
    r = run(tmp_path, "up", "dcn_plus", "--routing", "controller", stdin="paths h0 h7\nexit\n")
    [dcn] = [int(n) for n in re.findall(r"(\d+) path\(s\) h0 -> h7", r.stdout)]
    answers = tmp_path / "lab-work" / "lab1.yaml"
    answers.write_text(answers.read_text().replace("hpn_paths:", f"hpn_paths: {hpn}")
                       .replace("dcn_plus_paths:", f"dcn_plus_paths: {dcn}"))
    r = run(tmp_path, "lab", "check", "1")
    print(f"\nlab 1 in the VM: paths h0 -> h7 HPN {hpn}, DCN+ {dcn}; {r.stdout.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stdout


def test_lab3_cli_steps_in_the_vm(tmp_path):
    steps = "paths h5 h0\nfail h5:nic0:p0\npaths h5 h0\nh5 ping -c 3 -W 2 10.0.0.1\nrestore h5:nic0:p0\nexit\n"
    r = run(tmp_path, "lab", "start", "3", stdin=steps)
    before, after = (int(n) for n in re.findall(r"(\d+) path\(s\) h5 -> h0", r.stdout))
    assert (before, after) == (8, 4)
    assert "3 received" in r.stdout + r.stderr  # h5 still reaches h0 over its NIC's other port (Mininet logs to stderr)
    answers = tmp_path / "lab-work" / "lab3.yaml"
    answers.write_text(answers.read_text().replace("paths_before:", f"paths_before: {before}")
                       .replace("paths_after:", f"paths_after: {after}"))
    r = run(tmp_path, "lab", "check", "3")
    print(f"\nlab 3 in the VM: paths h5 -> h0 {before} -> {after} after the failure; "
          f"{r.stdout.strip().splitlines()[-1]}")
    assert "PASS answer 'paths_before'" in r.stdout and "PASS answer 'paths_after'" in r.stdout
    assert "FAIL a run of dual_tor_failover" in r.stdout  # the run is the host tier's part
