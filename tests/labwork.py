"""A student's side of a lab, for the tests: runs where `hpnlab run` leaves them, answers read off them as the
guides say, written into the answers file `lab start` made, and `hpnlab lab check`. The answers come from
the runs' results.json (what `hpnlab results show` prints), never from the checker's code."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from testbed.net.balance import Counters, cross_segment_bytes, links_used
from traffic.metrics import cluster_utilization

HPNLAB = str(Path(sys.executable).parent / "hpnlab")
RECORDED = Path(__file__).resolve().parent / "data" / "runs"  # written by scripts/record_runs.py


def check(cwd: Path, n: int) -> subprocess.CompletedProcess:
    return subprocess.run([HPNLAB, "lab", "check", str(n)], cwd=cwd, capture_output=True, text=True, timeout=120)


def answer(work: Path, n: int, **values) -> None:
    path = work / f"lab{n}.yaml"
    text = path.read_text()
    for k, v in values.items():
        text = text.replace(f"\n{k}:\n", f"\n{k}: {v}\n")
    path.write_text(text)


def copy_run(run: Path, cwd: Path) -> dict:
    """A run folder into the student's results/; its results.json."""
    shutil.copytree(run, cwd / "results" / run.name)
    return json.loads((run / "results.json").read_text())


def recorded_run(name: str, cwd: Path) -> dict:
    """The recorded quick run of an experiment, put where the student's own run would be."""
    data = json.loads((RECORDED / f"{name}.json").read_text())
    folder = cwd / "results" / data["recorded"]["from"]
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({k: v for k, v in data.items() if k != "recorded"}))
    return data


def by_variant(data: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in data["runs"]:
        out.setdefault(r["variant"], []).append(r)
    return out


def lab2_answers(precise_vs_ecmp: dict, hash_polarization: dict) -> dict:
    v = by_variant(precise_vs_ecmp)
    frac = {k: statistics.mean(o["fraction_of_ideal"] for r in rs for o in r["ops"]) for k, rs in v.items()}
    used = {k: links_used(Counters.of(rs[0]))[0] for k, rs in by_variant(hash_polarization).items()}
    return {"ecmp_fraction": round(frac["hpn-ecmp"], 2), "precise_fraction": round(frac["hpn-precise"], 2),
            "faster": "precise" if frac["hpn-precise"] > frac["hpn-ecmp"] else "ecmp",
            "polarized_links": used["single-plane"], "seeded_links": used["single-plane-seeded"]}


def lab3_halted(dual_tor_failover: dict) -> dict:
    halted = {k: any(r["halted"] for r in rs) for k, rs in by_variant(dual_tor_failover).items()}
    return {"dual_tor_halted": "yes" if halted["dual-tor-hpn"] else "no",
            "single_tor_halted": "yes" if halted["single-tor-rail"] else "no"}


def lab4_answers(pfc_incast: dict, pfc_storm: dict, pfc_deadlock: dict) -> dict:
    v, storm, dead = by_variant(pfc_incast), by_variant(pfc_storm), by_variant(pfc_deadlock)
    wd = [r["pfc"]["watchdog"] for r in storm["storm-watchdog"]]
    return {"drops_pfc_off": sum(r["drops"]["lossless"] for r in v["pfc-off"]),
            "pause_events_pfc_on": sum(t["pause_events"] for r in v["pfc-on"]
                                       for t in r["pfc"]["pauses_by_tier"].values()),
            "watchdog_storms": sum(w["storms"] for w in wd), "watchdog_drops": sum(w["drops"] for w in wd),
            "deadlock_held_s": max(h["longest_s"] for r in dead["deadlock"] for h in r["pfc"]["deadlocks"]),
            "deadlock_closed": sum(h["closed"] for r in dead["watchdog"] for h in r["pfc"]["deadlocks"])}


def lab6_answers(crux_multi_job: dict, placement: dict) -> dict:
    crux, place = by_variant(crux_multi_job), by_variant(placement)

    def util(runs):
        return cluster_utilization([i for r in runs for i in r["iterations"]],
                                   {j: d["gpus"] for r in runs for j, d in r["jobs"].items()})[0]

    compact, scattered = (cross_segment_bytes(Counters.of(place[k][0])) for k in ("compact", "scattered"))
    ratio = compact / scattered
    return {"first_job": crux["crux-priorities"][0]["crux"]["order"][0],
            "util_one_class": round(util(crux["ecmp-one-class"]), 3),
            "util_crux_paths": round(util(crux["crux-priorities-paths"]), 3), "crossing_ratio": round(ratio, 3)}


def lab7_answers(failure_campaign: dict, gray_failures: dict) -> dict:
    camp, gray = by_variant(failure_campaign), by_variant(gray_failures)
    restarts = {k: sum(s["restarts"] for s in camp[k][0]["campaign"]["summary"].values())
                for k in ("dual-tor-hpn", "single-tor-rail")}
    slow = [o["slowdown"] for o in camp["dual-tor-hpn"][0]["campaign"]["outcomes"]
            if o["kind"] == "nic-tor" and o["outcome"] == "slowdown"]
    (named,) = gray["lossy-1e-3"][0]["gray"]["delays"]
    return {"dual_tor_restarts": restarts["dual-tor-hpn"], "single_tor_restarts": restarts["single-tor-rail"],
            "dual_tor_slowdown": round(statistics.mean(slow), 2), "lossy_link": named["links"][0],
            "named_after_s": round(named["named_after_s"], 3)}
