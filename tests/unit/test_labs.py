"""Labs 1 and 5 (no root): do the steps and the checker passes; skip one and it says which, with a hint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.labs.checks import lab1, lab5
from testbed.labs.evidence import Evidence
from testbed.labs.registry import LABS, get, prepare
from tests.records import a_run, an_op, results_json
from topos.errors import InputError

HPNLAB = str(Path(sys.executable).parent / "hpnlab")
SOLUTION = """
def choose(flow, candidates, load):
    def busiest(i):
        p = candidates[i]
        return max(load.get(h, 0) for h in [(flow.src, p.host_port), *p.hops])
    return min(range(len(candidates)), key=busiest)
"""


def check(cwd: Path, n: int) -> subprocess.CompletedProcess:
    return subprocess.run([HPNLAB, "lab", "check", str(n)], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_every_lab_has_a_guide_and_questions_or_files():
    assert sorted(LABS) == [1, 2, 3, 4, 5, 6, 7]
    for lab in LABS.values():
        assert lab.guide_path.exists(), lab.guide_path
        assert lab.questions or lab.files
        assert f"hpnlab lab check {lab.number}" in lab.guide_path.read_text()
    with pytest.raises(InputError, match="lab"):
        get(9)


def test_lab1_steps_pass(tmp_path):
    prepare(LABS[1], tmp_path / "lab-work")
    for name in ("hpn", "dcn_plus"):
        r = subprocess.run([HPNLAB, "topo", "show", name, "--png", f"lab-work/{name}.png"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    answers = tmp_path / "lab-work" / "lab1.yaml"
    # what `paths h0 h7` lists in each fabric: 2 planes x 4 aggs; 2 x 2 x 2 x 2 through the core tier
    answers.write_text(answers.read_text().replace("hpn_paths:", "hpn_paths: 8")
                       .replace("dcn_plus_paths:", "dcn_plus_paths: 16"))
    r = check(tmp_path, 1)
    assert r.returncode == 0, r.stdout
    assert "4 of 4 checks passed" in r.stdout


def test_lab1_without_the_drawing_or_with_a_wrong_count_fails_with_a_hint(tmp_path):
    work = tmp_path / "lab-work"
    prepare(LABS[1], work)
    (work / "lab1.yaml").write_text("hpn_paths: 8\ndcn_plus_paths: 8\n")
    checks = {c.name: c for c in lab1(Evidence(work))}
    assert not checks[f"picture {work}/hpn.png"].ok
    assert "hpnlab topo show hpn --png" in checks[f"picture {work}/hpn.png"].hint
    assert checks["answer 'hpn_paths'"].ok and not checks["answer 'dcn_plus_paths'"].ok
    r = check(tmp_path, 1)
    assert r.returncode == 1 and "FAIL picture lab-work/hpn.png" in r.stdout and "1 of 4 checks passed" in r.stdout


def test_lab5_template_fails_and_a_least_loaded_policy_passes(tmp_path):
    work = tmp_path / "lab-work"
    prepare(LABS[5], work)
    first = lab5(Evidence(work))
    assert [c.ok for c in first] == [True, False]
    assert "busiest link carries 8 flow(s) (best possible 1)" in first[1].name
    assert "8 flows went over 1 ToR uplink(s)" in first[1].hint
    src = (work / "lab5_policy.py").read_text()
    start, end = src.index("    # ---- edit below"), src.index("    # ---- edit above")
    (work / "lab5_policy.py").write_text(src[:start] + SOLUTION.split("def choose(flow, candidates, load):\n")[1]
                                         + src[end:])
    r = check(tmp_path, 5)
    assert r.returncode == 0, r.stdout
    assert "busiest link carries 1 flow(s)" in r.stdout


def test_lab5_broken_policy_is_reported_not_raised(tmp_path):
    work = tmp_path / "lab-work"
    prepare(LABS[5], work)
    (work / "lab5_policy.py").write_text("def choose(flow, candidates, load):\n    return len(candidates)\n")
    [c] = lab5(Evidence(work))
    assert not c.ok and "ValueError" in c.hint and "candidate paths" in c.hint


def test_prepare_never_overwrites_the_students_work(tmp_path):
    work = tmp_path / "w"
    prepare(LABS[2], work)
    (work / "lab2.yaml").write_text("faster: precise\n")
    assert prepare(LABS[2], work) == []
    assert (work / "lab2.yaml").read_text() == "faster: precise\n"


def fake_run(results: Path, name: str, variants: dict[str, dict]) -> None:
    d = results / f"20260101-000000-{name}-abc"
    d.mkdir(parents=True)
    runs = [a_run(variant=v, ops=[an_op(fraction_of_ideal=0.5)], **extra) for v, extra in variants.items()]
    (d / "results.json").write_text(results_json({"name": name}, runs))


def links(used: int) -> dict:
    return {"fabric_links": [{"from": f"agg-{i}", "to": f"tor-{i % 2}", "kind": "tor-agg",
                              "bytes": 10**6 if i < used else 0} for i in range(16)]}


def test_lab2_polarization_step_reads_the_links_the_run_used(tmp_path):
    from testbed.labs.checks import lab2

    work, results = tmp_path / "lab-work", tmp_path / "results"
    prepare(LABS[2], work)
    fake_run(results, "precise_vs_ecmp", {"hpn-precise": {}, "hpn-ecmp": {}})
    (work / "lab2.yaml").write_text("polarized_links: 8\nseeded_links: 14\n")
    missing = {c.name: c for c in lab2(Evidence(work, results))}
    assert not missing["a run of hash_polarization"].ok
    fake_run(results, "hash_polarization", {"single-plane": links(8), "single-plane-seeded": links(14)})
    checks = {c.name: c for c in lab2(Evidence(work, results))}
    assert checks["one seed everywhere left aggregation-to-ToR links idle that per-switch seeds used"].ok
    assert checks["answer 'polarized_links'"].ok and checks["answer 'seeded_links'"].ok


def test_prepare_never_writes_through_a_link(tmp_path):
    """`lab start` runs as root: a dangling symlink where the answers file goes must not become a file elsewhere."""
    target = tmp_path / "elsewhere" / "owned-by-root"
    (tmp_path / "elsewhere").mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "lab1.yaml").symlink_to(target)
    lab5_file = get(5).files[0]
    (work / lab5_file).symlink_to(tmp_path / "elsewhere" / "policy")
    assert prepare(get(1), work) == [] and prepare(get(5), work) == []
    assert not target.exists() and not (tmp_path / "elsewhere" / "policy").exists()


def test_answers_files_are_read_as_untrusted_input(tmp_path):
    ev = Evidence(tmp_path, results=tmp_path / "results")
    (tmp_path / "lab1.yaml").write_text("a: &a [1, 2]\n" + "".join(
        f"{k}: &{k} [" + ", ".join([f"*{p}"] * 10) + "]\n" for p, k in zip("abcdef", "bcdefg", strict=True)))
    with pytest.raises(InputError, match="expands to more than"):
        ev.answers(1)
    (tmp_path / "results" / "x-lab-demo").mkdir(parents=True)
    (tmp_path / "results" / "x-lab-demo" / "results.json").write_text('{"experiment": {"na')
    assert ev.latest_run("lab-demo") is None  # a truncated record is no evidence, and no crash
