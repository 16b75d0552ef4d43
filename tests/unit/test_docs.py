"""The documentation: the site builds with --strict, every option and key has help text, README stays a front
door, and no page keeps a lab notebook (dates and commit hashes only in the benchmarks' stamped tables)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]
DATE = re.compile(r"20[0-9]{2}-[0-9]{2}-[0-9]{2}")
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
BENCH_BLOCK = re.compile(r"<!-- bench:([a-z_-]+):start -->.*?<!-- bench:\1:end -->", re.S)


def test_site_builds_strict(tmp_path):
    """mkdocs build --strict: a broken link, a missing page, a generated table without its descriptions fails."""
    mkdocs = Path(sys.executable).with_name("mkdocs")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([str(mkdocs), "build", "--strict", "-q", "-d", str(tmp_path / "site")], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    html = (tmp_path / "site" / "reference" / "experiment.html").read_text()
    assert "step_timeout_s" in html and "qos.lossless[]" in html  # the generated table is in the page
    assert "--dilation" in (tmp_path / "site" / "reference" / "cli.html").read_text()


def commands(cmd: click.Command, path: str = "hpnlab"):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from commands(sub, f"{path} {name}")


def test_every_command_and_option_has_help():
    from testbed.cli.main import cli

    missing = [f"{path}: the command" for path, c in commands(cli) if not (c.help or c.short_help)]
    missing += [f"{path} {p.opts[0]}" for path, c in commands(cli) for p in c.params
                if isinstance(p, click.Option) and not p.hidden and not p.help]
    assert not missing, "add help= to: " + ", ".join(missing)


def hooks():
    """scripts/mkdocs_hooks.py, which generates the reference pages (not a package: loaded from its file)."""
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_experiment_key_and_builder_parameter_has_a_description():
    """All of them at once, where the docs build stops at the first."""
    from testbed.experiment.spec import Experiment
    from topos import BUILDERS

    h = hooks()
    models = h.models_under(Experiment)
    missing = []
    for model in [*models, *(b.params for b in BUILDERS.values())]:
        for name in model.model_fields:
            try:
                h.description_of(model, name)
            except ValueError:
                missing.append(f"{model.__name__}.{name}")
    assert len(models) > 10 and not missing, "add Field(description=...) to: " + ", ".join(sorted(missing))


def test_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    assert not [line for line in lines if DATE.search(line)]
    assert "make test" in "\n".join(lines)  # the test command CI's .ci/run calls
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def doc_pages() -> list[Path]:
    """What the site shows: docs/ and the files its pages include (experiments' and labs' READMEs, guides)."""
    pages = sorted((ROOT / "docs").rglob("*.md"))
    included = [ROOT / m for p in pages for m in re.findall(r'^--8<-- "([^"]+)"', p.read_text(), re.M)]
    return [p for p in pages + included if p.name != "CHANGELOG.md"]


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_lab_notebook_in_the_docs(page):
    """Dates and commit hashes belong to the benchmarks' stamps (between their markers) and CHANGELOG.md."""
    text = BENCH_BLOCK.sub("", page.read_text())
    assert not DATE.findall(text), f"{page.name}: a date outside a generated table; history goes to CHANGELOG.md"
    hashes = set(HASH.findall(text)) - {"ed25519"}  # an SSH key type, not a commit
    assert not hashes, f"{page.name}: a commit hash outside a generated table: {sorted(hashes)}"


def test_every_benchmark_table_is_stamped():
    for page in (ROOT / "docs" / "benchmarks.md", ROOT / "experiments" / "README.md"):
        blocks = BENCH_BLOCK.finditer(page.read_text())
        for b in blocks:
            first = b.group(0).splitlines()[1]
            assert re.fullmatch(r"Measured on .+; commit \S+.*; 20\d\d-\d\d-\d\d\.", first), (page.name, first)
