"""Every block the docs mark runnable (a `<!-- runnable -->` line above a bash or python block) runs as a reader
would run it: in order, page by page, in a fresh folder, as root with the project's venv first on PATH. A block
that fails, or a claim of the page that its own run does not show, fails the test: the docs cannot drift from
the program."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = re.compile(r"^<!-- runnable -->\n```(bash|python)\n(.*?)^```", re.S | re.M)
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if RUNNABLE.search(p.read_text()))



def blocks(page: Path) -> list[tuple[str, str]]:
    return RUNNABLE.findall(page.read_text())


def run_block(lang: str, code: str, cwd: Path) -> str:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
           "COLUMNS": "160"}
    cmd = ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    said = f"\n{code}\n--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}"
    assert r.returncode == 0, f"exit {r.returncode}:{said}"
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    return r.stdout


def runs_of(cwd: Path) -> dict[str, dict]:
    """Each results folder the page's blocks made, by experiment name: its results.json."""
    records = [json.loads(f.read_text()) for f in sorted((cwd / "results").glob("*/results.json"))]
    return {r["experiment"]["name"]: r for r in records}


def by_variant(record: dict) -> dict[str, dict]:
    return {r["variant"]: r for r in record["runs"]}


def check_first_hpn(out: str, cwd: Path) -> None:
    """What the tutorial says its run shows: the dual-ToR job goes on, the single-ToR one halts."""
    runs = by_variant(runs_of(cwd)["first"])
    assert runs["dual-tor"]["halted"] is None and runs["single-tor"]["halted"] is not None, runs.keys()
    assert (cwd / "results" / "topo" / "hpn-mini.png").is_file()


def check_simai(out: str, cwd: Path) -> None:
    assert "predict" in out.lower(), out[-2000:]


def check_hpn_vs_dcn(out: str, cwd: Path) -> None:
    runs = by_variant(runs_of(cwd)["fabrics"])
    assert set(runs) == {"hpn-ecmp", "hpn-precise", "dcn-ecmp", "dcn-precise"}
    assert all(o["bytes_delivered"] == o["bytes_expected"] for r in runs.values() for o in r["ops"])


def check_campaign(out: str, cwd: Path) -> None:
    """The tutorial's claim: dual-ToR HPN slows and goes on, single-ToR rails restart."""
    runs = by_variant(runs_of(cwd)["campaign"])
    dual, single = (runs[v]["campaign"]["summary"]["job"] for v in ("dual-tor", "single-tor"))
    assert dual["outages"] == single["outages"] == 2
    assert dual["restarts"] == 0 and single["restarts"] >= 1, (dual, single)


def check_routing_policy(out: str, cwd: Path) -> None:
    assert re.search(r"least_loaded\s+busiest link carries 1 flows, 0 links", out), out


CHECKS = {"first-hpn.md": check_first_hpn, "simai.md": check_simai, "hpn-vs-dcn.md": check_hpn_vs_dcn,
          "failure-campaign.md": check_campaign, "routing-policy.md": check_routing_policy}


def test_the_tutorials_are_the_ones_with_runnable_blocks():
    """Every tutorial runs something, and every page that runs something has its claims checked here."""
    tutorials = {p.name for p in (ROOT / "docs" / "tutorials").glob("*.md")}
    assert tutorials <= {p.name for p in PAGES}
    assert {p.name for p in PAGES} <= set(CHECKS)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_runnable_blocks(page, tmp_path, no_leftovers):
    out = "".join(run_block(lang, code, tmp_path) for lang, code in blocks(page))
    CHECKS[page.name](out, tmp_path)
