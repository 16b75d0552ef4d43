"""Labs 2-7 end to end on the real emulation, one test per lab (slow tier): do the lab's runs and CLI session,
answer from what they show, and the checker passes. The checkers' failures and hints are tested against
recorded runs in tests/unit/test_recorded_runs.py; `lab start 4`'s CLI is in the fast tier."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from testbed.experiment.fidelity import STEAL_MAX
from testbed.labs.registry import LABS, prepare
from tests.labwork import (
    HPNLAB,
    answer,
    by_variant,
    check,
    copy_run,
    lab2_answers,
    lab3_halted,
    lab4_answers,
    lab6_answers,
    lab7_answers,
)


def student_copy(tmp_path: Path, quick_results, stem: str) -> dict:
    """The student's own run of the lab's experiment, in their results folder; its results.json."""
    r, cwd = quick_results(stem)
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = [p for p in (cwd / "results").iterdir() if f"-{stem}-quick-" in p.name]
    return copy_run(run, tmp_path)


@pytest.mark.slow
def test_lab2_steps_pass(tmp_path, quick_results, no_leftovers):
    work = tmp_path / "lab-work"
    prepare(LABS[2], work)
    runs = [student_copy(tmp_path, quick_results, stem) for stem in ("precise_vs_ecmp", "hash_polarization")]
    a = lab2_answers(*runs)
    assert a["polarized_links"] == 8 < a["seeded_links"]  # one seed idles half the links, as the guide says
    answer(work, 2, **a)
    r = check(tmp_path, 2)
    assert r.returncode == 0, r.stdout
    assert "7 of 7 checks passed" in r.stdout
    # the routing figure itself: only when the hypervisor left the CPU to the runs compared (outside the testbed;
    # the run's own verdict measures it)
    v = by_variant(runs[0])
    stolen = {k: max(r["fidelity"]["steal_mean"] or 0.0 for r in v[k]) for k in ("hpn-precise", "hpn-ecmp")}
    if max(stolen.values()) > STEAL_MAX:
        pytest.skip(f"the hypervisor took the CPU during the runs compared (steal {stolen}); busbw "
                    f"{a['precise_fraction']:.0%} precise vs {a['ecmp_fraction']:.0%} ECMP is not a routing figure")
    assert a["faster"] == "precise"  # what the student should see (89% vs 47% unthrottled)


def _lab3_cli(tmp_path: Path) -> list[int]:
    """The lab's CLI steps, typed into `hpnlab lab start 3`: the path counts it printed."""
    steps = "paths h5 h0\nfail h5:nic0:p0\npaths h5 h0\nrestore h5:nic0:p0\nexit\n"
    r = subprocess.run([HPNLAB, "lab", "start", "3"], cwd=tmp_path, input=steps, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return [int(n) for n in re.findall(r"(\d+) path\(s\) h5 -> h0", r.stdout)]


@pytest.mark.slow
def test_lab3_steps_pass(tmp_path, quick_results, no_leftovers):
    before, after = _lab3_cli(tmp_path)  # lab start also made lab-work/
    assert (before, after) == (8, 4)  # two planes, then only plane 1 for h5's NIC 0
    halted = lab3_halted(student_copy(tmp_path, quick_results, "dual_tor_failover"))
    assert halted == {"dual_tor_halted": "no", "single_tor_halted": "yes"}
    answer(tmp_path / "lab-work", 3, paths_before=before, paths_after=after, **halted)
    r = check(tmp_path, 3)
    assert r.returncode == 0, r.stdout
    assert "4 of 4 checks passed" in r.stdout


@pytest.mark.slow
def test_lab4_steps_pass(tmp_path, quick_results, no_leftovers):
    work = tmp_path / "lab-work"
    prepare(LABS[4], work)
    run = student_copy(tmp_path, quick_results, "pfc_incast")
    storm = student_copy(tmp_path, quick_results, "pfc_storm")
    dead = student_copy(tmp_path, quick_results, "pfc_deadlock")
    a = lab4_answers(run, storm, dead)
    assert a["drops_pfc_off"] > 0 and a["pause_events_pfc_on"] > 0
    assert a["watchdog_storms"] >= 1 and a["watchdog_drops"] > 0, a
    answer(work, 4, **a)
    r = check(tmp_path, 4)
    lost = [r["fidelity"] for r in by_variant(run)["pfc-on"] if r["drops"]["lossless"]]
    if lost:
        # The hypervisor took the CPU (16% steal in a CI rehearsal: the PFC reaction's p99 went from ~1 to 8.6 ms,
        # past the 3 ms the headroom covers, and 2 frames of 472 pauses were lost). Then the run's verdict and the
        # checker must say so, and every other check still pass; lost frames without the steal are a defect.
        assert all(f["steal_mean"] > STEAL_MAX and f["status"] == "not faithful" for f in lost), lost
        assert r.returncode == 1 and "11 of 12 checks passed" in r.stdout, r.stdout
        assert "FAIL PFC on kept the lossless class lossless: the pfc-on variant dropped packets: was the run " \
               "CPU-bound? see its fidelity line" in r.stdout, r.stdout
        return
    assert r.returncode == 0, r.stdout
    assert "12 of 12 checks passed" in r.stdout


def test_lab4_cli_shows_queues_and_flows_of_a_switch(tmp_path, no_leftovers):
    """`hpnlab lab start 4` shapes the links: `queues t0` lists that ToR's classes, `flows t0` its rules."""
    r = subprocess.run([HPNLAB, "lab", "start", "4"], cwd=tmp_path, input="queues t0\nflows t0\nflows h0\nexit\n",
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line for line in r.stdout.splitlines() if "tor-p0-s0-r0-a:" in line]
    assert {c for c in ("high", "lossless", "default") if any(c in line for line in rows)} == \
        {"high", "lossless", "default"}
    assert "type=select" in r.stdout and "nw_dst=10.0.0.1" in r.stdout  # the ToR's ECMP group and host rules
    assert "no such switch: 'h0'" in r.stdout


@pytest.mark.slow
def test_lab6_steps_pass(tmp_path, quick_results, no_leftovers):
    work = tmp_path / "lab-work"
    prepare(LABS[6], work)
    answer(work, 6, **lab6_answers(*(student_copy(tmp_path, quick_results, stem)
                                     for stem in ("crux_multi_job", "placement"))))
    r = check(tmp_path, 6)
    # the quick runs are two iterations a job: utilization may not rise in one of them; the rest must pass
    assert r.returncode == 0 or "FAIL Crux priorities and paths raised" in r.stdout, r.stdout
    assert "PASS answer 'util_crux_paths'" in r.stdout and "PASS answer 'crossing_ratio'" in r.stdout, r.stdout
    assert "PASS Crux put the most GPU-intensive job (A) first" in r.stdout


@pytest.mark.slow
def test_lab7_steps_pass(tmp_path, quick_results, no_leftovers):
    """The campaign and gray-failure runs read as the guide says; the CLI step (a lossy link by hand, iperf3
    over it, `gray`, `restore`) prints what the guide promises."""
    steps = ("h0 iperf3 -s -D\nfail h5:nic0:p1\nlossy h5:nic0:p0 0.01\nh5 iperf3 -c 10.0.0.1 -t 4\ngray\n"
             "restore h5:nic0:p0\ngray\nexit\n")
    r = subprocess.run([HPNLAB, "lab", "start", "7"], cwd=tmp_path, input=steps, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "h5:nic0:p0 loses 0.01 of its frames each way" in r.stdout, r.stdout[-3000:]
    m = re.search(r"h5:nic0:p0: a->b lost ([\d,]+) of ([\d,]+); b->a lost ([\d,]+) of ([\d,]+)", r.stdout)
    assert m, r.stdout[-3000:]
    lost, n = (sum(int(m[i].replace(",", "")) for i in idx) for idx in ((1, 3), (2, 4)))
    assert n > 1000 and abs(lost - 0.01 * n) < 5 * (0.01 * n) ** 0.5, (lost, n)  # iperf3's frames, 1% of them
    assert "Retr" in r.stderr and "no gray link" in r.stdout  # iperf3 reported (Mininet's output); restore ended it
    a = lab7_answers(*(student_copy(tmp_path, quick_results, stem) for stem in ("failure_campaign", "gray_failures")))
    assert a["dual_tor_restarts"] == 0 < a["single_tor_restarts"] and a["lossy_link"] == "h1:nic0:p0"
    answer(tmp_path / "lab-work", 7, **a)
    r = check(tmp_path, 7)
    assert r.returncode == 0, r.stdout
    assert "8 of 8 checks passed" in r.stdout
