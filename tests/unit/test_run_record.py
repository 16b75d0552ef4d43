"""The runner's record: jobs write it from threads through one lock, and results.json is saved after every
variant, so a crash in variant 2 keeps variant 1."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.experiment import runner
from testbed.experiment.record import RunRecord
from testbed.experiment.watch import Watch
from testbed.schema.results import Run
from tests.records import a_run

EXP = Path(__file__).resolve().parents[2] / "experiments" / "precise_vs_ecmp.yaml"


def test_jobs_halting_at_once_keep_the_first_halt_and_every_op():
    rec = RunRecord("v", 0, Watch())
    result = SimpleNamespace(op="allreduce", algorithm="ring", ranks=8, size=10, seconds=0.1, algbw_bps=1.0,
                             busbw_bps=1.0, ideal_busbw_bps=2.0, fraction_of_ideal=0.5, bytes_delivered=10,
                             bytes_expected=10, step_seconds=[])
    go = threading.Barrier(8)

    def job(i: int) -> None:
        go.wait()
        for _ in range(50):
            rec.op(f"j{i}", "allreduce/ring", rec.now(), result)
        rec.halt(f"j{i}", "allreduce", TimeoutError(f"job {i}"))

    threads = [threading.Thread(target=job, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(rec.data["ops"]) == 400 and rec.halted
    assert rec.data["halted"]["why"] == f"job {rec.data['halted']['job'][1:]}"


def test_a_crash_in_variant_2_keeps_variant_1(tmp_path, monkeypatch):
    calls = []

    def execute(p, *_a, **_k):
        calls.append(p.label)
        label = p.label
        if len(calls) == 2:
            raise RuntimeError("the network died")
        verdict = {**a_run()["fidelity"], "faithful": False, "status": "unknown", "reasons": [], "unknown": ["x"]}
        return Run.model_validate(a_run(variant=label, repetition=0, fidelity=verdict))

    caps = SimpleNamespace(require_root=lambda _what: None, to_dict=lambda: {})
    monkeypatch.setattr(runner, "probe", lambda: caps)
    monkeypatch.setattr(runner, "versions", lambda _caps: {})
    monkeypatch.setattr(runner, "execute", execute)
    with pytest.raises(RuntimeError, match="the network died"):
        runner.run(EXP, results=tmp_path)
    (out,) = tmp_path.iterdir()
    saved = json.loads((out / "results.json").read_text())
    assert calls == ["hpn-precise", "hpn-precise-host"]
    assert saved["complete"] is False and [r["variant"] for r in saved["runs"]] == ["hpn-precise"]
    assert "unknown (1 of 1)" in (out / "summary.md").read_text()


def test_bytes_are_ok_only_when_they_match_the_schedule_and_the_closed_form():
    from testbed.experiment.record import bytes_ok

    row = {"bytes_delivered": 14_000, "bytes_expected": 14_000, "bytes_closed_form": 14_000}
    assert bytes_ok(row)
    # a schedule that lost a chunk: the receivers got all they were told to expect, which is too little
    assert not bytes_ok({**row, "bytes_delivered": 12_000, "bytes_expected": 12_000})
    assert not bytes_ok({**row, "bytes_delivered": 13_999})
    assert bytes_ok({"bytes_delivered": 5, "bytes_expected": 5})  # a record from before closed forms


def test_a_results_folder_is_never_shared(tmp_path):
    """The same experiment started twice in one second named the same folder, and the second run crashed
    (FileExistsError) after its network was up."""
    from testbed.experiment.runner import new_folder

    made = [new_folder(tmp_path / "results" / "20261123-231706-tiny-9616dd2") for _ in range(3)]
    assert [p.name for p in made] == ["20261123-231706-tiny-9616dd2", "20261123-231706-tiny-9616dd2-2",
                                      "20261123-231706-tiny-9616dd2-3"]
    assert all(p.is_dir() for p in made)


class _Interrupted(Exception):
    """Stands in for KeyboardInterrupt (pytest treats a real one as the user's Ctrl-C)."""


def _fake_net():
    qos = SimpleNamespace(stats=lambda *_a: {}, ports={})
    return SimpleNamespace(cluster=None, qos=qos, controller=None, port_counters=lambda: {},
                           stop_qos=lambda since=None: None, ecn_marks=lambda: None)


@pytest.mark.parametrize("where", ["port_counters", "Injector.start"])
def test_a_ctrl_c_while_the_replay_starts_stops_every_thread_it_started(monkeypatch, where):
    """CI: a `run` interrupted at 3.2 s tore the network down under a sampler started just before the
    interruption, outside the block that stops it ('the CPU sampler stopped ... NoneType has no stats')."""
    net = _fake_net()

    def interrupt(*_a, **_k):
        raise _Interrupted

    if where == "port_counters":
        net.port_counters = interrupt
    else:
        monkeypatch.setattr(runner.Injector, "start", interrupt)
    monkeypatch.setattr(runner, "queue_records", lambda *_a: {})
    p = SimpleNamespace(events=[], exp=SimpleNamespace(time=SimpleNamespace(skip_compute=False)))
    rec = RunRecord("v", 0, Watch())
    with pytest.raises(_Interrupted):
        runner._replay(net, p, [], rec)
    alive = [t.name for t in threading.enumerate() if t.name.startswith("hpnlab-")]
    assert not alive, alive
