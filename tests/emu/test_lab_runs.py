"""Labs 2-4 on the real emulation: do each lab's steps (its runs, its CLI session) and the checker passes;
skip a step and it fails with the specific message."""

from __future__ import annotations

import json
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.experiment.fidelity import STEAL_MAX
from testbed.labs.registry import LABS, prepare
from testbed.net.balance import links_used

HPNLAB = str(Path(sys.executable).parent / "hpnlab")


def check(cwd: Path, n: int) -> subprocess.CompletedProcess:
    return subprocess.run([HPNLAB, "lab", "check", str(n)], cwd=cwd, capture_output=True, text=True, timeout=120)


def answer(work: Path, n: int, **values) -> None:
    path = work / f"lab{n}.yaml"
    text = path.read_text()
    for k, v in values.items():
        text = text.replace(f"\n{k}:\n", f"\n{k}: {v}\n")
    path.write_text(text)


def student_copy(tmp_path: Path, quick_results, stem: str) -> dict:
    """The student's own run of the lab's experiment, in their results folder; its results.json."""
    r, cwd = quick_results(stem)
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = [p for p in (cwd / "results").iterdir() if f"-{stem}-quick-" in p.name]
    shutil.copytree(run, tmp_path / "results" / run.name)
    return json.loads((run / "results.json").read_text())


def by_variant(data: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in data["runs"]:
        out.setdefault(r["variant"], []).append(r)
    return out


@pytest.mark.slow
def test_lab2_steps_pass(tmp_path, quick_results, no_leftovers):
    work = tmp_path / "lab-work"
    prepare(LABS[2], work)
    v = by_variant(student_copy(tmp_path, quick_results, "precise_vs_ecmp"))
    frac = {k: statistics.mean(o["fraction_of_ideal"] for r in rs for o in r["ops"]) for k, rs in v.items()}
    pol = by_variant(student_copy(tmp_path, quick_results, "hash_polarization"))
    used = {k: links_used(rs[0])[0] for k, rs in pol.items()}
    assert used["single-plane"] == 8 < used["single-plane-seeded"]  # one seed idles half the links, as the guide says
    faster = "precise" if frac["hpn-precise"] > frac["hpn-ecmp"] else "ecmp"  # what this run shows, checked by lab
    answer(work, 2, ecmp_fraction=round(frac["hpn-ecmp"], 2), precise_fraction=round(frac["hpn-precise"], 2),
           faster=faster, polarized_links=used["single-plane"], seeded_links=used["single-plane-seeded"])
    r = check(tmp_path, 2)
    assert r.returncode == 0, r.stdout
    assert "7 of 7 checks passed" in r.stdout
    # the routing figure itself: only when the hypervisor left the CPU to the runs compared (outside the testbed;
    # the run's own verdict measures it)
    stolen = {k: max(r["fidelity"]["steal_mean"] or 0.0 for r in v[k]) for k in ("hpn-precise", "hpn-ecmp")}
    if max(stolen.values()) > STEAL_MAX:
        pytest.skip(f"the hypervisor took the CPU during the runs compared (steal {stolen}); busbw "
                    f"{frac['hpn-precise']:.0%} precise vs {frac['hpn-ecmp']:.0%} ECMP is not a routing figure")
    assert faster == "precise"  # what the student should see (89% vs 47% unthrottled)


def test_lab2_without_the_run_says_to_run_it(tmp_path):
    prepare(LABS[2], tmp_path / "lab-work")
    r = check(tmp_path, 2)
    assert r.returncode == 1
    assert "FAIL a run of precise_vs_ecmp: run it first: hpnlab run experiments/precise_vs_ecmp.yaml --quick" \
        in r.stdout


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
    v = by_variant(student_copy(tmp_path, quick_results, "dual_tor_failover"))
    halted = {k: any(r["halted"] for r in rs) for k, rs in v.items()}
    assert halted == {"dual-tor-hpn": False, "single-tor-rail": True}
    answer(tmp_path / "lab-work", 3, paths_before=before, paths_after=after, dual_tor_halted="no",
           single_tor_halted="yes")
    r = check(tmp_path, 3)
    assert r.returncode == 0, r.stdout
    assert "4 of 4 checks passed" in r.stdout


@pytest.mark.slow
def test_lab3_without_failing_the_link_fails_on_paths_after(tmp_path, quick_results):
    prepare(LABS[3], tmp_path / "lab-work")
    student_copy(tmp_path, quick_results, "dual_tor_failover")
    # the student skipped 'fail h5:nic0:p0' and counted the same paths twice
    answer(tmp_path / "lab-work", 3, paths_before=8, paths_after=8, dual_tor_halted="no", single_tor_halted="yes")
    r = check(tmp_path, 3)
    assert r.returncode == 1
    assert "FAIL answer 'paths_after': '8' is not what the network shows; type 'fail h5:nic0:p0'" in r.stdout
    assert "3 of 4 checks passed" in r.stdout


@pytest.mark.slow
def test_lab4_steps_pass(tmp_path, quick_results, no_leftovers):
    work = tmp_path / "lab-work"
    prepare(LABS[4], work)
    v = by_variant(student_copy(tmp_path, quick_results, "pfc_incast"))
    drops_off = sum(r["drops"]["lossless"] for r in v["pfc-off"])
    pauses = sum(t["pause_events"] for r in v["pfc-on"] for t in r["pfc"]["pauses_by_tier"].values())
    assert drops_off > 0 and pauses > 0 and sum(r["drops"]["lossless"] for r in v["pfc-on"]) == 0
    answer(work, 4, drops_pfc_off=drops_off, pause_events_pfc_on=pauses)
    r = check(tmp_path, 4)
    assert r.returncode == 0, r.stdout
    assert "4 of 4 checks passed" in r.stdout


@pytest.mark.slow
def test_lab4_without_reading_the_counters_names_the_missing_answer(tmp_path, quick_results):
    prepare(LABS[4], tmp_path / "lab-work")
    student_copy(tmp_path, quick_results, "pfc_incast")
    r = check(tmp_path, 4)
    assert r.returncode == 1
    assert "FAIL answer 'drops_pfc_off': fill in 'drops_pfc_off' in your answers file" in r.stdout
    assert "2 of 4 checks passed" in r.stdout


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
    from testbed.net.balance import cross_segment_bytes
    from traffic.metrics import cluster_utilization

    work = tmp_path / "lab-work"
    prepare(LABS[6], work)
    crux = by_variant(student_copy(tmp_path, quick_results, "crux_multi_job"))
    place = by_variant(student_copy(tmp_path, quick_results, "placement"))

    def util(runs):
        return cluster_utilization([i for r in runs for i in r["iterations"]],
                                   {j: d["gpus"] for r in runs for j, d in r["jobs"].items()})[0]

    ratio = cross_segment_bytes(place["compact"][0]) / cross_segment_bytes(place["scattered"][0])
    answer(work, 6, first_job=crux["crux-priorities"][0]["crux"]["order"][0],
           util_one_class=round(util(crux["ecmp-one-class"]), 3),
           util_crux_paths=round(util(crux["crux-priorities-paths"]), 3), crossing_ratio=round(ratio, 3))
    r = check(tmp_path, 6)
    # the quick runs are two iterations a job: utilization may not rise in one of them; the rest must pass
    assert r.returncode == 0 or "FAIL Crux priorities and paths raised" in r.stdout, r.stdout
    assert "PASS answer 'util_crux_paths'" in r.stdout and "PASS answer 'crossing_ratio'" in r.stdout, r.stdout
    assert "PASS Crux put the most GPU-intensive job (A) first" in r.stdout

    (work / "lab6.yaml").write_text((work / "lab6.yaml").read_text().replace(f"crossing_ratio: {round(ratio, 3)}",
                                                                             "crossing_ratio: 1.0"))
    r = check(tmp_path, 6)
    assert r.returncode == 1 and "FAIL answer 'crossing_ratio'" in r.stdout, r.stdout


def _lab7_answers(tmp_path: Path, quick_results) -> dict:
    """The student's two runs copied in; the answers their tables give."""
    camp = by_variant(student_copy(tmp_path, quick_results, "failure_campaign"))
    gray = by_variant(student_copy(tmp_path, quick_results, "gray_failures"))
    restarts = {k: sum(s["restarts"] for s in camp[k][0]["campaign"]["summary"].values())
                for k in ("dual-tor-hpn", "single-tor-rail")}
    slow = [o["slowdown"] for o in camp["dual-tor-hpn"][0]["campaign"]["outcomes"]
            if o["kind"] == "nic-tor" and o["outcome"] == "slowdown"]
    (named,) = gray["lossy-1e-3"][0]["gray"]["delays"]
    return {"dual_tor_restarts": restarts["dual-tor-hpn"], "single_tor_restarts": restarts["single-tor-rail"],
            "dual_tor_slowdown": round(statistics.mean(slow), 2), "lossy_link": named["links"][0],
            "named_after_s": round(named["named_after_s"], 3)}


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
    a = _lab7_answers(tmp_path, quick_results)
    assert a["dual_tor_restarts"] == 0 < a["single_tor_restarts"] and a["lossy_link"] == "h1:nic0:p0"
    answer(tmp_path / "lab-work", 7, **a)
    r = check(tmp_path, 7)
    assert r.returncode == 0, r.stdout
    assert "8 of 8 checks passed" in r.stdout


@pytest.mark.slow
def test_lab7_wrong_answers_and_missing_runs_fail_with_hints(tmp_path, quick_results):
    prepare(LABS[7], tmp_path / "lab-work")
    r = check(tmp_path, 7)
    assert r.returncode == 1
    assert "FAIL a run of failure_campaign: run it first: hpnlab run experiments/failure_campaign.yaml --quick" \
        in r.stdout and "FAIL a run of gray_failures" in r.stdout
    a = _lab7_answers(tmp_path, quick_results)
    answer(tmp_path / "lab-work", 7, **{**a, "dual_tor_restarts": a["single_tor_restarts"], "lossy_link": "h0:nic0:p0"})
    r = check(tmp_path, 7)
    assert r.returncode == 1 and "6 of 8 checks passed" in r.stdout, r.stdout
    assert "FAIL answer 'dual_tor_restarts'" in r.stdout and "FAIL answer 'lossy_link': 'h0:nic0:p0' is not" \
        in r.stdout
