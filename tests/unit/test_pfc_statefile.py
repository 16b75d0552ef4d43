"""The PFC agent's state file is written off its loop (testbed/qos/pfc_statefile.py): handing a state over never
waits for the file system, and what is on disk at the end is the newest state."""

from __future__ import annotations

import json
import threading
import time

from testbed.qos import pfc_statefile
from testbed.qos.pfc_statefile import StateWriter


def test_put_returns_while_the_file_system_holds_the_writer_and_the_newest_state_is_written(tmp_path, monkeypatch):
    held, entered = threading.Event(), threading.Event()
    real = pfc_statefile.write_file

    def slow_write(path, data, field):  # a rename waiting on the run directory's lock, as measured
        entered.set()
        held.wait(10)
        return real(path, data, field)

    monkeypatch.setattr(pfc_statefile, "write_file", slow_write)
    w = StateWriter(tmp_path / "run.pfc.json")
    w.put({"paused": ["a"]})
    assert entered.wait(10)
    t0 = time.monotonic()
    for i in range(1000):
        w.put({"paused": [f"q{i}"]})
    assert time.monotonic() - t0 < 5.0  # the loop's side never waited for the blocked write
    held.set()
    w.close()
    assert json.loads((tmp_path / "run.pfc.json").read_text()) == {"paused": ["q999"]}
    assert w.writes == 2  # the first, then the thousand folded into one
    assert not (tmp_path / "run.pfc.tmp").exists()


def test_a_write_that_fails_is_logged_and_the_writer_goes_on(tmp_path, caplog):
    w = StateWriter(tmp_path / "gone" / "run.pfc.json")
    w.put({"paused": []})
    w.close()
    assert w.writes == 0 and "PFC state file not written" in caplog.text
