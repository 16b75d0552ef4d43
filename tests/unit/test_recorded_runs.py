"""The lab checkers and the results summaries, as pure code against recorded quick runs (tests/data/runs,
written by scripts/record_runs.py from `hpnlab run --quick` of each experiment a lab reads).

A student who answers from their runs passes; one who skipped a step, or read a figure wrong, fails with the
hint that names it; and `hpnlab results show` prints each figure a lab's hint sends the student to. The
end-to-end runs of the labs are in the slow tier (tests/emu/test_lab_runs.py)."""

from __future__ import annotations

import functools
import json
import re
import statistics

import pytest

from testbed.labs.registry import LABS, prepare
from testbed.schema.results import Run
from tests.labwork import (
    RECORDED,
    answer,
    by_variant,
    check,
    lab2_answers,
    lab3_halted,
    lab4_answers,
    lab6_answers,
    lab7_answers,
    recorded_run,
)

READ_BY_LABS = {2: ("precise_vs_ecmp", "hash_polarization"), 3: ("dual_tor_failover",),
                4: ("pfc_incast", "pfc_storm", "pfc_deadlock"), 6: ("crux_multi_job", "placement"),
                7: ("failure_campaign", "gray_failures")}
READ = sorted({name for names in READ_BY_LABS.values() for name in names})


def lab(tmp_path, n: int) -> list[dict]:
    """lab-work/ as `lab start N` makes it, and the recorded runs the lab reads in results/."""
    prepare(LABS[n], tmp_path / "lab-work")
    return [recorded_run(name, tmp_path) for name in READ_BY_LABS[n]]


def checked(tmp_path, n: int, answers: dict):
    """`lab check N` with these answers, in a fresh answers file as `lab start N` makes it."""
    prepare(LABS[n], tmp_path / "fresh")  # made once, never filled in
    (tmp_path / "lab-work" / f"lab{n}.yaml").write_text((tmp_path / "fresh" / f"lab{n}.yaml").read_text())
    answer(tmp_path / "lab-work", n, **answers)
    return check(tmp_path, n)


def test_every_run_a_lab_reads_is_recorded_and_stamped():
    from testbed.labs import checks

    source = checks.__loader__.get_source(checks.__name__)
    read = set(re.findall(r'latest_run\("(\w+)"\)', source))
    assert read == set(READ) == {p.stem for p in RECORDED.glob("*.json")}
    for name in read:
        data = json.loads((RECORDED / f"{name}.json").read_text())
        assert data["experiment"]["name"] == name
        assert {"commit", "machine", "date", "from"} <= set(data["recorded"])
        assert all("samples" not in (r.get("pfc") or {}) for r in data["runs"])  # left out by record_runs.py


def test_lab2_passes_on_answers_from_the_runs_and_names_a_wrong_one(tmp_path):
    a = lab2_answers(*lab(tmp_path, 2))
    r = checked(tmp_path, 2, {**a, "faster": "ecmp" if a["faster"] == "precise" else "precise"})
    assert r.returncode == 1 and "FAIL answer 'faster'" in r.stdout and "6 of 7 checks passed" in r.stdout, r.stdout
    r = checked(tmp_path, 2, a)
    assert r.returncode == 0 and "7 of 7 checks passed" in r.stdout, r.stdout


def test_lab2_without_the_run_says_to_run_it(tmp_path):
    prepare(LABS[2], tmp_path / "lab-work")
    r = check(tmp_path, 2)
    assert r.returncode == 1
    assert "FAIL a run of precise_vs_ecmp: run it first: hpnlab run experiments/precise_vs_ecmp.yaml --quick" \
        in r.stdout


def test_lab3_passes_and_counting_the_paths_without_failing_the_link_fails(tmp_path):
    halted = lab3_halted(*lab(tmp_path, 3))
    assert halted == {"dual_tor_halted": "no", "single_tor_halted": "yes"}
    # the student skipped 'fail h5:nic0:p0' and counted the same paths twice
    r = checked(tmp_path, 3, {"paths_before": 8, "paths_after": 8, **halted})
    assert r.returncode == 1
    assert "FAIL answer 'paths_after': '8' is not what the network shows; type 'fail h5:nic0:p0'" in r.stdout
    assert "3 of 4 checks passed" in r.stdout
    r = checked(tmp_path, 3, {"paths_before": 8, "paths_after": 4, **halted})
    assert r.returncode == 0 and "4 of 4 checks passed" in r.stdout, r.stdout


def test_lab4_passes_and_a_missing_answer_is_named(tmp_path):
    a = lab4_answers(*lab(tmp_path, 4))
    r = checked(tmp_path, 4, {})
    assert r.returncode == 1
    assert "FAIL answer 'drops_pfc_off': fill in 'drops_pfc_off' in your answers file" in r.stdout
    assert "FAIL answer 'watchdog_drops': fill in 'watchdog_drops' in your answers file" in r.stdout
    assert "6 of 12 checks passed" in r.stdout
    r = checked(tmp_path, 4, {**a, "watchdog_drops": a["watchdog_drops"] + 1})  # one frame off
    assert r.returncode == 1 and "FAIL answer 'watchdog_drops'" in r.stdout, r.stdout
    r = checked(tmp_path, 4, {**a, "deadlock_closed": a["deadlock_closed"] + 1})  # one deadlock off
    assert r.returncode == 1 and "FAIL answer 'deadlock_closed'" in r.stdout, r.stdout
    r = checked(tmp_path, 4, a)
    assert r.returncode == 0 and "12 of 12 checks passed" in r.stdout, r.stdout


def test_lab6_passes_and_a_wrong_crossing_ratio_fails(tmp_path):
    a = lab6_answers(*lab(tmp_path, 6))
    r = checked(tmp_path, 6, {**a, "crossing_ratio": 1.0})
    assert r.returncode == 1 and "FAIL answer 'crossing_ratio'" in r.stdout, r.stdout
    assert "6 of 7 checks passed" in r.stdout, r.stdout
    r = checked(tmp_path, 6, a)
    assert "PASS Crux put the most GPU-intensive job (A) first" in r.stdout
    assert all(f"PASS answer '{k}'" in r.stdout for k in a), r.stdout
    # this recorded run's utilization rose with Crux's priorities and paths (a quick run may not: two iterations)
    assert r.returncode == 0 and "7 of 7 checks passed" in r.stdout, r.stdout


def test_lab7_passes_and_wrong_answers_and_missing_runs_fail_with_hints(tmp_path):
    prepare(LABS[7], tmp_path / "lab-work")
    r = check(tmp_path, 7)
    assert r.returncode == 1
    assert "FAIL a run of failure_campaign: run it first: hpnlab run experiments/failure_campaign.yaml --quick" \
        in r.stdout and "FAIL a run of gray_failures" in r.stdout
    a = lab7_answers(*(recorded_run(name, tmp_path) for name in READ_BY_LABS[7]))
    assert a["dual_tor_restarts"] == 0 < a["single_tor_restarts"] and a["lossy_link"] == "h1:nic0:p0"
    r = checked(tmp_path, 7, {**a, "dual_tor_restarts": a["single_tor_restarts"], "lossy_link": "h0:nic0:p0"})
    assert r.returncode == 1 and "6 of 8 checks passed" in r.stdout, r.stdout
    assert "FAIL answer 'dual_tor_restarts'" in r.stdout and "FAIL answer 'lossy_link': 'h0:nic0:p0' is not" \
        in r.stdout
    r = checked(tmp_path, 7, a)
    assert r.returncode == 0 and "8 of 8 checks passed" in r.stdout, r.stdout


@functools.cache
def summary(name: str) -> tuple[dict, str]:
    """A recorded run and the summary.md its record gives (what `hpnlab results show` prints)."""
    from testbed.experiment.results import summary_lines
    from testbed.experiment.spec import Experiment

    data = json.loads((RECORDED / f"{name}.json").read_text())
    runs = [Run.model_validate(r) for r in data["runs"]]
    return data, "\n".join(summary_lines(Experiment.model_validate(data["experiment"]), runs))


def variant_rows(out: str) -> dict[str, list[str]]:
    """The summary's first table (one row per variant), its cells by variant."""
    rows: dict[str, list[str]] = {}
    for line in out.splitlines():
        if line.startswith("| ") and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 8:
            rows.setdefault(cells[0], cells)
    return rows


@pytest.mark.parametrize("name", READ)
def test_the_summary_has_every_variant_with_its_share_of_ideal(name):
    data, out = summary(name)
    rows = variant_rows(out)
    for variant, runs in by_variant(data).items():
        ops = [o["fraction_of_ideal"] for r in runs for o in r["ops"]]
        assert variant in rows, (variant, out[:3000])
        share = statistics.mean(ops) if ops else 0.0  # a run halted before its first op ended: none of it
        assert rows[variant][1] == str(len(ops)) and rows[variant][3].startswith(f"{share:.1%} ±"), \
            rows[variant]


def test_the_summary_prints_the_figures_the_labs_send_students_to():
    """Every answer a lab's hint says to read in `hpnlab results show` is printed there, as the checker wants it."""
    a2 = lab2_answers(summary("precise_vs_ecmp")[0], summary("hash_polarization")[0])
    rows = variant_rows(summary("precise_vs_ecmp")[1])
    for variant, key in (("hpn-ecmp", "ecmp_fraction"), ("hpn-precise", "precise_fraction")):
        shown = float(rows[variant][3].split("%")[0]) / 100  # "47.1% ± 0.1%"
        assert abs(shown - a2[key]) < 0.005, (rows[variant], a2)
    polarization = summary("hash_polarization")[1]
    assert f"| {a2['polarized_links']} of 16 |" in polarization and f"| {a2['seeded_links']} of 16 |" in polarization
    assert re.search(r"\| single-tor-rail \|.*\| 1 of 1 \(first at", summary("dual_tor_failover")[1])
    data, out = summary("pfc_incast")
    storm, storm_out = summary("pfc_storm")
    dead, dead_out = summary("pfc_deadlock")
    a4 = lab4_answers(data, storm, dead)
    assert f"for {a4['deadlock_held_s']:g} s at most (fabric time), still held when the traffic ended" in dead_out
    closed = re.findall(r"PFC deadlock, watchdog #0: .*? closed \(every queue on it paused\) (\d+) time", dead_out,
                        re.S)
    assert sum(int(c) for c in closed) == a4["deadlock_closed"], (closed, dead_out)
    assert (f"PFC watchdog (drop), storm-watchdog #0: {a4['watchdog_storms']} storm(s)" in storm_out
            and f", {a4['watchdog_drops']:,} frames dropped: " in storm_out), storm_out
    assert re.search(rf"\| pfc-off \|.*\| {a4['drops_pfc_off']}/0 \|", out), out
    assert f"| pfc-on #0 | {a4['pause_events_pfc_on']:,} |" in out, out
    react = data["runs"][0]["pfc"]["reaction_ms"]
    assert (f"PFC reaction, pfc-on #0: p50 {react['median']:g} ms, p99 {react['p99']:g} ms, max {react['max']:g} ms"
            in out), out
    a7 = lab7_answers(summary("failure_campaign")[0], summary("gray_failures")[0])
    campaign = summary("failure_campaign")[1]
    assert re.search(rf"\| dual-tor-hpn #0 \| \S+ \| \d+ \| {a7['dual_tor_restarts']} \|", campaign), campaign
    assert re.search(rf"\| single-tor-rail #0 \| \S+ \| \d+ \| {a7['single_tor_restarts']} \|", campaign)
    assert f"| {a7['dual_tor_slowdown']:.2f} |" in campaign, campaign
    gray = summary("gray_failures")[1]
    assert f"on {a7['lossy_link']} at" in gray and f"| {a7['named_after_s']:.3f} |" in gray, gray


def test_every_op_of_a_run_is_one_nccl_inspector_record(tmp_path):
    """nccl_inspector.jsonl beside results.json: one record per op, numbered per job, whose bus bandwidth is the
    op's own (emulated bits per second times the scale, in GB/s)."""
    from testbed.experiment.results import _write_inspector

    data = json.loads((RECORDED / "crux_multi_job.json").read_text())
    runs = [Run.model_validate(r) for r in data["runs"]]
    _write_inspector(tmp_path, runs)
    recs = [json.loads(line) for line in (tmp_path / "nccl_inspector.jsonl").read_text().splitlines()]
    ops = [(r, o) for r in runs for o in r.ops]
    assert len(recs) == len(ops) > 0
    for rec, (run, o) in zip(recs, ops, strict=True):
        assert (rec["hpnlab"]["variant"], rec["hpnlab"]["job"]) == (run.variant, o.job)
        assert rec["coll_perf"]["coll_busbw_gbs"] == pytest.approx(o.busbw_bps * run.scale / 8e9, rel=1e-4)
        assert rec["header"]["nnodes"] == len(run.jobs[o.job]["hosts"])
    sn = [((r["hpnlab"]["variant"], r["hpnlab"]["repetition"], r["hpnlab"]["job"]), r["coll_perf"]["coll_sn"])
          for r in recs]
    for key in {k for k, _ in sn}:
        numbers = [n for k, n in sn if k == key]
        assert numbers == list(range(1, len(numbers) + 1)), (key, numbers)
