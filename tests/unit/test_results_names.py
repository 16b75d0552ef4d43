"""Results folders are reached by name only inside results/, and a broken record does not stop the others."""

from __future__ import annotations

import pytest

from testbed.experiment import results
from tests.records import a_run, an_op, results_json
from topos.errors import InputError


@pytest.fixture
def tree(tmp_path, monkeypatch):
    root = tmp_path / "results"
    root.mkdir()
    monkeypatch.setattr(results, "RESULTS", root)
    good = root / "20261122-100000-demo-abc1234"
    good.mkdir()
    (good / "results.json").write_text(results_json({"name": "demo"}, [
        a_run(variant="ecmp", ops=[an_op(busbw_bps=2e6, fraction_of_ideal=0.5)])]))
    (good / "summary.md").write_text("# demo\n")
    broken = root / "20261122-110000-demo-def5678"
    broken.mkdir()
    (broken / "results.json").write_text('{"experiment": {"name": "demo"}, "runs": [{"variant": "ec')
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "results.json").write_text(results_json({"name": "x"}, []))
    (outside / "summary.md").write_text("not yours\n")
    (root / "20261122-120000-link").symlink_to(outside)
    return root, good, broken


def test_a_truncated_record_is_listed_as_unreadable(tree):
    _root, good, broken = tree
    rows = {r["run"]: r for r in results.list_runs()}
    assert rows[good.name]["runs"] == 1
    assert rows[broken.name]["runs"] is None and "unreadable" in rows[broken.name]["experiment"]
    with pytest.raises(InputError, match="unreadable") as exc:
        results.compare(good.name, broken.name)
    assert exc.value.exit_code == 2


@pytest.mark.parametrize("name", ["../secret", "*", "2026*", "/etc", "..", "a/b", "x?", "[a]", "link"])
def test_run_names_cannot_leave_results(tree, name):
    with pytest.raises(InputError):
        results.summary(name)


def test_a_run_is_found_by_a_unique_part_of_its_name(tree):
    _root, good, _broken = tree
    assert results.summary("abc1234") == "# demo\n"
    with pytest.raises(InputError, match="more than one"):
        results.find("demo")
