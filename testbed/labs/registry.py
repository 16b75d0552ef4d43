"""The labs: what each one builds for `hpnlab lab start`, the questions its answers file asks, its guide."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from topos.errors import InputError
from topos.inputs import create_new

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ROOT / "experiments" / "labs"


@dataclass(frozen=True)
class Lab:
    number: int
    title: str
    minutes: int
    guide: str
    topology: str = "hpn"
    mode: str = "ecmp"
    qos: bool = False  # shaped links and PFC, for `queues`
    questions: dict[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # copied into the work folder at start

    @property
    def guide_path(self) -> Path:
        return GUIDES / self.guide


LABS = {lab.number: lab for lab in (
    Lab(1, "Build HPN and DCN+, count and draw the paths", 30, "01-paths.md",
        questions={"hpn_paths": "distinct paths from h0 to h7 (NIC 0) in HPN",
                   "dcn_plus_paths": "distinct paths from h0 to h7 (NIC 0) in DCN+"}),
    Lab(2, "ECMP collisions vs precise routing", 40, "02-ecmp-collisions.md",
        questions={"ecmp_fraction": "HPN + ECMP: all-reduce busbw as a fraction of ideal (e.g. 0.47)",
                   "precise_fraction": "HPN + precise: all-reduce busbw as a fraction of ideal",
                   "faster": "which mode is faster: ecmp or precise",
                   "polarized_links": "hash_polarization, single-plane: aggregation-to-ToR links that carried "
                                      "traffic (e.g. 8 for '8 of 16')",
                   "seeded_links": "the same for single-plane-seeded"}),
    Lab(3, "Dual-ToR failover", 40, "03-dual-tor-failover.md",
        questions={"paths_before": "paths from h5 to h0 before failing h5:nic0:p0",
                   "paths_after": "paths from h5 to h0 after failing h5:nic0:p0",
                   "dual_tor_halted": "did the dual-ToR job halt (yes/no)",
                   "single_tor_halted": "did the single-ToR job halt (yes/no)"}),
    Lab(4, "Lossless queues: incast with and without PFC", 55, "04-lossless-queues.md", qos=True,
        questions={"drops_pfc_off": "lossless-class drops without PFC",
                   "pause_events_pfc_on": "pause events with PFC on (all tiers)",
                   "watchdog_storms": "pfc_storm, storm-watchdog: the storms the PFC watchdog found",
                   "watchdog_drops": "pfc_storm, storm-watchdog: the frames the PFC watchdog dropped",
                   "deadlock_held_s": "pfc_deadlock, deadlock: how long the cycle stayed closed, in seconds (its "
                                      "PFC deadlock line, e.g. 4.7)",
                   "deadlock_closed": "pfc_deadlock, watchdog: how many times the cycles closed (added over its "
                                      "PFC deadlock lines)"}),
    Lab(5, "Write a routing policy", 45, "05-routing-policy.md", mode="precise",
        files=("lab5_policy.py",)),
    Lab(6, "Several training jobs: Crux priorities and placement", 45, "06-multi-job.md", qos=True,
        questions={"first_job": "crux_multi_job, crux-priorities: the job the scheduler put first",
                   "util_one_class": "crux_multi_job, ecmp-one-class: cluster GPU utilization (e.g. 0.19)",
                   "util_crux_paths": "crux_multi_job, crux-priorities-paths: cluster GPU utilization",
                   "crossing_ratio": "placement: bytes that crossed segments, compact over scattered "
                                     "(e.g. 0.5)"}),
    Lab(7, "What a failure costs: campaigns, the watchdog, gray failures", 50, "07-failure-costs.md", qos=True,
        questions={"dual_tor_restarts": "failure_campaign, dual-tor-hpn: restarts (the Failure campaign table)",
                   "single_tor_restarts": "failure_campaign, single-tor-rail: restarts",
                   "dual_tor_slowdown": "failure_campaign, dual-tor-hpn, nic-tor: the mean slowdown (e.g. 1.4)",
                   "lossy_link": "gray_failures, lossy-1e-3: the link the detector named",
                   "named_after_s": "gray_failures, lossy-1e-3: how soon it was named, in seconds (e.g. 0.05)"}),
)}


def get(number: int) -> Lab:
    if number not in LABS:
        raise InputError("no such lab", f"use one of {', '.join(map(str, LABS))} ('hpnlab lab list')",
                         field="lab", value=number)
    return LABS[number]


def prepare(lab: Lab, workdir: Path) -> list[Path]:
    """The student's work folder: an answers template and the lab's files; never overwrites their work."""
    workdir.mkdir(parents=True, exist_ok=True)
    made = []
    if lab.questions:
        answers = workdir / f"lab{lab.number}.yaml"
        text = (f"# Lab {lab.number}: {lab.title}. Fill in each value, then: hpnlab lab check {lab.number}\n"
                + "".join(f"# {q}\n{k}:\n" for k, q in lab.questions.items()))
        if _create(answers, text.encode()):
            made.append(answers)
    for name in lab.files:
        dst = workdir / name
        if _create(dst, (GUIDES / name).read_bytes()):
            made.append(dst)
    return made


def _create(path: Path, data: bytes) -> bool:
    """False if anything is at that name already: `lab start` runs as root, and a (dangling) symlink a
    student left there must not make it write elsewhere."""
    try:
        create_new(path, data, 0o644)
    except FileExistsError:
        return False
    return True
